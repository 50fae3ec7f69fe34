// The `burst-lm` executable: the KJV language model (apps/lm) on libtorch — train, eval,
// generate (cmd_lm.cc), and info (the BLAS libtorch calls). Its own program so that `burst`
// does not load libtorch (~1.3 s and 170 MB before main); `burst train|eval|generate` execs it.
// Same argv, MPI and error policy as `burst` (cli_main.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
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
  const int rc = burst::cli::run_with_mpi(app, argc, argv);  // MPI is finalized when it returns
  // Ends without running static destructors: libtorch 2.11's pip wheel (libtorch_cpu.so) aborts
  // in its own exit-time operator deregistration ("free(): invalid pointer" in std::locale's
  // destructor under c10::Dispatcher::deregisterDef_), after the run's results are written.
  // Everything burst-lm writes is closed or flushed by now.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(rc);
}
