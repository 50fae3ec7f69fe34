// src/kernels/exp2_p16.h — exp2 for probabilities that are rounded to bf16 next (internal).
//
// Owns: the polynomial of Microkernels::probs_bf16 (the bf16 forward's P row) and its scalar
// form, which the AMX-emulated table and the tests use as the vector code's twin.
// Why a shorter polynomial than exp2's (degree 5, ≈ 1.5e-7): P is rounded to bf16 right after
// (relative error up to 2^−9 ≈ 2e-3), so a degree-4 polynomial with a relative error of 2.9e-6
// adds nothing visible to P, and saves one FMA of the ~12 vector operations per 16 scores and one
// step of its dependency chain (probs_bf16 alone on a 96 × 128 tile: 1.08–1.15× less time on one
// core of an Emerald Rapids Xeon, docs/dispatch.md § The bf16 forward between the products).
// Not degree 3 (1.0e-4; a quarter less time than degree 5 in a loop of its own): the row sum l
// is taken from these fp32 values, and lse = m + ln l must stay as accurate as an fp32 result
// (tests/lowp_oracle.h's lse rule, ≈ 1.8e-5 there), which 1.0e-4 per term breaks and 2.9e-6 keeps.
// 2^x = 2^n · p(r), n = round-to-nearest-even(x), r = x − n ∈ [−0.5, 0.5] (exact), p(r) =
// 1 + r·(c1 + r·(c2 + r·(c3 + r·c4))) by Horner with one rounding per FMA; a weighted-least-
// squares (Lawson) minimax fit of the relative error with p(0) = 1, so 2^n·p(r) ≥ 2^−126 is never
// a denormal for x ≥ −126; exactly 0 below −126, for −inf and for NaN (as exp2_nonpos).
#pragma once

#include <cmath>

namespace burst::kernels {

inline constexpr float kExp2P16C1 = 0.693124175f;
inline constexpr float kExp2P16C2 = 0.240240991f;
inline constexpr float kExp2P16C3 = 0.0559064299f;
inline constexpr float kExp2P16C4 = 0.00958285481f;
/// Largest relative error of exp2_p16 against 2^x for x ∈ [−126, 0] (measured on 4·10⁶ points of
/// r with the fp32 evaluation: 2.894e-6), with a margin.
inline constexpr double kExp2P16MaxRelError = 3.1e-6;

/// The scalar twin of the vector exp2 in probs_bf16: bit for bit the same value for x ≥ −126
/// (ldexp and scalef scale exactly), 0 below it, for −inf and for NaN.
inline float exp2_p16(float x) {
  if (!(x >= -126.0f)) return 0.0f;
  const float n = std::nearbyint(x);  // the default rounding mode: to nearest even, as roundscale
  const float r = x - n;
  float p = std::fma(kExp2P16C4, r, kExp2P16C3);
  p = std::fma(p, r, kExp2P16C2);
  p = std::fma(p, r, kExp2P16C1);
  p = std::fma(p, r, 1.0f);
  return std::ldexp(p, static_cast<int>(n));
}

}  // namespace burst::kernels
