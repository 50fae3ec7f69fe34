// tools/commands.h — the `burst` and `burst-lm` command lines: one function per subcommand family.
// Each add_* registers a CLI11 subcommand whose callback does the work and throws
// burst::Error on failure; cli_main.cc owns MPI init/finalize/abort and error reporting.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}
namespace burst {
struct ClusterSpec;
}

namespace burst::cli {

void add_info_command(CLI::App& app);       // cmd_info.cc: version, compiler, MPI, ISA
void add_plan_command(CLI::App& app);       // cmd_plan.cc: the pure plan of a distributed attention
void add_bench_command(CLI::App& app);      // cmd_bench.cc: bench kernel | bench dist
void add_simulate_command(CLI::App& app);   // cmd_simulate.cc: cost model, ranked strategies
void add_calibrate_command(CLI::App& app);  // cmd_calibrate.cc: measure this machine -> cluster spec
void add_report_command(CLI::App& app);     // cmd_report.cc: JSON lines -> PNG figures + markdown
void add_lm_commands(CLI::App& app);        // cmd_lm.cc: train | eval | generate | info (burst-lm)

/// `burst calibrate --device cuda` (cmd_calibrate_gpu.cc): the options it reads.
struct GpuCalibrateOptions {
  std::string device = "cuda", cluster = "h200_nvlink_node", name = "calibrated", output;
  std::int64_t seq = 32768, heads = 8, head_dim = 64;
  int repeats = 5;
};
/// Measures the GPU's step-kernel rates into the preset `cluster`'s spec; prints it (and writes
/// `output`). Throws: Error(Unsupported) without CUDA or a GPU; Error(InvalidArgument) otherwise.
void run_calibrate_gpu(const GpuCalibrateOptions& o);
/// Prints a calibrated cluster spec as JSON (2-space indent) to stdout and, when `output` is not
/// empty, writes the same text there (cmd_calibrate.cc). Throws: Error(InvalidArgument) when
/// `output` cannot be opened.
void print_cluster_spec(const ClusterSpec& c, const std::string& output);

}  // namespace burst::cli
