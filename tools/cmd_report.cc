// `burst report` — turns matrix-benchmark JSON lines (and `burst bench dist --timeline` records:
// a Gantt chart per pass) into PNG figures and a markdown table by
// running report.py from the data directory (<share dir>/report.py, a copy of scripts/report.py)
// with a Python that has matplotlib (MPLBACKEND=Agg): --python, else the environment's
// BURST_PYTHON, else the interpreter the build was configured with (CMake's Python3_EXECUTABLE).
// Rank 0 only; other ranks return at once.
#include <spawn.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "bench/cluster_spec_io.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "commands.h"

extern char** environ;

namespace burst::cli {

namespace {

struct ReportOptions {
  std::vector<std::string> inputs;
  std::string out = "report";
  std::string python = BURST_PYTHON_EXECUTABLE;
  std::string script = (bench::share_dir() / "report.py").string();
};

void run_report(const ReportOptions& o) {
  if (Communicator::world().rank() != 0) return;
  std::vector<std::string> args = {o.python, o.script};
  args.insert(args.end(), o.inputs.begin(), o.inputs.end());
  args.push_back("-o");
  args.push_back(o.out);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store = {"MPLBACKEND=Agg"};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("MPLBACKEND=", 0) != 0) env_store.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  // posix_spawnp: a bare name (--python python3) is looked up on PATH.
  const int rc = posix_spawnp(&pid, o.python.c_str(), nullptr, nullptr, argv.data(), envp.data());
  BURST_CHECK(rc == 0, InvalidArgument, "report: cannot start ", o.python, " (posix_spawn error ", rc, ")");
  int status = 0;
  waitpid(pid, &status, 0);
  BURST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, InvalidArgument, "report: ", o.script,
              " failed (exit status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")");
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto opt = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand(
      "report", "JSON lines of `burst bench matrix` or `bench dist --timeline` -> PNG figures + report.md");
  cmd->add_option("inputs", opt->inputs, "JSON lines files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", opt->out, "output directory")->capture_default_str();
  cmd->add_option("--python", opt->python, "Python with matplotlib")
      ->envname("BURST_PYTHON")
      ->capture_default_str();
  cmd->add_option("--script", opt->script, "report script")->capture_default_str();
  cmd->callback([opt] { run_report(*opt); });
}

}  // namespace burst::cli
