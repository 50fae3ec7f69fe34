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
///        [--emulate-slow-rank R ... --slow-factor F]
/// Per pass (rank 0 prints; pass "both" prints fwd, bwd and fwd+bwd): seconds = median over
/// repeats of the max over ranks (fwd+bwd: of a rank's forward + backward; a rank's backward
/// starts when its own forward ends, so pass "both"'s bwd record includes the time a rank that
/// left the forward early waits for one still in it: --pass bwd times the backward alone);
/// gflops = whole-problem FLOP (4·B·H·D·visible pairs forward, 2.5× backward) / seconds;
/// bytes_sent = max over ranks of the pass's counted payload bytes (and the plan's prediction);
/// exposed_comm_seconds = median of the max over ranks of time blocked on communication;
/// exposed_beyond_busiest_seconds = median of the pass's seconds minus the busiest rank's busy
/// time (max over ranks of a rank's wall minus its waits): the waiting that lengthens the pass,
/// 0 when the busiest rank never waits (the rest of exposed_comm_seconds is ranks waiting for
/// the busiest one, which no schedule of the same work removes); balance = max/mean over ranks
/// of kernel (compute) seconds; rank_cpu_seconds = median of the max over ranks of the pass's
/// process CPU time (on a shared machine the wall time also counts time other jobs took).
/// --timeline FILE: every timed pass's per-rank, per-step records (DistConfig::timeline;
/// bench_timeline.h) as JSON lines, bench = "timeline"; `burst report FILE` draws them.
/// --emulate-slow-rank R --slow-factor F: rank R (repeatable; −1 the last) runs on a SlowDevice
/// (bench/slow_device.h): each step kernel spins on until it took F × its CPU time, a core
/// slower by F emulated deterministically; the records carry slow_ranks and slow_factor. CPU only.
/// --device cuda: the tensors and passes on each rank's GPU (bench/gpu.h: local rank modulo the
/// GPUs); the records add device, gpu_name, gpu_index and gpu_seconds (median over repeats of the
/// max over ranks of CUDA-event time on the passes' stream).
/// Collective: every rank parses the same argv. Throws: burst::Error on bad options.
void add_dist_bench(CLI::App& bench);

}  // namespace burst::bench
