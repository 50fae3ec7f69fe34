// Tests of the bf16 entries of the AVX512-BF16 microkernel table (src/kernels/microkernels_avx512bf16.cc)
// against scalar twins: the conversions bit for bit against the portable rounding rules of
// burst/tensor.h, the vdpbf16ps GEMM against an fp64 dot product of the same bf16 values, over
// edge sizes (rows 1..13 across the 6-row block, 1..5 vector columns across the 4-vector block,
// odd and even K; for the AMX tables also rows and K across the 16 × 32 tile edges), on every
// table with bf16 entries this CPU runs: AVX512-BF16 (vdpbf16ps), AMX (tdpbf16ps) and the AMX
// GEMM over the emulated tile layer (any AVX2 CPU).
//
// probs_bf16 (the forward's fused exp2 → bf16 P row) bit for bit against a scalar twin, and the
// forward's K / V pair packs from bf16 storage against the fp32 route.
//
// GEMM bound: the bf16 products are exact in fp32, so the only error is fp32 summation: at most
// K additions into the accumulator, one multiply by alpha and one add of the old C, each
// rounding by ≤ 2^-24 relative, so |C − C_exact| ≤ (K + 2)·2^-24·(|alpha|·Σ_k|a_k·b_k| + |C_old|)
// to first order (Higham, Accuracy and Stability of Numerical Algorithms, §3.1).
// A pair-order or packing mistake gives errors of order |a·b|, ≫ this bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/tensor.h"
#include "kernels/exp2_p16.h"
#include "kernels/microkernels.h"
#include "kernels/tiled_common.h"
#include "test_util.h"

namespace burst {
namespace {

bool have_bf16() { return detect_isa() == Isa::Avx512Bf16; }

// The tables with bf16 entries this CPU runs.
std::vector<Isa> bf16_tables() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx512Bf16, Isa::Amx, Isa::AmxEmulated})
    if (isa_available(isa)) out.push_back(isa);
  return out;
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  std::vector<float> f(n);
  test::fill_uniform(f.data(), static_cast<std::int64_t>(n), seed, -2.0f, 2.0f);
  std::vector<std::uint16_t> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = bf16_from_float(f[i]);
  return h;
}

