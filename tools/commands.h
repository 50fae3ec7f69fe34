// tools/commands.h — the `burst` command line: one function per subcommand family.
// Each add_* registers a CLI11 subcommand whose callback does the work and throws
// burst::Error on failure; main.cc owns MPI init/finalize/abort and error reporting.
#pragma once

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace burst::cli {

void add_info_command(CLI::App& app);       // cmd_info.cc: version, compiler, MPI, ISA, BLAS
void add_plan_command(CLI::App& app);       // cmd_plan.cc: the pure plan of a distributed attention
void add_bench_command(CLI::App& app);      // cmd_bench.cc: bench kernel | bench dist
void add_simulate_command(CLI::App& app);   // cmd_simulate.cc: cost model, ranked strategies
void add_calibrate_command(CLI::App& app);  // cmd_calibrate.cc: measure this machine -> cluster spec
void add_report_command(CLI::App& app);     // cmd_report.cc: JSON lines -> PNG figures + markdown
void add_lm_commands(CLI::App& app);        // cmd_lm.cc: train | eval (BURST_HAVE_LM)

/// The BLAS libtorch calls through libblas.so.3 (a Debian alternative: netlib reference BLAS, or
/// OpenBLAS from libopenblas0-*): the file the Fortran symbol sgemm_ resolved to in this process
/// and, for OpenBLAS, its build line and threading model (cmd_info.cc; `burst info`, and the
/// train/eval logs).
nlohmann::json blas_in_use();

}  // namespace burst::cli
