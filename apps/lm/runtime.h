// apps/lm/runtime.h — small run-time helpers shared by `burst train` and `burst eval`:
// exact fp64 sums over ranks, peak memory, wall clock, the document mask of a token window.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/mask.h"
#include "data.h"

namespace burst::lm {

/// In-place sum over ranks of fp64 values. burst's Communicator reduces fp32 only, so each
/// value travels as an (hi, lo) fp32 pair (x ≈ hi + lo to ~2⁻⁴⁸ relative), is all-gathered and
/// summed in fp64 in rank order: the result is identical on every rank and for every run.
/// Collective: every rank, same size.
void all_reduce_sum_f64(const Communicator& comm, std::vector<double>& values);

/// Peak resident set size of this process in bytes (getrusage ru_maxrss).
std::int64_t peak_rss_bytes();

/// Seconds since construction.
class Stopwatch {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

/// A window [begin, begin + S) of the corpus as one training/eval sequence, padded to S_padded
/// tokens. inputs[i] = token at begin + i, targets[i] = token at begin + i + 1, weight[i] = 1
/// when that target is the next token of the same book (0 across book boundaries, past the
/// corpus end and on padding). The mask is document-causal over the books clipped to the
/// window; padding forms one extra document.
struct Window {
  std::int64_t begin = 0, S = 0, S_padded = 0;
  std::vector<std::int32_t> cu_seqlens;  ///< window-relative document offsets
  Mask mask;
  std::int64_t num_targets = 0;  ///< Σ weight
};
Window make_window(const Corpus& corpus, std::int64_t begin, std::int64_t S, std::int64_t S_padded);

/// inputs, targets (int64) and weights (fp32) of `positions` (window-relative), filled into
/// caller vectors.
void gather_window(const Corpus& corpus, const Window& w, const std::vector<std::int64_t>& positions,
                   std::vector<std::int64_t>& inputs, std::vector<std::int64_t>& targets,
                   std::vector<float>& weights);

/// Runs f(); if it throws once messages may be in flight, a multi-rank job is aborted with a
/// rank-tagged message (peers may be blocked in a collective and would otherwise hang —
/// docs/style.md rule 5). On one rank the exception propagates.
template <typename F>
auto abort_on_failure(const Communicator& comm, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    if (comm.size() > 1) comm.abort(std::string(what) + " failed: " + e.what());
    throw;
  }
}

/// SplitMix64: the seeded, platform-independent hash behind window choice.
std::uint64_t splitmix64(std::uint64_t x);

}  // namespace burst::lm
