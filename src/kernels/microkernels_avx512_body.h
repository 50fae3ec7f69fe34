// src/kernels/microkernels_avx512_body.h — the AVX-512 vector type over the one template body.
//
// Included INSIDE an anonymous namespace by microkernels_avx512.cc (the AVX-512F table) and by
// microkernels_avx512bf16.cc (the same fp32 entries plus the bf16 ones, whose row kernels call
// VecT's exp2 too), each compiled with its own flags (src/CMakeLists.txt): every function here
// has internal linkage, as microkernels_impl.h requires.
// 6 rows × 4 zmm GEMM block = 24 accumulators + 4 B vectors + 1 broadcast of the 32 zmm
// registers. exp2 takes r = x − n from vreduceps (n = x − r), scales p(r) by 2^n with vscalefps
// and zero-masks x < −126; the softmax entries'
// exp2_nonpos drops exp2's two clamps (two vector operations of ~12): for x ≤ 127 it is exp2
// bit for bit, since x < −126, −inf and NaN are zero-masked anyway (the NaN that −inf or NaN
// leaves in the polynomial is masked out).
// (No #pragma once: intentionally included once per AVX-512 translation unit.)

struct VecT {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int kMaxR = 6, kMaxNV = 4;
  static constexpr int kProbeChains = 16;
  static constexpr int kPanelR = 0, kPanelNV = 0;  // no packed-B entries
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V zero() { return _mm512_setzero_ps(); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static V exp2(V x);
  static V exp2_nonpos(V x);
  /// r = x − n, n = x rounded to the nearest integer (ties to even), exactly; then n = x − r
  /// exactly. One vreduceps (AVX-512 DQ) in place of vrndscaleps and a subtraction: vrndscaleps
  /// is two µops on an Intel core's port 0, where vscalefps runs too; the row kernels built on
  /// exp2 took 1.09–1.18× less time with it (docs/dispatch.md § exp2's range reduction).
  static V reduce_nearest(V x) { return _mm512_reduce_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  /// 2^x = 2^n · poly(r) for x ≥ −126 (n = x − r exact, vscalefps scales exactly), 0 below it,
  /// for −inf and for NaN: exp2_nonpos with exp2's polynomial, P's exp2_p16 with its shorter one.
  template <typename Poly>
  static V exp2_nonpos_by(V x, Poly poly) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
    const V r = reduce_nearest(x);
    return _mm512_maskz_scalef_ps(keep, poly(r), _mm512_sub_ps(x, r));
  }
};

#include "kernels/microkernels_impl.h"

VecT::V VecT::exp2(V x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-126.0f)), _mm512_set1_ps(127.0f));
  const V r = reduce_nearest(x);
  return _mm512_maskz_scalef_ps(keep, exp2_poly(r), _mm512_sub_ps(x, r));
}

VecT::V VecT::exp2_nonpos(V x) {
  return exp2_nonpos_by(x, [](V r) { return exp2_poly(r); });
}
