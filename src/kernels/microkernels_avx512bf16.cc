// AVX512-BF16 microkernels: the AVX-512 fp32 table (microkernels_avx512_body.h, compiled here
// again with this file's flags) plus the bf16 dot-product entries (microkernels.h), compiled with
// -mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx512bf16 only (what detect_isa() checks before reporting
// Isa::Avx512Bf16; src/CMakeLists.txt).
// GEMM: 6 rows × 4 zmm block = 24 fp32 accumulators + 4 pair-packed B vectors + 1 broadcast
// pair of A, as the fp32 block; one vdpbf16ps does 16 lanes × 2 multiply-adds, twice the work of
// one fp32 FMA (the ceiling bf16_dot_probe measures).
// Conversions use vcvtneps2bf16: round to nearest even, denormal inputs and outputs flushed to
// zero (the kernels run under FlushDenormals, so fp32 denormals are already zero).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/exp2_p16.h"
#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

#include "kernels/microkernels_avx512_body.h"

constexpr int kW = 16;  // fp32 lanes per zmm = bf16 pairs per zmm
constexpr int kMaxR = 6, kMaxNV = 4;

inline __m512bh pair_broadcast(const std::uint16_t* p) {
  std::int32_t pair = 0;
  std::memcpy(&pair, p, sizeof pair);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
}

// One register block: C[R × NV·16] (+)= alpha · A[R × K] · B[K × NV·16], K even.
template <int R, int NV>
void dot_block(const std::uint16_t* A, std::int64_t lda, const std::uint16_t* Bp, std::int64_t ldb, float* C,
               std::int64_t ldc, int K, bool accumulate, float alpha) {
  __m512 c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) c[r][n] = _mm512_setzero_ps();
  }
  for (int kk = 0; kk < K / 2; ++kk) {
    __m512bh b[NV];
    const std::uint16_t* brow = Bp + kk * ldb;
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) b[n] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(brow + n * 2 * kW));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh a = pair_broadcast(A + r * lda + 2 * kk);
#pragma GCC unroll 8
      for (int n = 0; n < NV; ++n) c[r][n] = _mm512_dpbf16_ps(c[r][n], a, b[n]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) {
      float* p = C + r * ldc + n * kW;
      const __m512 v = _mm512_mul_ps(c[r][n], al);
      _mm512_storeu_ps(p, accumulate ? _mm512_add_ps(_mm512_loadu_ps(p), v) : v);
    }
  }
}

template <int R>
void dot_rows(int nv, const std::uint16_t* A, std::int64_t lda, const std::uint16_t* Bp, std::int64_t ldb,
              float* C, std::int64_t ldc, int K, bool accumulate, float alpha) {
  switch (nv) {
    case 1: dot_block<R, 1>(A, lda, Bp, ldb, C, ldc, K, accumulate, alpha); break;
    case 2: dot_block<R, 2>(A, lda, Bp, ldb, C, ldc, K, accumulate, alpha); break;
    case 3: dot_block<R, 3>(A, lda, Bp, ldb, C, ldc, K, accumulate, alpha); break;
    default: dot_block<R, 4>(A, lda, Bp, ldb, C, ldc, K, accumulate, alpha); break;
  }
}

void gemm_bf16(const std::uint16_t* A, std::int64_t lda, const std::uint16_t* Bp, std::int64_t ldb, float* C,
               std::int64_t ldc, int M, int N, int K, bool accumulate, float alpha) {
  const int nv_total = N / kW;
  for (int v0 = 0; v0 < nv_total; v0 += kMaxNV) {
    const int nv = imin(kMaxNV, nv_total - v0);
    const std::uint16_t* Bv = Bp + 2 * v0 * kW;
    float* Cv = C + v0 * kW;
    for (int m0 = 0; m0 < M; m0 += kMaxR) {
      const std::uint16_t* Am = A + m0 * lda;
      float* Cm = Cv + m0 * ldc;
      switch (imin(kMaxR, M - m0)) {
        case 1: dot_rows<1>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate, alpha); break;
        case 2: dot_rows<2>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate, alpha); break;
        case 3: dot_rows<3>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate, alpha); break;
        case 4: dot_rows<4>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate, alpha); break;
        case 5: dot_rows<5>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate, alpha); break;
        default: dot_rows<6>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate, alpha); break;
      }
    }
  }
}

