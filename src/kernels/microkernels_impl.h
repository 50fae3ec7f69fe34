// src/kernels/microkernels_impl.h — the one template body of the microkernels.
//
// Included by microkernels_{avx512,avx2,portable}.cc INSIDE an anonymous namespace, after each
// defines `struct VecT` (its vector type and primitive operations). Everything here therefore has
// internal linkage: no template instantiation compiled with AVX-512 flags can be merged by the
// linker into code that runs on a lesser CPU. For the same reason this body calls no std::
// templates — only VecT's intrinsics wrappers.
// VecT provides: V, W (floats per vector), kMaxR × kMaxNV (GEMM register block, rows × vectors),
// kProbeChains (independent FMA chains of fma_probe: all in registers, at least latency × pipes),
// kPanelR × kPanelNV (register block of gemm_packed; kPanelNV = 0: no packed entries),
// load/store/set1/zero/fma/add/sub/mul/max, hmax/hsum (fixed lane order), exp2 (any x; x < −126
// → 0) and exp2_nonpos (the softmax entries' arguments, x ≤ 0 up to rounding, −inf or NaN: exp2's
// value for x ≥ −126; below, 0 or a denormal under 2^−126 — 0 under FlushDenormals, which the
// kernels set — and 0 for −inf and NaN).
// (No #pragma once: intentionally included once per ISA translation unit.)

// exp2 on r ∈ [−0.5, 0.5]: degree-5 polynomial fitted for minimal relative error (IRLS on
// Chebyshev nodes, coefficients rounded to fp32): max relative error 1.6e-7 in exact arithmetic,
// ≈ 2.5e-7 measured in fp32 (test_microkernels, Exp2AccuracyAgainstDouble). Degree 6 would give 1.5e-8 for
// one more FMA; the softmax needs no more than fp32's own rounding of the scores.
constexpr float kExp2C1 = 0.6931469440460205f;
constexpr float kExp2C2 = 0.24022120237350464f;
constexpr float kExp2C3 = 0.055507101118564606f;
constexpr float kExp2C4 = 0.009675550274550915f;
constexpr float kExp2C5 = 0.0013277482939884067f;

inline typename VecT::V exp2_poly(typename VecT::V r) {
  typename VecT::V p = VecT::set1(kExp2C5);
  p = VecT::fma(p, r, VecT::set1(kExp2C4));
  p = VecT::fma(p, r, VecT::set1(kExp2C3));
  p = VecT::fma(p, r, VecT::set1(kExp2C2));
  p = VecT::fma(p, r, VecT::set1(kExp2C1));
  return VecT::fma(p, r, VecT::set1(1.0f));
}

inline int imin(int a, int b) { return a < b ? a : b; }

// One register block: C[R × NV·W] (+)= A[R × K] · B[K × NV·W].
template <int R, int NV>
void gemm_block(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
                std::int64_t ldc, int K, bool accumulate) {
  using V = typename VecT::V;
  constexpr int W = VecT::W;
  V c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) c[r][n] = accumulate ? VecT::load(C + r * ldc + n * W) : VecT::zero();
  }
  for (int k = 0; k < K; ++k) {
    V b[NV];
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) b[n] = VecT::load(B + k * ldb + n * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V a = VecT::set1(A[r * lda + k]);
#pragma GCC unroll 8
      for (int n = 0; n < NV; ++n) c[r][n] = VecT::fma(a, b[n], c[r][n]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) VecT::store(C + r * ldc + n * W, c[r][n]);
  }
}

template <int R, int MaxNV = VecT::kMaxNV>
void gemm_rows(int nv, const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
               std::int64_t ldc, int K, bool accumulate) {
  switch (nv) {
    case 1: gemm_block<R, 1>(A, lda, B, ldb, C, ldc, K, accumulate); break;
    case 2:
      if constexpr (MaxNV >= 2) gemm_block<R, 2>(A, lda, B, ldb, C, ldc, K, accumulate);
      break;
    case 3:
      if constexpr (MaxNV >= 3) gemm_block<R, 3>(A, lda, B, ldb, C, ldc, K, accumulate);
      break;
    default:
      if constexpr (MaxNV >= 4) gemm_block<R, 4>(A, lda, B, ldb, C, ldc, K, accumulate);
      break;
  }
}

