// src/device/out_synth.h — a stand-in output row O' with rowsum(dO ∘ O') = delta (internal;
// docs/gpu.md § cuDNN). Host and device code (BURST_HOST_DEVICE): the CUDA kernel
// (device/cuda/elementwise.cu: synthesize_out) and its host twin run these very functions.
//
// Why: a fused SDPA backward (cuDNN's) reads the global out O only to form delta = rowsum(dO ∘ O)
// itself; it takes no delta. Where a step holds dO and delta but not O (burst's query-side
// backward sends q, dout, lse and delta, not out), any O' with rowsum(dO ∘ O') = delta gives the
// same backward. This one spreads delta evenly over the row in the ℓ1 sense:
//
//   O'_d = sign(dO_d) · delta / ‖dO‖₁          (a row with dO = 0 gets O' = 0; its delta is 0)
//
// computed as c = (delta / m) / n with m = max_d |dO_d| and n = Σ_d |dO_d| / m ∈ [1, D] in fp32
// (scaled by m so that no sum over- or underflows), then O'_d = ±c rounded to the operand dtype.
//
// Range: |O'_d| = |delta| / ‖dO‖₁ ≤ max_d |O_d| for the O delta came from (|delta| ≤ ‖dO‖₁ ·
// max|O|), and O is a convex combination of V's rows: O' fits the operand dtype wherever O does.
//
// Error (u = the operand dtype's unit roundoff, 2⁻⁸ bf16, 2⁻¹¹ f16; ε = 2⁻²⁴): each |dO_d| / m is
// rounded once and n sums D of them, so n = n̂(1 + θ_n), |θ_n| ≤ (D + 1)ε; c carries two more
// divisions; each O'_d one rounding to the dtype, |η_d| ≤ u. Hence, exactly,
//   Σ_d dO_d · O'_d = delta · (1 + θ),   |θ| ≤ u + (D + 3)ε  (to first order),
// and a consumer that sums dO_d · O'_d in fp32 adds at most Dε more: every term has delta's sign,
// so the sum has no cancellation. Where O'_d falls below the dtype's normal range its rounding is
// absolute, at most half its smallest subnormal σ (2⁻²⁵ f16, 2⁻¹³⁴ bf16) per element:
//   |delta_seen − delta| ≤ (u + (2D + 3)ε) · |delta| + σ · ‖dO‖₁.
// The real out rounded to the dtype (what the consumer would read otherwise) perturbs delta by up
// to u · Σ_d |dO_d| |O_d| ≥ u · |delta|: the stand-in is never the less accurate of the two.
// tests/test_out_synth.cc holds the host twin to this bound; test_cuda_cudnn the GPU's.
#pragma once

#include <cstdint>

#include "burst/tensor.h"

namespace burst::device {

/// The bound above on |Σ_d dO_d · O'_d − delta| for a row of length D (fp32 sum included), with
/// u and σ of the dtype O' is stored in. l1 = ‖dO‖₁.
inline double out_synth_delta_bound(double delta, double l1, std::int64_t D, DType dtype) {
  const double eps = 0x1p-24;
  const double u = dtype == DType::BF16 ? 0x1p-8 : dtype == DType::F16 ? 0x1p-11 : eps;
  const double sigma = dtype == DType::BF16 ? 0x1p-134 : dtype == DType::F16 ? 0x1p-25 : 0x1p-150;
  const double rel = u + static_cast<double>(2 * D + 3) * eps;
  // the first-order bound with room for its higher-order terms (a few rel², under 5 % of rel for
  // rel ≤ 2⁻⁷), and an fp32 scale c below the normal range (absolute 2⁻¹⁴⁹ of c, times ‖dO‖₁)
  return 1.05 * rel * (delta < 0 ? -delta : delta) + (sigma + 0x1p-149) * l1;
}

/// The scale c of one row: O'_d = ±c. row(d) reads dO_d as float (exact: bf16, f16 or fp32
/// values); D ≥ 0. Returns 0 for a row with dO = 0.
template <typename Row>
BURST_HOST_DEVICE inline float out_synth_scale(const Row& row, std::int64_t D, float delta) {
  float m = 0.0f;
  for (std::int64_t d = 0; d < D; ++d) {
    const float a = row(d) < 0.0f ? -row(d) : row(d);
    m = a > m ? a : m;
  }
  if (!(m > 0.0f)) return 0.0f;  // dO = 0 (or NaN, which the callers refused at the boundary)
  float n = 0.0f;
  for (std::int64_t d = 0; d < D; ++d) {
    const float a = row(d) < 0.0f ? -row(d) : row(d);
    n = n + a / m;  // a quotient, then a sum: nothing for a compiler to contract into an FMA
  }
  return delta / m / n;
}

/// O'_d from the row's scale: +c, −c or 0 with dO_d's sign, as fp32 (the caller rounds once to
/// the operand dtype).
BURST_HOST_DEVICE inline float out_synth_value(float dout_d, float scale) {
  return dout_d > 0.0f ? scale : dout_d < 0.0f ? -scale : 0.0f;
}

}  // namespace burst::device
