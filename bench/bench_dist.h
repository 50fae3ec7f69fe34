// bench/bench_dist.h — `burst bench dist`: one distributed attention case (one strategy, layout,
// mask, shape) under mpirun, forward / backward / both, one JSON line per pass.
#pragma once

namespace CLI {
class App;
}

namespace burst::bench {

/// Registers `dist` under the `bench` subcommand:
///   mpirun -n P burst bench dist --strategy NAME --layout NAME --seq S --heads H --kv-heads H_kv
///        --dim D --mask NAME --threads T --pass fwd|bwd|both [--batch B] [--repeats N]
///        [--warmup N] [--ranks-per-node L] [--backward-side auto|query|kv] [--no-overlap]
///        [--no-double-ring] [--timeline FILE] [--device cpu|cuda|cuda:N]
/// Per pass (rank 0 prints; pass "both" prints fwd, bwd and fwd+bwd): seconds = median over
/// repeats of the max over ranks; gflops = whole-problem FLOP (4·B·H·D·visible pairs forward,
/// 2.5× backward) / seconds; bytes_sent = max over ranks of the pass's counted payload bytes
/// (and the plan's prediction); exposed_comm_seconds = median of the max over ranks of time
/// blocked on communication; balance = max/mean over ranks of kernel (compute) seconds;
/// rank_cpu_seconds = median of the max over ranks of the pass's process CPU time (on a shared
/// machine the wall time also counts time other jobs took).
/// --timeline FILE: every timed pass's per-rank, per-step records (DistConfig::timeline;
/// bench_timeline.h) as JSON lines, bench = "timeline"; `burst report FILE` draws them.
/// --device cuda: the tensors and passes on each rank's GPU (bench/gpu.h: local rank modulo the
/// GPUs); the records add device, gpu_name, gpu_index and gpu_seconds (median over repeats of the
/// max over ranks of CUDA-event time on the passes' stream).
/// Collective: every rank parses the same argv. Throws: burst::Error on bad options.
void add_dist_bench(CLI::App& bench);

}  // namespace burst::bench