void gemm(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc,
          int M, int N, int K, bool accumulate) {
  constexpr int W = VecT::W;
  const int nv_total = N / W;
  for (int v0 = 0; v0 < nv_total; v0 += VecT::kMaxNV) {
    const int nv = imin(VecT::kMaxNV, nv_total - v0);
    const float* Bv = B + v0 * W;
    float* Cv = C + v0 * W;
    for (int m0 = 0; m0 < M; m0 += VecT::kMaxR) {
      const float* Am = A + m0 * lda;
      float* Cm = Cv + m0 * ldc;
      switch (imin(VecT::kMaxR, M - m0)) {
        case 1: gemm_rows<1>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 2: gemm_rows<2>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 3: gemm_rows<3>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 4: gemm_rows<4>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 5:
          if constexpr (VecT::kMaxR >= 5) gemm_rows<5>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate);
          break;
        default:
          if constexpr (VecT::kMaxR >= 6) gemm_rows<6>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate);
          break;
      }
    }
  }
}

// gemm on B packed in panels (Microkernels::pack_panels): each kPanelNV-vector column panel is one
// contiguous K × panel block, so the block's B loads walk memory linearly (no strided rows that
// alias in L1 sets) and the rows × panel register block is the widest the registers hold.
template <int NVp, int Rp>
void gemm_packed(const float* A, std::int64_t lda, const float* Bp, std::int64_t ldp, float* C,
                 std::int64_t ldc, int M, int N, int K, bool accumulate) {
  constexpr int W = VecT::W;
  const int nv_total = N / W;
  for (int v0 = 0; v0 < nv_total; v0 += NVp) {
    const int nv = imin(NVp, nv_total - v0);
    const float* Bv = Bp + (v0 / NVp) * ldp;
    const std::int64_t ldb = static_cast<std::int64_t>(nv) * W;
    float* Cv = C + v0 * W;
    for (int m0 = 0; m0 < M; m0 += Rp) {
      const float* Am = A + m0 * lda;
      float* Cm = Cv + m0 * ldc;
      switch (imin(Rp, M - m0)) {
        case 1: gemm_rows<1, NVp>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 2: gemm_rows<2, NVp>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 3: gemm_rows<3, NVp>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 4: gemm_rows<4, NVp>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate); break;
        case 5:
          if constexpr (Rp >= 5) gemm_rows<5, NVp>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate);
          break;
        default:
          if constexpr (Rp >= 6) gemm_rows<6, NVp>(nv, Am, lda, Bv, ldb, Cm, ldc, K, accumulate);
          break;
      }
    }
  }
}

template <int NVp>
void pack_panels(const float* B, std::int64_t ldb, float* Bp, std::int64_t ldp, int K, int N) {
  constexpr int W = VecT::W;
  for (int c0 = 0, panel = 0; c0 < N; c0 += NVp * W, ++panel) {
    const int width = imin(NVp * W, N - c0);
    float* dst = Bp + panel * ldp;
    for (int k = 0; k < K; ++k)
      for (int c = 0; c < width; c += W) VecT::store(dst + k * width + c, VecT::load(B + k * ldb + c0 + c));
  }
}

float row_max(const float* x, int n) {
  typename VecT::V m0 = VecT::set1(-__builtin_inff()), m1 = m0;
  int j = 0;
  for (; j + 2 * VecT::W <= n; j += 2 * VecT::W) {
    m0 = VecT::max(m0, VecT::load(x + j));
    m1 = VecT::max(m1, VecT::load(x + j + VecT::W));
  }
  for (; j < n; j += VecT::W) m0 = VecT::max(m0, VecT::load(x + j));
  return VecT::hmax(VecT::max(m0, m1));
}

float exp2_shift_sum(float* x, int n, float shift) {
  const typename VecT::V s = VecT::set1(shift);
  typename VecT::V acc0 = VecT::zero(), acc1 = VecT::zero();
  int j = 0;
  for (; j + 2 * VecT::W <= n; j += 2 * VecT::W) {
    const typename VecT::V e0 = VecT::exp2_nonpos(VecT::sub(VecT::load(x + j), s));
    const typename VecT::V e1 = VecT::exp2_nonpos(VecT::sub(VecT::load(x + j + VecT::W), s));
    VecT::store(x + j, e0);
    VecT::store(x + j + VecT::W, e1);
    acc0 = VecT::add(acc0, e0);
    acc1 = VecT::add(acc1, e1);
  }
  for (; j < n; j += VecT::W) {
    const typename VecT::V e = VecT::exp2_nonpos(VecT::sub(VecT::load(x + j), s));
    VecT::store(x + j, e);
    acc0 = VecT::add(acc0, e);
  }
  return VecT::hsum(VecT::add(acc0, acc1));
}

