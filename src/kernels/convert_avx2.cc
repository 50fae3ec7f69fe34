// AVX2 + F16C converters (compiled with -mavx2 -mf16c only; src/CMakeLists.txt). Eight values
// per step, the portable table for the tail (never the inline scalar functions of burst/tensor.h:
// an out-of-line copy compiled here with -mavx2 could be the one the linker keeps for every
// TU); bitwise equal to the portable table
// (tests/test_convert.cc).
#include <immintrin.h>

#include "kernels/convert.h"

namespace burst::kernels {
namespace {

void widen_bf16(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)));
  }
  if (i < n) converters_portable().widen_bf16(src + i, dst + i, n - i);
}

void widen_f16(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  if (i < n) converters_portable().widen_f16(src + i, dst + i, n - i);
}

void narrow_bf16(const float* src, std::uint16_t* dst, std::int64_t n) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(half, lsb)), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
    // 8 × u32 (each ≤ 0xffff) → 8 × u16: pack within lanes, then gather the two low quadwords.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  if (i < n) converters_portable().narrow_bf16(src + i, dst + i, n - i);
}

void narrow_f16(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  if (i < n) converters_portable().narrow_f16(src + i, dst + i, n - i);
}

}  // namespace

const Converters& converters_avx2() {
  static const Converters table{Isa::Avx2, widen_bf16, widen_f16, narrow_bf16, narrow_f16};
  return table;
}

}  // namespace burst::kernels
