// The `burst` executable: the only reader of argv; owns MPI init, finalize and abort
// (cli_main.h). Every rank parses the same argv (no broadcast). Errors: rank-tagged message on
// stderr; with more than one rank a failure after communication started aborts the job so no
// peer hangs (docs/style.md rule 5); library calls validate collectively before the first message.
// `burst` does not link libtorch: the language model is the program `burst-lm` (lm_main.cc), and
// `burst train | eval | generate ...` replaces this process with it (before MPI starts).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "build_info.h"
#include "cli_main.h"
#include "commands.h"

namespace {

bool is_lm_command(const char* arg) {
  return std::strcmp(arg, "train") == 0 || std::strcmp(arg, "eval") == 0 || std::strcmp(arg, "generate") == 0;
}

// Runs `burst-lm <argv[1..]>` in place of this process. burst-lm sits beside burst, in the build
// tree (<build>/tools/) and when installed (<prefix>/bin/). Returns only on failure.
int exec_burst_lm(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path lm = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "burst-lm";
  std::vector<char*> args{const_cast<char*>(lm.c_str())};
  for (char** a = argv + 1; *a != nullptr; ++a) args.push_back(*a);
  args.push_back(nullptr);
  execv(lm.c_str(), args.data());
  std::fprintf(stderr,
               "burst %s: the language model is the program burst-lm, expected at %s (%s). It is built "
               "with libtorch-dev and libsentencepiece-dev (scripts/setup.sh installs them; "
               "-DBURST_WITH_TORCH=AUTO or ON).\n",
               argv[1], lm.c_str(), std::strerror(errno));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && is_lm_command(argv[1])) return exec_burst_lm(argv);
  CLI::App app{"burst: exact context-parallel attention over MPI (BurstAttention and peers)"};
  app.set_version_flag("--version", burst::cli::version_line());
  app.require_subcommand(1);
  app.footer(
      "The KJV language model is the program burst-lm (train, eval, generate); "
      "`burst train|eval|generate ...` runs it.");
  burst::cli::add_info_command(app);
  burst::cli::add_plan_command(app);
  burst::cli::add_bench_command(app);
  burst::cli::add_simulate_command(app);
  burst::cli::add_calibrate_command(app);
  burst::cli::add_report_command(app);
  return burst::cli::run_with_mpi(app, argc, argv);
}