TEST(MicrokernelsBf16, GemmMatchesFp64OnTheSameBf16Values) {
  if (bf16_tables().empty()) GTEST_SKIP() << "no table with bf16 entries on this CPU";
  for (Isa isa : bf16_tables()) {
    const kernels::Microkernels& mk = kernels::microkernels(isa);
    ASSERT_NE(mk.gemm_bf16, nullptr);
    const bool tiles = isa != Isa::Avx512Bf16;
    for (int M : tiles ? std::vector<int>{1, 7, 16, 17, 33} : std::vector<int>{1, 5, 6, 7, 13})
      for (int nv : {1, 3, 4, 5})
        for (int K : tiles ? std::vector<int>{1, 2, 31, 32, 34, 64, 97} : std::vector<int>{1, 2, 7, 64})
          for (bool accumulate : {false, true})
            for (float alpha : {0.375f, 1.0f}) {
              SCOPED_TRACE(testing::Message() << to_string(isa) << " M=" << M << " N=" << nv * 16
                                              << " K=" << K << " acc=" << accumulate << " alpha=" << alpha);
              const int N = nv * 16, K2 = K + (K & 1), lda = K2 + 2, ldb = 2 * N + 32, ldc = N + 16;
              std::vector<std::uint16_t> A =
                  random_bf16(static_cast<std::size_t>(M * lda), 1 + static_cast<std::uint64_t>(K));
              for (int r = 0; r < M; ++r)
                if (K & 1) A[static_cast<std::size_t>(r * lda + K)] = 0;  // the caller's zero pad of an odd K
              // B[k][n] as a plain matrix, then pair-packed by hand: the layout is part of the contract.
              const std::vector<std::uint16_t> B = random_bf16(static_cast<std::size_t>(K * N), 7);
              std::vector<std::uint16_t> Bp(static_cast<std::size_t>((K2 / 2) * ldb),
                                            0xffff);  // NaN where unused
              for (int kk = 0; kk < K2 / 2; ++kk)
                for (int n = 0; n < N; ++n)
                  for (int e = 0; e < 2; ++e) {
                    const int k = 2 * kk + e;
                    Bp[static_cast<std::size_t>(kk * ldb + 2 * n + e)] =
                        k < K ? B[static_cast<std::size_t>(k * N + n)] : 0;
                  }
              std::vector<float> C(static_cast<std::size_t>(M * ldc));
              test::fill_uniform(C.data(), static_cast<std::int64_t>(C.size()), 3);
              const std::vector<float> C0 = C;
              mk.gemm_bf16(A.data(), lda, Bp.data(), ldb, C.data(), ldc, M, N, K2, accumulate, alpha);
              for (int r = 0; r < M; ++r)
                for (int n = 0; n < N; ++n) {
                  double exact = 0, mag = 0;
                  for (int k = 0; k < K; ++k) {
                    const double t =
                        static_cast<double>(bf16_to_float(A[static_cast<std::size_t>(r * lda + k)])) *
                        bf16_to_float(B[static_cast<std::size_t>(k * N + n)]);
                    exact += t;
                    mag += std::fabs(t);
                  }
                  const double old = accumulate ? C0[static_cast<std::size_t>(r * ldc + n)] : 0.0;
                  const double want = old + alpha * exact;
                  const double bound = (K + 2) * 0x1.0p-24 * (alpha * mag + std::fabs(old));
                  ASSERT_LE(std::fabs(C[static_cast<std::size_t>(r * ldc + n)] - want), bound)
                      << "r=" << r << " n=" << n;
                }
              for (int r = 0; r < M; ++r)  // nothing written beyond N in a row
                for (int n = N; n < ldc; ++n)
                  ASSERT_EQ(C[static_cast<std::size_t>(r * ldc + n)],
                            C0[static_cast<std::size_t>(r * ldc + n)]);
            }
  }
}

TEST(MicrokernelsBf16, ConversionsAreThePortableRoundingBitForBit) {
  if (bf16_tables().empty()) GTEST_SKIP() << "no table with bf16 entries on this CPU";
  for (Isa isa : bf16_tables()) {
    SCOPED_TRACE(to_string(isa));
    const kernels::Microkernels& mk = kernels::microkernels(isa);
    // Ties, values just above/below a tie, ±0, large and small normals (no denormals: the
    // instruction flushes them, the kernels run with FTZ/DAZ anyway).
    std::vector<float> x(48 * 7);
    test::fill_uniform(x.data(), static_cast<std::int64_t>(x.size()), 5, -3.0f, 3.0f);
    const float edge[] = {
        1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f, 1.0f + 0x1.0p-9f, -0.0f, 0.0f, 3.0e38f, 1.0e-37f, -1.5f};
    for (std::size_t i = 0; i < sizeof edge / sizeof edge[0]; ++i) x[i * 5] = edge[i];
    for (int cols : {1, 15, 16, 17, 33}) {  // narrow_rows: odd cols get a zero partner
      const int rows = 3, lds = 48, ldd = 50;
      std::vector<std::uint16_t> d(static_cast<std::size_t>(rows * ldd), 0x7777);
      mk.narrow_rows_bf16(x.data(), lds, d.data(), ldd, rows, cols);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c)
          ASSERT_EQ(d[static_cast<std::size_t>(r * ldd + c)],
                    bf16_from_float(x[static_cast<std::size_t>(r * lds + c)]))
              << "cols=" << cols << " r=" << r << " c=" << c;
        if (cols & 1) { EXPECT_EQ(d[static_cast<std::size_t>(r * ldd + cols)], 0u); }
        EXPECT_EQ(d[static_cast<std::size_t>(r * ldd + cols + (cols & 1))], 0x7777u) << "wrote past the row";
      }
    }
    for (int K : {1, 2, 5}) {  // pack_pairs: row K of an odd K is zeros
      const int N = 32, lds = 48, ldd = 2 * N;
      std::vector<std::uint16_t> d(static_cast<std::size_t>(((K + 1) / 2) * ldd));
      mk.pack_pairs_bf16(x.data(), lds, d.data(), ldd, K, N);
      for (int kk = 0; kk < (K + 1) / 2; ++kk)
        for (int n = 0; n < N; ++n)
          for (int e = 0; e < 2; ++e) {
            const int k = 2 * kk + e;
            const std::uint16_t want = k < K ? bf16_from_float(x[static_cast<std::size_t>(k * lds + n)]) : 0;
            ASSERT_EQ(d[static_cast<std::size_t>(kk * ldd + 2 * n + e)], want)
                << "K=" << K << " k=" << k << " n=" << n;
          }
    }
  }
}

