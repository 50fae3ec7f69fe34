// The `burst` executable: the only reader of argv; owns MPI init, finalize and abort.
// Every rank parses the same argv (no broadcast). Errors: rank-tagged message on stderr;
// with more than one rank a failure after communication started aborts the job so no peer
// hangs (docs/style.md rule 5); library calls validate collectively before the first message.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "build_info.h"
#include "burst/attention.h"
#include "burst/error.h"
#include "commands.h"

namespace {

class MpiSession {
 public:
  MpiSession(int& argc, char**& argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
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

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(argc, argv);
  CLI::App app{"burst: exact context-parallel attention over MPI (BurstAttention and peers)"};
  app.set_version_flag("--version", burst::cli::version_line());
  app.require_subcommand(1);
  burst::cli::add_info_command(app);
  burst::cli::add_plan_command(app);
  burst::cli::add_bench_command(app);
  burst::cli::add_simulate_command(app);
  burst::cli::add_calibrate_command(app);
  burst::cli::add_report_command(app);
#ifdef BURST_HAVE_LM
  burst::cli::add_lm_commands(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = (mpi.rank() == 0) ? app.exit(e) : (e.get_exit_code());
    return code;
  } catch (const burst::Error& e) {
    std::fprintf(stderr, "[rank %d/%d] error: %s\n", mpi.rank(), mpi.size(), e.what());
    // Library errors raised before communication carry the same verdict on every rank, so all
    // ranks reach this point; an abort is needed only when a peer may be blocked in MPI.
    if (e.kind() == burst::ErrorKind::Communication || e.kind() == burst::ErrorKind::Internal) {
      if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d/%d] fatal: %s\n", mpi.rank(), mpi.size(), e.what());
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  return 0;
}
