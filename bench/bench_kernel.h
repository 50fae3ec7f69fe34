// bench/bench_kernel.h — `burst bench kernel`: the local attention kernel benchmark.
#pragma once

namespace CLI {
class App;
}

namespace burst::bench {

/// Registers `kernel` under the `bench` subcommand:
///   burst bench kernel --batch B --seq S [--seq-kv S_kv] --heads H --kv-heads H_kv --dim D
///        --mask NAME --threads T --pass fwd|bwd|both [--repeats N] [--warmup N]
///        [--impl tiled|reference] [--isa auto|avx512bf16|avx512|avx2|portable] [--block-q N] [--block-kv N]
///        [--device cpu|cuda|cuda:N] [--check-max-seq N]
/// --device cuda times the device seam's step kernels on a GPU instead (bench/gpu.h; CUDA builds,
/// else Error(Unsupported) naming the build).
/// NAME is one of the 14 benchmark masks (burst/mask.h) over S tokens. Prints one JSON line per
/// pass (see docs/design.md "Local kernel" for the fields). Throws: burst::Error on bad values.
void add_kernel_bench(CLI::App& bench);

}  // namespace burst::bench
