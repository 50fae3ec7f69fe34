// tools/cli_main.cc — argv parsing, MPI session and error policy shared by `burst` and
// `burst-lm` (cli_main.h). The only place these programs call MPI_Init / MPI_Finalize / MPI_Abort.
#include "cli_main.h"

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "burst/error.h"

namespace burst::cli {
namespace {

class MpiSession {
 public:
  MpiSession() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// The launcher's rank of this process before MPI_Init (Open MPI, PMIx, Hydra/Slurm PMI): a usage
// error or --help is printed once per job, not once per rank. 0 when not launched by mpirun.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

}  // namespace

int run_with_mpi(CLI::App& app, int argc, char** argv) {
  std::optional<MpiSession> mpi;
  // CLI11 runs the main app's parse-complete callback after every option has parsed and been
  // validated, before any subcommand callback: the one point where all of them may need MPI.
  app.parse_complete_callback([&mpi] { mpi.emplace(); });
  const auto rank = [&mpi] { return mpi ? mpi->rank() : launcher_rank(); };
  const auto size = [&mpi] { return mpi ? mpi->size() : 1; };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank() == 0 ? app.exit(e) : e.get_exit_code();
  } catch (const burst::Error& e) {
    std::fprintf(stderr, "[rank %d/%d] error: %s\n", rank(), size(), e.what());
    // Library errors raised before communication carry the same verdict on every rank, so all
    // ranks reach this point; an abort is needed only when a peer may be blocked in MPI.
    if (e.kind() == burst::ErrorKind::Communication || e.kind() == burst::ErrorKind::Internal) {
      if (size() > 1) MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d/%d] fatal: %s\n", rank(), size(), e.what());
    if (size() > 1) MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  return 0;
}

}  // namespace burst::cli