// exp2_p16, P's polynomial (kernels/exp2_p16.h), against fp64 2^x: within kExp2P16MaxRelError
// on 400,001 points of [−126, 0] and on every fp32 value of r in [−0.5, 0.5] stepped by 2^−16
// around several n; at least a tenth of that bound somewhere (it is the polynomial's error, not a
// bound that cannot be reached); exactly 1 at 0, 2^−126 at −126 (normal, never a denormal), 0
// below −126 and for −inf and NaN; increasing on a dense grid (P keeps the order of the scores).
TEST(MicrokernelsBf16, Exp2P16IsWithinItsStatedErrorOfFp64) {
  double worst = 0;
  float prev = 0.0f;
  for (int i = 0; i <= 400000; ++i) {
    const float x = -126.0f + 126.0f * static_cast<float>(i) / 400000.0f;
    const float e = kernels::exp2_p16(x);
    const double want = std::exp2(static_cast<double>(x));
    worst = std::max(worst, std::fabs(e / want - 1));
    ASSERT_GE(e, prev) << "x=" << x;
    prev = e;
  }
  for (const float n : {-120.0f, -7.0f, -1.0f, 0.0f})
    for (int k = -32768; k <= 32768; ++k) {
      const float x = n + static_cast<float>(k) * 0x1.0p-16f;
      if (x > 0.0f || x < -126.0f) continue;
      worst = std::max(worst, std::fabs(kernels::exp2_p16(x) / std::exp2(static_cast<double>(x)) - 1));
    }
  EXPECT_LE(worst, kernels::kExp2P16MaxRelError);
  EXPECT_GE(worst, 0.1 * kernels::kExp2P16MaxRelError);
  EXPECT_EQ(kernels::exp2_p16(0.0f), 1.0f);
  EXPECT_EQ(kernels::exp2_p16(-126.0f), 0x1.0p-126f);
  EXPECT_EQ(kernels::exp2_p16(-126.01f), 0.0f);
  EXPECT_EQ(kernels::exp2_p16(-INFINITY), 0.0f);
  EXPECT_EQ(kernels::exp2_p16(NAN), 0.0f);
}

