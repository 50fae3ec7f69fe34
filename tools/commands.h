// tools/commands.h — the `burst` command line: one function per subcommand family.
// Each add_* registers a CLI11 subcommand whose callback does the work and throws
// burst::Error on failure; main.cc owns MPI init/finalize/abort and error reporting.
#pragma once

namespace CLI {
class App;
}

namespace burst::cli {

void add_info_command(CLI::App& app);         // cmd_info.cc: CPU/ISA/MPI facts
void add_bench_command(CLI::App& app);        // cmd_bench.cc: bench kernel | bench dist

}  // namespace burst::cli
