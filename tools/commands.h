// tools/commands.h — the `burst` and `burst-lm` command lines: one function per subcommand family.
// Each add_* registers a CLI11 subcommand whose callback does the work and throws
// burst::Error on failure; cli_main.cc owns MPI init/finalize/abort and error reporting.
#pragma once

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace burst::cli {

void add_info_command(CLI::App& app);       // cmd_info.cc: version, compiler, MPI, ISA
void add_plan_command(CLI::App& app);       // cmd_plan.cc: the pure plan of a distributed attention
void add_bench_command(CLI::App& app);      // cmd_bench.cc: bench kernel | bench dist
void add_simulate_command(CLI::App& app);   // cmd_simulate.cc: cost model, ranked strategies
void add_calibrate_command(CLI::App& app);  // cmd_calibrate.cc: measure this machine -> cluster spec
void add_report_command(CLI::App& app);     // cmd_report.cc: JSON lines -> PNG figures + markdown
void add_lm_commands(CLI::App& app);        // cmd_lm.cc: train | eval | generate | info (burst-lm)

}  // namespace burst::cli