// probs_bf16 (the bf16 forward's P row) against its scalar twin: the argument by std::fma (one
// rounding), exp2_p16 (kernels/exp2_p16.h: P's degree-4 polynomial), the portable bf16
// rounding — bit for bit where the argument is ≥ −126, and exactly 0 below it and for −inf
// scores, under FlushDenormals as the kernels run; the returned sum within fp32 summation error
// of the twin's fp64 sum of the same fp32 values; the twin's fp32 values within the polynomial's
// stated accuracy (kExp2P16MaxRelError) of fp64; and on scores picked where rounding the argument twice
// changes the bf16 P. Sizes: one vector (the tail alone), two (one paired step), three (step and tail), a
// forward tile row (128) and a long row. A swapped half of the paired narrowing, a lane left out of the sum,
// a missed tail, a wrong scale or shift, or a write past n fails it.
TEST(MicrokernelsBf16, ProbsBf16IsItsScalarTwinBitForBit) {
  if (bf16_tables().empty()) GTEST_SKIP() << "no table with bf16 entries on this CPU";
  for (Isa isa : bf16_tables()) {
    const kernels::Microkernels& mk = kernels::microkernels(isa);
    ASSERT_NE(mk.probs_bf16, nullptr) << to_string(isa);
    const float c2 = 0.125f * 1.4426950408889634f;  // τ·log2(e) at D = 64
    for (int n : {16, 32, 48, 128, 400}) {
      SCOPED_TRACE(testing::Message() << to_string(isa) << " n=" << n);
      std::vector<float> s(static_cast<std::size_t>(n));
      test::fill_uniform(s.data(), n, 21 + static_cast<std::uint64_t>(n), -900.0f, 60.0f);
      s[1] = -INFINITY;  // masked
      float mx = -INFINITY;
      for (float x : s) mx = std::max(mx, x);
      const float shift = mx * c2 + 0.25f;
      // Arguments across exp2's underflow edge: c2·s − shift ≈ −125.5 … −127.
      const float edge[] = {-125.5f, -126.0f, -126.25f, -126.9f, -127.0f};
      for (int i = 0; i < 5 && 3 + 2 * i < n; ++i)
        s[static_cast<std::size_t>(3 + 2 * i)] = (edge[i] + shift) / c2;
      std::vector<std::uint16_t> p(static_cast<std::size_t>(n) + 16, 0x7777);
      kernels::FlushDenormals flush;
      const float sum = mk.probs_bf16(s.data(), n, c2, shift, p.data());
      double twin_sum = 0;
      for (int j = 0; j < n; ++j) {
        const float arg = std::fma(s[static_cast<std::size_t>(j)], c2, -shift);
        const float e = kernels::exp2_p16(arg);
        if (arg >= -126.0f) {
          EXPECT_NEAR(e, std::exp2(static_cast<double>(arg)),
                      kernels::kExp2P16MaxRelError * std::exp2(static_cast<double>(arg)))
              << "j=" << j;
          ASSERT_EQ(p[static_cast<std::size_t>(j)], bf16_from_float(e)) << "j=" << j << " arg=" << arg;
          twin_sum += e;
        } else {
          ASSERT_EQ(p[static_cast<std::size_t>(j)], 0u) << "j=" << j << " arg=" << arg;
        }
      }
      EXPECT_EQ(p[1], 0u);
      EXPECT_LE(std::fabs(sum - twin_sum), n * 0x1.0p-24 * twin_sum);
      EXPECT_GT(twin_sum, 0.5);  // the row max gives exp2(−0.25): live values
      for (int j = n; j < n + 16; ++j) ASSERT_EQ(p[static_cast<std::size_t>(j)], 0x7777u) << "wrote past n";
    }
    // Scores whose bf16 P differs between one rounding of c2·s − shift (the FMA) and two (c2·s
    // rounded, then the subtraction): picked from many, the kernel must give the fused value on
    // each, so an argument rounded twice fails here.
    const float shift = 3.14159274f;  // not on the arguments' grid, or both forms round alike
    const std::size_t n_cand = std::size_t{1} << 20;
    std::vector<float> cand(n_cand), fused(n_cand), twice(n_cand), e_fused(n_cand), e_twice(n_cand), picked;
    test::fill_uniform(cand.data(), static_cast<std::int64_t>(n_cand), 99, -690.0f,
                       -350.0f);  // arguments −125 … −66
    for (std::size_t i = 0; i < n_cand; ++i) {
      fused[i] = std::fma(cand[i], c2, -shift);
      volatile float product = cand[i] * c2;  // rounded on its own: no contraction into an FMA
      twice[i] = product - shift;
    }
    for (std::size_t i = 0; i < n_cand; ++i) {
      e_fused[i] = kernels::exp2_p16(fused[i]);
      e_twice[i] = kernels::exp2_p16(twice[i]);
    }
    for (std::size_t i = 0; i < n_cand && picked.size() < 128; ++i)
      if (bf16_from_float(e_fused[i]) != bf16_from_float(e_twice[i])) picked.push_back(cand[i]);
    ASSERT_GE(picked.size(), 16u) << to_string(isa);
    picked.resize(picked.size() / 16 * 16);
    std::vector<std::uint16_t> p(picked.size());
    kernels::FlushDenormals flush;
    mk.probs_bf16(picked.data(), static_cast<int>(picked.size()), c2, shift, p.data());
    for (std::size_t j = 0; j < picked.size(); ++j) {
      const float e = kernels::exp2_p16(std::fma(picked[j], c2, -shift));
      ASSERT_EQ(p[j], bf16_from_float(e)) << to_string(isa) << " s=" << picked[j] << ": not one rounding";
    }
  }
}

