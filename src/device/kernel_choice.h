// src/device/kernel_choice.h — which of several kernels runs a step, by measured speed (internal;
// docs/gpu.md § Auto).
//
// Owns: KernelChooser, a cache from a step key (the numbers that decide a kernel's speed: pass,
// dtype, shapes, strides class, mask verdict, ...) to the kernel chosen for it, and the rule that
// chooses: each candidate timed once, at the key's first use, by a caller-given function; the
// fastest wins; a candidate that refuses the step is skipped. Plain host code with the timings
// injected, so the rule is tested everywhere (tests/test_kernel_choice.cc); a GPU device
// (device/cuda/cuda_device.cc) times its kernels with CUDA events and asks this class.
// Does not: run or time anything itself; know what the kernels are (candidates are ints).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace burst::device {

class KernelChooser {
 public:
  using Key = std::vector<std::int64_t>;
  /// The time of candidate `c` on the key's step in milliseconds (a median of a few runs), or
  /// nullopt when it refuses the step. A time that is not finite and ≥ 0 counts as a refusal.
  /// May throw: the error propagates and nothing is cached for the key.
  using TimeFn = std::function<std::optional<double>(int c)>;

  /// What was chosen for a key, and why.
  struct Choice {
    int kernel = -1;
    bool measured = false;  ///< false: one candidate (or none), nothing timed
    std::vector<std::pair<int, std::optional<double>>> timings;  ///< per candidate, in order
  };

  /// The kernel for `key`: the cached choice when the key was seen; else, with one candidate,
  /// that one (untimed); with none, `fallback`; else every candidate timed in order and the
  /// fastest taken — a tie goes to the earlier candidate (list them in preference order), a
  /// refusal is skipped, and when all refuse, `fallback`. The choice is cached for the key.
  int choose(const Key& key, const std::vector<int>& candidates, int fallback, const TimeFn& time);
  /// The cached choice for key, or null.
  const Choice* find(const Key& key) const;
  /// Keys cached, and how many of them were timed.
  std::size_t size() const noexcept { return cache_.size(); }
  /// Per kernel chosen, the number of keys it was chosen for.
  std::map<int, std::int64_t> chosen_counts() const;
  /// Every cached key and its choice, in key order.
  const std::map<Key, Choice>& entries() const noexcept { return cache_; }
  std::int64_t measured() const noexcept { return measured_; }

 private:
  std::map<Key, Choice> cache_;
  std::int64_t measured_ = 0;
};

/// The median of `times` (the upper one of an even count); 0 for none.
double median_of(std::vector<double> times);

}  // namespace burst::device
