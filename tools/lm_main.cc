// The `burst-lm` executable: the KJV language model (apps/lm) on libtorch — train, eval,
// generate (cmd_lm.cc), and info (the BLAS libtorch calls). Its own program so that `burst`
// does not load libtorch (~1.3 s and 170 MB before main); `burst train|eval|generate` execs it.
// Same argv, MPI and error policy as `burst` (cli_main.h).
#include <CLI/CLI.hpp>
#include <string>

#include "build_info.h"
#include "burst/version.h"
#include "cli_main.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"burst-lm: the long-context KJV language model on burst (libtorch); run it under mpirun"};
  app.set_version_flag("--version", std::string("burst-lm ") + BURST_VERSION_STRING + " (git " +
                                        burst::cli::build_git_describe() + ")");
  app.require_subcommand(1);
  burst::cli::add_lm_commands(app);
  return burst::cli::run_with_mpi(app, argc, argv);
}