// The bf16 forward packs K and V straight from bf16 storage into its pair-packed operands
// (tiled::pack_kt_pairs_bf16, pack_v_pairs_bf16); their slow twin is the fp32 route it replaced
// (pack_transposed / pack_rows widen to fp32, then the table's pack_pairs_bf16 narrows back,
// exactly): bit for bit, for even and odd D, full and partial tiles (odd nc), strided BSHD rows.
TEST(MicrokernelsBf16, ForwardPairPacksFromStorageAreTheFp32Route) {
  if (bf16_tables().empty()) GTEST_SKIP() << "no table with bf16 entries on this CPU";
  const kernels::Microkernels& mk = kernels::microkernels(bf16_tables().front());
  const kernels::Converters& cv = kernels::converters(detect_isa());
  const std::int64_t B = 2, S = 45, H = 3;
  for (int D : {20, 21, 64}) {
    const std::vector<std::uint16_t> x = random_bf16(static_cast<std::size_t>(B * S * H * D), 40 + D);
    kernels::Operand op;
    op.data = x.data();
    op.dtype = DType::BF16;
    op.sb = S * H * D;
    op.ss = H * D;
    op.sh = D;
    const int cols = 32, Dp = (D + 15) / 16 * 16, D2 = D + (D & 1);
    for (int nc : {32, 7}) {
      SCOPED_TRACE(testing::Message() << "D=" << D << " nc=" << nc);
      std::vector<float> tmp(static_cast<std::size_t>(std::max(D * cols, cols * Dp)));
      std::vector<std::uint16_t> twin(static_cast<std::size_t>(D2 * cols), 0x7777), fast(twin.size(), 0x5555);
      kernels::tiled::pack_transposed(cv, op, 1, 2, 9, nc, D, cols, tmp.data());
      mk.pack_pairs_bf16(tmp.data(), cols, twin.data(), 2 * cols, D, cols);
      kernels::tiled::pack_kt_pairs_bf16(op, 1, 2, 9, nc, D, cols, fast.data());
      for (std::size_t i = 0; i < twin.size(); ++i) ASSERT_EQ(fast[i], twin[i]) << "Kt pairs at " << i;
      std::vector<std::uint16_t> vtwin(static_cast<std::size_t>(cols * Dp), 0x7777),
          vfast(vtwin.size(), 0x5555);
      kernels::tiled::pack_rows(cv, op, 1, 2, 9, nc, D, Dp, cols, tmp.data());
      mk.pack_pairs_bf16(tmp.data(), Dp, vtwin.data(), 2 * Dp, cols, Dp);
      kernels::tiled::pack_v_pairs_bf16(op, 1, 2, 9, nc, D, Dp, cols, vfast.data());
      for (std::size_t i = 0; i < vtwin.size(); ++i) ASSERT_EQ(vfast[i], vtwin[i]) << "V pairs at " << i;
    }
  }
}

TEST(MicrokernelsBf16, DotProbeCountsFlopOrRefuses) {
  if (!have_bf16()) {
    EXPECT_THROW(run_bf16_dot_probe(10), Error);
    return;
  }
  EXPECT_EQ(run_bf16_dot_probe(1000), 1000.0 * 16 * 16 * 4);
  EXPECT_THROW(run_bf16_dot_probe(-1), Error);
  // The other tables carry no bf16 entries, so the kernels never take the bf16 path on them.
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Portable})
    EXPECT_EQ(kernels::microkernels(isa).gemm_bf16, nullptr) << to_string(isa);
}

}  // namespace
}  // namespace burst
