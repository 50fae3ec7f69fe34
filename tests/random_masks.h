// tests/random_masks.h — the random one-slice masks and increasing position sets that the span,
// mask and cuDNN classifier tests draw from. A fixed generator: every run draws the same cases.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "burst/mask.h"

namespace burst::test {

/// A linear congruential generator; rnd(n) is in [0, n), n > 0.
class Lcg {
 public:
  explicit Lcg(std::uint64_t seed) : state_(seed) {}
  std::int64_t operator()(std::int64_t n) {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::int64_t>((state_ >> 33) % static_cast<std::uint64_t>(n));
  }

 private:
  std::uint64_t state_;
};

/// A window in tokens: −1 (unbounded) one time in eight, INT64_MAX (as wide as unbounded) one in
/// eight, else [0, max_tokens).
inline std::int64_t random_window(Lcg& rnd, std::int64_t max_tokens) {
  const std::int64_t w = rnd(8);
  return w == 0 ? std::int64_t{-1} : w == 1 ? std::numeric_limits<std::int64_t>::max() : rnd(max_tokens);
}

/// One slice of [0, S)² (S ≥ 2) that starts below S/2 and ends above it on both sides, of any
/// kind, with random windows.
inline MaskSlice random_slice(Lcg& rnd, std::int64_t S, std::int64_t max_window) {
  MaskSlice sl;
  sl.q_begin = rnd(S / 2);
  sl.q_end = S - rnd(S / 2);
  sl.k_begin = rnd(S / 2);
  sl.k_end = S - rnd(S / 2);
  sl.kind = static_cast<SliceKind>(rnd(4));
  sl.window_left = random_window(rnd, max_window);
  sl.window_right = random_window(rnd, max_window);
  return sl;
}

/// How random_positions drew a set.
enum class PositionKind { Contiguous, Zigzag, Striped, Subset };

/// Increasing positions in [0, S), never empty: rank r of P ∈ {2, 3, 4} under a contiguous,
/// zigzag (chunks r and 2P − 1 − r of S / (2P)) or striped layout, or any subset of [0, S).
inline std::vector<std::int64_t> random_positions(Lcg& rnd, std::int64_t S, PositionKind* kind = nullptr) {
  const int P = 2 + static_cast<int>(rnd(3)), r = static_cast<int>(rnd(P));
  const auto k = static_cast<PositionKind>(rnd(4));
  if (kind != nullptr) *kind = k;
  std::vector<std::int64_t> p;
  switch (k) {
    case PositionKind::Contiguous:
      for (std::int64_t i = r * S / P; i < (r + 1) * S / P; ++i) p.push_back(i);
      break;
    case PositionKind::Zigzag: {
      const std::int64_t c = S / (2 * P);
      for (std::int64_t i = r * c; i < (r + 1) * c; ++i) p.push_back(i);
      for (std::int64_t i = (2 * P - 1 - r) * c; i < (2 * P - r) * c; ++i) p.push_back(i);
      break;
    }
    case PositionKind::Striped:
      for (std::int64_t i = r; i < S; i += P) p.push_back(i);
      break;
    case PositionKind::Subset:
      for (std::int64_t i = 0; i < S; ++i)
        if (rnd(2) == 0) p.push_back(i);
  }
  if (p.empty()) p.push_back(rnd(S));
  return p;
}

}  // namespace burst::test
