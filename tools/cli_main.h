// tools/cli_main.h — what the two command-line programs, `burst` (main.cc) and `burst-lm`
// (lm_main.cc), share: parsing argv with CLI11, MPI init and finalize, and the error policy.
// MPI starts only once argv has parsed, so `--version`, `--help` and usage errors return in
// milliseconds (an Open MPI singleton init costs ~0.4 s); every subcommand callback runs with
// MPI initialized.
#pragma once

namespace CLI {
class App;
}

namespace burst::cli {

/// Parses argv with `app` (subcommands registered), initializes MPI (MPI_THREAD_FUNNELED) when
/// parsing has succeeded, runs the chosen subcommand's callback and finalizes MPI. Returns the
/// process exit code: 0, CLI11's code for a usage error (message on rank 0), 2 for a
/// burst::Error, 3 for any other exception (rank-tagged message on stderr). With more than one
/// rank, a Communication or Internal error and any other exception abort the job (MPI_Abort), as
/// a peer may be blocked in MPI; errors raised before the first message carry the same verdict on
/// every rank, which all return. Collective: every rank of the job calls it with the same argv.
int run_with_mpi(CLI::App& app, int argc, char** argv);

}  // namespace burst::cli
