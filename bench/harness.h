// bench/harness.h — the one benchmark harness: warm-up + timed repeats, median/min/max,
// JSON-line output, and the FLOP formulas every benchmark states.
//
// Benchmarks are data (docs/style.md rule 15): each case prints ONE JSON object per line with its
// full resolved configuration, the timing summary (seconds = median) and gflops from a stated
// formula. Distributed benchmarks time on every rank, reduce the samples (max over ranks per
// repeat) and then call summarize() — the harness itself never communicates.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "burst/splitmix64.h"
#include "burst/tensor.h"

namespace burst::bench {

/// Seconds of steady_clock since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds on a POSIX CPU-time clock: CLOCK_PROCESS_CPUTIME_ID (every thread of the process) or
/// CLOCK_THREAD_CPUTIME_ID (the calling thread only).
double cpu_clock_seconds(clockid_t clock);

/// Fills t with uniform [−1, 1) from SplitMix64 (seeded: the same values on every rank and
/// platform, no dependence on <random> versions).
inline void fill_uniform(Tensor& t, std::uint64_t seed) {
  SplitMix64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  for (float& x : t.vec()) x = static_cast<float>(2 * rng.uniform() - 1);
}

/// A new fp32 tensor of `shape` filled by fill_uniform(seed).
inline Tensor uniform_tensor(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  Tensor t(shape);
  fill_uniform(t, seed);
  return t;
}

/// A benchmark operand stored as `dtype`: the given fp32 values, rounded once (to nearest even)
/// for bf16/f16. `view` points at the stored data (f32 → values' own memory). Not copyable.
struct StoredTensor {
  Tensor f32;
  std::vector<std::uint16_t> bits;
  TensorView view;
  StoredTensor(Tensor values, DType dtype) : f32(std::move(values)) {
    view = f32.view();
    if (dtype == DType::F32) return;
    bits.resize(static_cast<std::size_t>(f32.numel()));
    view = make_view(bits.data(), dtype, f32.shape());
    convert(f32.view(), view);
    f32 = Tensor();
  }
  StoredTensor(const StoredTensor&) = delete;
  StoredTensor& operator=(const StoredTensor&) = delete;
};

struct TimingOptions {
  int warmup = 1;   ///< untimed runs first (page faults, caches, OpenMP thread start)
  int repeats = 5;  ///< timed runs; ≥ 1
  /// Run after each timed run, outside its timing (e.g. a probe of the FMA rate beside it).
  std::function<void()> after_each;
};

/// Summary of timed samples, in seconds.
struct Timing {
  double median = 0, min = 0, max = 0;
  int repeats = 0;
  std::vector<double> samples;
  std::vector<double> cpu_samples;  ///< CPU seconds of each timed run, in run order
  /// Median CPU time of the process per repeat (all threads, CLOCK_PROCESS_CPUTIME_ID), when
  /// measured (0 otherwise). On a shared machine wall/CPU < 1 shows time lost to other jobs; for
  /// one thread flop / cpu_median estimates the rate on an idle core.
  double cpu_median = 0;
};

/// Median (mean of the middle two for even counts), min and max of samples (seconds).
/// Throws: Error(InvalidArgument) when samples is empty.
Timing summarize(std::vector<double> samples);

/// Runs fn warmup times untimed, then repeats times under a steady clock; returns the summary.
/// Throws: Error(InvalidArgument) for repeats < 1 or warmup < 0; whatever fn throws.
Timing time_runs(const std::function<void()>& fn, const TimingOptions& opt);

/// Adds seconds (median), seconds_min, seconds_max, repeats, cpu_seconds, and — when flop > 0 —
/// flop, gflops (= flop / median / 1e9), gflops_best (from min) and gflops_cpu (= flop / CPU
/// seconds, per thread-second × threads is left to the reader) to a JSON record.
void add_timing(nlohmann::json& record, const Timing& t, double flop);

/// Prints one JSON object on one line to stdout and flushes (so partial sweeps survive).
void print_json_line(const nlohmann::json& record);

/// 1-minute load average from /proc/loadavg (−1 if unreadable): recorded with every result
/// because this machine is shared and noisy (docs/machine.md §1).
double load_average_1m();

// FLOP formulas (stated in every record as flop_formula).
inline constexpr const char* kAttentionForwardFlopFormula = "4*B*H*D*visible_pairs";
inline constexpr const char* kAttentionBackwardFlopFormula = "2.5*4*B*H*D*visible_pairs";
/// Forward attention: two GEMM-like products (QKᵀ and PV), 2 flop per multiply-add, over the
/// visible (q, k) pairs of the mask: 4·B·H·D·pairs (FlashAttention's convention).
inline double attention_forward_flop(std::int64_t B, std::int64_t H, std::int64_t D,
                                     std::int64_t visible_pairs) {
  return 4.0 * static_cast<double>(B) * static_cast<double>(H) * static_cast<double>(D) *
         static_cast<double>(visible_pairs);
}
/// Backward: five products (S recompute, dP, dV, dK, dQ) = 2.5× the forward.
inline double attention_backward_flop(std::int64_t B, std::int64_t H, std::int64_t D,
                                      std::int64_t visible_pairs) {
  return 2.5 * attention_forward_flop(B, H, D, visible_pairs);
}

}  // namespace burst::bench
