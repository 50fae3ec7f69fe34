// AVX-512F microkernels (compiled with -mavx512f -mavx2 -mfma only, what detect_isa() checks;
// see src/CMakeLists.txt). 6 rows × 4 zmm GEMM block = 24 accumulators + 4 B vectors + 1
// broadcast of the 32 zmm registers. exp2 scales by 2^n with vscalefps and zero-masks x < −126;
// the softmax entries' exp2_nonpos is exp2 here (the clamp-only form, AVX2's, saves the compare and
// the min, and waits for a measurement on an AVX-512 host).
// GCC 12 reports its own _mm512_undefined_ps() placeholders inside the reduce/roundscale
// intrinsics as uninitialised (false positive, inlined from avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

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
  static V exp2_nonpos(V x) { return exp2(x); }
};

#include "kernels/microkernels_impl.h"

VecT::V VecT::exp2(V x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-126.0f)), _mm512_set1_ps(127.0f));
  const V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const V p = exp2_poly(_mm512_sub_ps(x, n));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

}  // namespace

const Microkernels& microkernels_avx512() {
  static const Microkernels table = make_table(Isa::Avx512);
  return table;
}

}  // namespace burst::kernels
