#include <CLI/CLI.hpp>

#include "commands.h"

namespace burst::cli {
void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "benchmarks (JSON lines)"); }
}  // namespace burst::cli
