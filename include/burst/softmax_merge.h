// burst/softmax_merge.h — the online softmax and the (out, lse) merge: the only place this math lives.
//
// Owns: (1) the running-state step of the online softmax used inside a kernel across KV tiles
// (merge form A, docs/algorithm.md §2: running max m, running sum l, unnormalised
// accumulator), and (2) merge form B, combining normalised partial results (O_j, lse_j) from
// different KV blocks — what every distributed strategy does across ring steps.
// Invariants: all factors have exponent ≤ 0 (no overflow); −inf − (−inf) never happens; a row
// that saw no key keeps O = 0, lse = −inf. Does not: compute attention or communicate.
#pragma once

#include <cmath>
#include <limits>

#include "burst/tensor.h"

namespace burst {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Online-softmax max update (form A). Given the running max m and a tile's row max m_tile,
/// sets m ← max(m, m_tile) and returns the factor exp(m_old − m_new) by which the running sum
/// and accumulator must be rescaled. Returns 1 when both are −inf (nothing seen yet: the
/// accumulator is 0 and stays 0). Source: FlashAttention-2 (Dao 2023) Alg. 1 lines 8–10.
inline float online_softmax_rescale(float& m, float m_tile) {
  const float m_new = m_tile > m ? m_tile : m;
  const float alpha = (m_new == kNegInf) ? 1.0f : std::exp(m - m_new);
  m = m_new;
  return alpha;
}

/// Final lse of a row from its running state: m + log(l), or −inf when l == 0 (no key seen).
inline float online_softmax_lse(float m, float l) { return l > 0.0f ? m + std::log(l) : kNegInf; }

/// Reciprocal used to normalise the accumulator: 1/l, or 0 when l == 0 (so O = 0, never NaN).
inline float online_softmax_inv_sum(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

/// Form B weights for merging (O_a, lse_a) with (O_b, lse_b) into (O, lse):
///   lse = max + log1p(exp(−|lse_a − lse_b|)),  O = w_a·O_a + w_b·O_b,
///   w_a = exp(lse_a − lse), w_b = exp(lse_b − lse).
/// Both −inf → lse = −inf, w_a = 1, w_b = 0 (O_a, which must be 0, is kept).
/// Source: docs/algorithm.md §2 "Merge form B" (BurstAttention code path for FlashAttention-2).
/// Host and CUDA device code (BURST_HOST_DEVICE): the CUDA merge calls this very function.
struct MergeWeights {
  float lse, w_a, w_b;
};
BURST_HOST_DEVICE inline MergeWeights merge_weights(float lse_a, float lse_b) {
  const float mx = lse_a > lse_b ? lse_a : lse_b;
  if (mx == kNegInf) return {kNegInf, 1.0f, 0.0f};
  const float lse = mx + std::log1p(std::exp(-std::fabs(lse_a - lse_b)));
  return {lse, std::exp(lse_a - lse), std::exp(lse_b - lse)};
}

/// Merges a partial result into a running one, in place, row by row (form B).
/// Shapes: out, out_part [B, S, H, D] (BSHD, any strides, D contiguous);
///         lse, lse_part [B, H, S] fp32, natural log, contiguous.
/// Preconditions: same shapes; out is 0 wherever lse is −inf. Not collective.
/// Throws: Error(InvalidArgument) on shape mismatch. Cost: O(B·S·H·D), no extra memory.
void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                   const TensorView& lse_part);

/// Same merge in double precision on plain arrays of `rows` rows of `D` values; the oracle's
/// and the tests' twin of merge_forward. out/out_part are [rows, D], lse/lse_part [rows].
void merge_rows_reference(double* out, double* lse, const double* out_part, const double* lse_part, long rows,
                          long D);

}  // namespace burst
