// `burst bench <case>`: benchmarks printing JSON lines (bench/harness.h). Each case family
// registers itself under the `bench` subcommand: kernel (bench/bench_kernel.h); a distributed
// family adds its own add_*_bench(bench) call here.
#include <CLI/CLI.hpp>

#include "bench/bench_decode.h"
#include "bench/bench_dist.h"
#include "bench/bench_kernel.h"
#include "bench/bench_matrix.h"
#include "commands.h"

namespace burst::cli {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks (one JSON object per line)");
  bench->require_subcommand(1);
  burst::bench::add_kernel_bench(*bench);
  burst::bench::add_matrix_bench(*bench);
  burst::bench::add_dist_bench(*bench);
  burst::bench::add_decode_bench(*bench);
}

}  // namespace burst::cli