inline __mmask16 first_lanes(int n) {
  return n >= kW ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

void narrow_rows_bf16(const float* src, std::int64_t lds, std::uint16_t* dst, std::int64_t ldd, int rows,
                      int cols) {
  const int even = cols + (cols & 1);
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    std::uint16_t* d = dst + r * ldd;
    for (int c = 0; c < even; c += kW) {
      const __m512 x = _mm512_maskz_loadu_ps(first_lanes(cols - c), s + c);  // lane `cols` (odd pad) = 0
      const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
      _mm256_mask_storeu_epi16(d + c, first_lanes(even - c), h);
    }
  }
}

void pack_pairs_bf16(const float* src, std::int64_t lds, std::uint16_t* dst, std::int64_t ldd, int K, int N) {
  for (int kk = 0; 2 * kk < K; ++kk) {
    const float* r0 = src + 2 * kk * lds;
    const float* r1 = 2 * kk + 1 < K ? r0 + lds : nullptr;
    std::uint16_t* d = dst + kk * ldd;
    for (int n = 0; n < N; n += kW) {
      const __m512i lo =
          _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + n))));
      __m512i pair = lo;
      if (r1 != nullptr) {
        const __m512i hi =
            _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(r1 + n))));
        pair = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      }
      _mm512_storeu_si512(d + 2 * n, pair);
    }
  }
}

// exp2 of P before its bf16 rounding (kernels/exp2_p16.h: the degree-4 polynomial, exp2_p16 its
// scalar twin bit for bit): exp2_nonpos's range reduction and zero mask around it.
__m512 exp2_p16(__m512 x) {
  return VecT::exp2_nonpos_by(x, [](__m512 r) {
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kExp2P16C4), r, _mm512_set1_ps(kExp2P16C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExp2P16C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExp2P16C1));
    return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  });
}

// Two vectors a step: two exp2 chains in flight, and one vcvtne2ps2bf16 (b's lanes low, a's
// high) narrows both into one 32-element store.
float probs_bf16(const float* s, int n, float c2, float shift, std::uint16_t* p) {
  const __m512 c = _mm512_set1_ps(c2), neg_shift = _mm512_set1_ps(-shift);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int j = 0;
  for (; j + 2 * kW <= n; j += 2 * kW) {
    const __m512 e0 = exp2_p16(_mm512_fmadd_ps(_mm512_loadu_ps(s + j), c, neg_shift));
    const __m512 e1 = exp2_p16(_mm512_fmadd_ps(_mm512_loadu_ps(s + j + kW), c, neg_shift));
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
    _mm512_storeu_si512(p + j, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0)));
  }
  for (; j < n; j += kW) {
    const __m512 e = exp2_p16(_mm512_fmadd_ps(_mm512_loadu_ps(s + j), c, neg_shift));
    acc0 = _mm512_add_ps(acc0, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float bf16_dot_probe(std::int64_t iters) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(1e-3f * static_cast<float>(j));
  // Both operands 2^-10 (exact in bf16): each step adds 2·2^-20 per lane, far from overflow.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3a80)), b = a;
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  __m512 s = _mm512_setzero_ps();
  for (int j = 0; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

Microkernels make_bf16_table() {
  Microkernels t = make_table(Isa::Avx512Bf16);  // the fp32 entries: the AVX-512 body
  t.gemm_bf16 = &gemm_bf16;
  t.probs_bf16 = &probs_bf16;
  t.narrow_rows_bf16 = &narrow_rows_bf16;
  t.pack_pairs_bf16 = &pack_pairs_bf16;
  t.bf16_dot_probe = &bf16_dot_probe;
  return t;
}

}  // namespace

const Microkernels& microkernels_avx512bf16() {
  static const Microkernels table = make_bf16_table();
  return table;
}

}  // namespace burst::kernels
