// AVX2 + FMA microkernels (compiled with -mavx2 -mfma only; see src/CMakeLists.txt).
// 3 rows × 4 ymm GEMM block = 12 accumulators + 3 B vectors + 1 broadcast of the 16 ymm registers
// (the 4th B vector is the FMAs' memory operand): each k step reads its B row as two whole cache
// lines (6×2: one), which measured 1.2–1.35× the 6×2 block in the S = 4096 forward (see git log).
// exp2_nonpos (the softmax entries) builds 2^n in the exponent field and clamps x at −127 only,
// where n + 127 = 0 builds a zero exponent field, so 2^n·p is exactly 0 without a compare and
// mask; exp2 is it clamped at 127 and zero-masked below −126 (4 vector operations more).
#include <immintrin.h>

#include <cstdint>

#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

struct VecT {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int kMaxR = 3, kMaxNV = 4;
  static constexpr int kProbeChains = 12;  // 12 + 2 constants of 16 ymm (Microkernels::fma_probe_chains)
  static constexpr int kPanelR = 6, kPanelNV = 2;  // gemm_packed: 12 accumulators + 2 B + 1 broadcast
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V zero() { return _mm256_setzero_ps(); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float hmax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static V exp2(V x);
  static V exp2_nonpos(V x);
};

#include "kernels/microkernels_impl.h"

// exp2_nonpos's value for x ∈ [−126, 127] (bitwise), zero-masked below −126 and for NaN.
VecT::V VecT::exp2(V x) {
  const V keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  return _mm256_and_ps(exp2_nonpos(_mm256_min_ps(x, _mm256_set1_ps(127.0f))), keep);
}

VecT::V VecT::exp2_nonpos(V x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));  // also −inf and NaN (max returns the constant)
  const V n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const V p = exp2_poly(_mm256_sub_ps(x, n));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace

const Microkernels& microkernels_avx2() {
  static const Microkernels table = make_table(Isa::Avx2);
  return table;
}

}  // namespace burst::kernels
