// tools/cmd_calibrate_internal.h — the parts of `burst calibrate` (the CPU side) shared by
// cmd_calibrate.cc (copy bandwidth, MPI links and collectives, the spec it writes, the command)
// and cmd_calibrate_kernel.cc (the attention kernel's timing: rates and per-call overhead, the
// masking probe, the bf16 speed-up). Internal to the burst_cli target.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "burst/comm.h"
#include "burst/cost_model.h"

namespace burst::cli {

struct CalibrateOptions {
  int threads = 1, repeats = 5;
  std::int64_t heads = 8, head_dim = 64;
  std::vector<std::int64_t> seqs{512, 1024, 2048, 4096};
  std::string name = "calibrated", output;
  std::string device = "cpu", cluster = "h200_nvlink_node";  // --device cuda: cmd_calibrate_gpu.cc
  std::int64_t gpu_seq = 32768;
  double comm_timeout = 300;  // the communication watchdog (burst/comm.h): a rank that never comes
  bool shared_cores = false;  // more ranks on a node than its cores (÷ threads) hold
  // One rank per compute slot (shared cores, the per-call overhead's fit): barriers sleep between
  // polls, and only ranks with `computes` run the kernel while the others sleep.
  bool one_per_slot = false, computes = true;
};

/// Median seconds of `collective` over every rank (each round after `barrier`, comm.barrier() when
/// empty; max over the ranks whose clock `counts`), after one warm-up round. Collective.
double collective_seconds(const Communicator& comm, const std::function<void()>& collective, int rounds,
                          const std::function<void()>& barrier = {}, bool counts = true);

/// The per-Partial-row cost as a line in the head dim, t_row(D) = base + D · per_dim
/// (ClusterSpec::partial_row_seconds[_per_dim]), from the probe at 5/8, 7/8, 1, 11/8 and 7/4 of
/// the calibration's head dim (multiples of 8: 40, 56, 64, 88, 112 at D = 64).
/// Backward: least squares; a negative slope is noise (the mean, flat) and a negative intercept
/// becomes a line through the origin. Its Partial tiles cost about 2.5 ns per
/// row per unit of D here (docs/cost_model.md): one head dim alone carried D = 64's cost to
/// D = 32 at 1.22x and to D = 128 at 0.86x the measured pass.
/// Forward: flat, the median of the five (robust to one noisy round; the probe at one head dim
/// alone moved 59 <-> 113 ns between runs). Its probe also grows with D (about 1 ns per unit),
/// but real masks' forward passes do not follow it: the line predicted D = 32 at 0.74-0.86x and
/// D = 128 at 1.07-1.18x of the measured time (the validation of docs/cost_model.md).
struct RowCost {
  double base = 0, per_dim = 0;
  std::vector<std::pair<std::int64_t, double>> points;  // (D, seconds per row)
};
RowCost partial_row_line(const Communicator& comm, const CalibrateOptions& o, const ClusterSpec& c,
                         std::int64_t S, bool backward);
std::string row_cost_text(const RowCost& f);

/// Weighted least-squares fit (fit_kernel_time) over every calibration length.
KernelFit fit_lengths(const Communicator& comm, const CalibrateOptions& o, bool backward);

/// bf16-operand kernel rate ÷ fp32 rate (ClusterSpec::bf16_speedup_*): the two timed one right
/// after the other at every calibration length, so that the machine's speed drifting between
/// runs does not enter the ratio, and the median of the per-length ratios kept.
double bf16_speedup(const Communicator& comm, const CalibrateOptions& o, bool backward);

}  // namespace burst::cli