void scale(float* x, int n, float a) {
  const typename VecT::V av = VecT::set1(a);
  for (int j = 0; j < n; j += VecT::W) VecT::store(x + j, VecT::mul(VecT::load(x + j), av));
}

void exp2_array(const float* x, float* y, std::int64_t n) {
  std::int64_t j = 0;
  for (; j + VecT::W <= n; j += VecT::W) VecT::store(y + j, VecT::exp2(VecT::load(x + j)));
  if (j < n) {
    float tmp[VecT::W];
    for (int t = 0; t < VecT::W; ++t) tmp[t] = (j + t < n) ? x[j + t] : 0.0f;
    VecT::store(tmp, VecT::exp2(VecT::load(tmp)));
    for (int t = 0; j + t < n; ++t) y[j + t] = tmp[t];
  }
}

void probs_t(float* st, std::int64_t ld, int rows, int cols, float c2, const float* shift) {
  const typename VecT::V cv = VecT::set1(c2);
  for (int r = 0; r < rows; ++r) {
    float* row = st + r * ld;
    for (int c = 0; c < cols; c += VecT::W) {
      const typename VecT::V t = VecT::sub(VecT::mul(VecT::load(row + c), cv), VecT::load(shift + c));
      VecT::store(row + c, VecT::exp2_nonpos(t));
    }
  }
}

void dscores_t(float* pt, const float* dpt, std::int64_t ld, int rows, int cols, const float* delta) {
  for (int r = 0; r < rows; ++r) {
    float* p = pt + r * ld;
    const float* dp = dpt + r * ld;
    for (int c = 0; c < cols; c += VecT::W) {
      const typename VecT::V g = VecT::sub(VecT::load(dp + c), VecT::load(delta + c));
      VecT::store(p + c, VecT::mul(VecT::load(p + c), g));
    }
  }
}

void transpose(const float* src, std::int64_t lds, float* dst, std::int64_t ldd, int rows, int cols) {
  constexpr int kBlock = 16;
  for (int r0 = 0; r0 < rows; r0 += kBlock) {
    const int r1 = imin(rows, r0 + kBlock);
    for (int c0 = 0; c0 < cols; c0 += kBlock) {
      const int c1 = imin(cols, c0 + kBlock);
      for (int c = c0; c < c1; ++c)
        for (int r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
  }
}

float fma_probe(std::int64_t iters) {
  constexpr int kChains = VecT::kProbeChains;
  typename VecT::V a[kChains];
  for (int j = 0; j < kChains; ++j) a[j] = VecT::set1(1.0f + 1e-3f * static_cast<float>(j));
  const typename VecT::V b = VecT::set1(0.999999f), c = VecT::set1(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) a[j] = VecT::fma(a[j], b, c);
  }
  typename VecT::V s = VecT::zero();
  for (int j = 0; j < kChains; ++j) s = VecT::add(s, a[j]);
  return VecT::hsum(s);
}

Microkernels make_table(Isa isa) {
  Microkernels t;
  t.isa = isa;
  t.width = VecT::W;
  t.gemm = &gemm;
  t.row_max = &row_max;
  t.exp2_shift_sum = &exp2_shift_sum;
  t.scale = &scale;
  t.exp2 = &exp2_array;
  t.probs_t = &probs_t;
  t.dscores_t = &dscores_t;
  t.transpose = &transpose;
  t.fma_probe = &fma_probe;
  t.fma_probe_chains = VecT::kProbeChains;
  if constexpr (VecT::kPanelNV > 0) {
    t.panel = VecT::kPanelNV * VecT::W;
    t.pack_panels = &pack_panels<VecT::kPanelNV>;
    t.gemm_packed = &gemm_packed<VecT::kPanelNV, VecT::kPanelR>;
  }
  return t;
}
