// Tests of the fp32 microkernel entries that have a slower twin in the same table
// (src/kernels/microkernels_impl.h): gemm_packed on panels from pack_panels against gemm on the
// row-major B (bit for bit: the same FMAs in the same k order per element) and against fp64, over
// edge sizes (rows 1..13 across the 6-row block, 1..5 vectors across the 2-vector panel and a
// narrower last panel, K 0, 1, 17, 64, a K below the packed one); and the FMA peak probe against
// a scalar twin of its chains (the flop count run_fma_probe reports is the work it did). Every
// fp32 table this CPU runs; tables without packed entries (panel = 0) skip that part. Then the
// other entries against fp64: exp2 (accuracy, underflow and −inf to exact zeros), gemm over edge
// sizes, row_max, exp2_shift_sum and transpose, and the softmax entries' exp2 (exp2_shift_sum,
// probs_t) across the underflow range, with and without FlushDenormals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "kernels/microkernels.h"
#include "test_util.h"

namespace burst {
namespace {

std::vector<Isa> fp32_tables() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Portable})
    if (isa_available(isa)) out.push_back(isa);
  return out;
}

TEST(Microkernels, PackedGemmEqualsGemmBitwiseAndMatchesDouble) {
  int tested = 0;
  for (Isa isa : fp32_tables()) {
    const auto& mk = kernels::microkernels(isa);
    if (mk.gemm_packed == nullptr) {
      EXPECT_EQ(mk.panel, 0) << to_string(isa);
      continue;
    }
    ASSERT_NE(mk.pack_panels, nullptr);
    ASSERT_EQ(mk.panel % mk.width, 0) << to_string(isa);
    ++tested;
    const int w = mk.width;
    for (int M : {1, 2, 5, 6, 7, 12, 13}) {
      for (int nv : {1, 2, 3, 5}) {
        for (int K : {0, 1, 17, 64}) {
          const int N = nv * w, lda = K + 3, ldb = N + w, ldc = N + 2 * w;
          const int K_packed = K + 5;  // gemm_packed reads the first K rows of each panel
          const std::int64_t ldp = static_cast<std::int64_t>(K_packed) * mk.panel + 7;
          const int n_panels = (N + mk.panel - 1) / mk.panel;
          std::vector<float> A(static_cast<std::size_t>(M) * lda + 1),
              B(static_cast<std::size_t>(K_packed) * ldb), Bp(static_cast<std::size_t>(n_panels * ldp)),
              C(static_cast<std::size_t>(M) * ldc);
          test::fill_uniform(A.data(), static_cast<std::int64_t>(A.size()), 11);
          test::fill_uniform(B.data(), static_cast<std::int64_t>(B.size()), 12);
          mk.pack_panels(B.data(), ldb, Bp.data(), ldp, K_packed, N);
          for (bool acc : {false, true}) {
            test::fill_uniform(C.data(), static_cast<std::int64_t>(C.size()), 13);
            const std::vector<float> C0 = C;
            std::vector<float> C_twin = C;
            mk.gemm_packed(A.data(), lda, Bp.data(), ldp, C.data(), ldc, M, N, K, acc);
            mk.gemm(A.data(), lda, B.data(), ldb, C_twin.data(), ldc, M, N, K, acc);
            for (int i = 0; i < M; ++i) {
              for (int j = 0; j < N; ++j) {
                ASSERT_EQ(C[i * ldc + j], C_twin[i * ldc + j])
                    << to_string(isa) << " M=" << M << " N=" << N << " K=" << K << " i=" << i << " j=" << j;
                double ref = acc ? C0[i * ldc + j] : 0.0, mag = std::fabs(ref);
                for (int k = 0; k < K; ++k) {
                  ref += static_cast<double>(A[i * lda + k]) * B[k * ldb + j];
                  mag += std::fabs(static_cast<double>(A[i * lda + k]) * B[k * ldb + j]);
                }
                // Any fp32 summation order is within (K+1)·eps·Σ|terms| of the exact sum.
                ASSERT_LE(std::fabs(C[i * ldc + j] - ref), (K + 2) * test::kEps32 * mag + 1e-30)
                    << to_string(isa) << " M=" << M << " N=" << N << " K=" << K;
              }
              for (int j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]);  // untouched
            }
          }
        }
      }
    }
  }
  if (detect_isa() == Isa::Avx2) {
    EXPECT_EQ(tested, 1);  // the AVX2 table has the packed entries
  }
}

// The probe's chains in scalar fp32: a_j ← fma(a_j, b, c), the same start values and constants.
double probe_twin(int chains, int width, std::int64_t iters) {
  double sum = 0;
  for (int j = 0; j < chains; ++j) {
    float a = 1.0f + 1e-3f * static_cast<float>(j);
    for (std::int64_t i = 0; i < iters; ++i) a = std::fma(a, 0.999999f, 1e-7f);
    sum += static_cast<double>(a) * width;  // every lane of a chain holds the same value
  }
  return sum;
}

TEST(Microkernels, FmaProbeRunsItsChainsAndCountsThem) {
  for (Isa isa : fp32_tables()) {
    const auto& mk = kernels::microkernels(isa);
    // Enough chains to hide a 4-cycle FMA latency on 2 pipes.
    EXPECT_GE(mk.fma_probe_chains, 8) << to_string(isa);
    const std::int64_t iters = 1000;
    const double checksum = mk.fma_probe(iters), twin = probe_twin(mk.fma_probe_chains, mk.width, iters);
    // Fused tables give the twin's lanes bit for bit; the portable one multiplies and adds
    // (≤ 1 extra rounding of 2^-24 per step: 1000 steps ≤ 6e-5 relative), then the lanes are
    // summed in fp32. A missing chain or lane moves the sum by ≥ 1/(chains·width) ≥ 1/256.
    EXPECT_NEAR(checksum, twin, 1e-4 * twin) << to_string(isa);
    EXPECT_EQ(run_fma_probe(isa, iters), static_cast<double>(iters) * mk.fma_probe_chains * 2 * mk.width)
        << to_string(isa);
  }
  EXPECT_THROW(run_fma_probe(Isa::Portable, -1), Error);
}

TEST(Microkernels, Exp2AccuracyAgainstDouble) {
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = -126.0f + 253.0f * static_cast<float>(i) / static_cast<float>(n);
  for (Isa isa : fp32_tables()) {
    const auto& mk = kernels::microkernels(isa);
    mk.exp2(x.data(), y.data(), n);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      const double ref = std::exp2(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(y[i] - ref) / ref);
    }
    // Polynomial 1.6e-7 + fp32 rounding of the Horner steps: budget 3e-7 (docs/machine.md §4 target).
    EXPECT_LT(worst, 3e-7) << to_string(isa);
    // Underflow and masked entries are exact zeros; odd n exercises the tail path.
    const float special[5] = {-INFINITY, -126.5f, -1000.0f, 0.0f, 1.0f};
    float out[5];
    mk.exp2(special, out, 5);
    EXPECT_EQ(out[0], 0.0f) << to_string(isa);
    EXPECT_EQ(out[1], 0.0f) << to_string(isa);
    EXPECT_EQ(out[2], 0.0f) << to_string(isa);
    EXPECT_NEAR(out[3], 1.0f, 3e-7) << to_string(isa);
    EXPECT_NEAR(out[4], 2.0f, 6e-7) << to_string(isa);
  }
}

TEST(Microkernels, GemmMatchesDoubleForEdgeSizes) {
  for (Isa isa : fp32_tables()) {
    const auto& mk = kernels::microkernels(isa);
    const int w = mk.width;
    for (int M : {1, 5, 6, 7, 13}) {
      for (int nv : {1, 2, 3, 5, 8}) {
        for (int K : {0, 1, 17, 64}) {
          const int N = nv * w, lda = K + 3, ldb = N + w, ldc = N + 2 * w;
          std::vector<float> A(static_cast<std::size_t>(M) * lda + 1),
              B(static_cast<std::size_t>(K + 1) * ldb), C(static_cast<std::size_t>(M) * ldc);
          test::fill_uniform(A.data(), static_cast<std::int64_t>(A.size()), 1);
          test::fill_uniform(B.data(), static_cast<std::int64_t>(B.size()), 2);
          for (bool acc : {false, true}) {
            test::fill_uniform(C.data(), static_cast<std::int64_t>(C.size()), 3);
            const std::vector<float> C0 = C;
            mk.gemm(A.data(), lda, B.data(), ldb, C.data(), ldc, M, N, K, acc);
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < N; ++j) {
                double ref = acc ? C0[i * ldc + j] : 0.0, mag = std::fabs(ref);
                for (int k = 0; k < K; ++k) {
                  ref += static_cast<double>(A[i * lda + k]) * B[k * ldb + j];
                  mag += std::fabs(static_cast<double>(A[i * lda + k]) * B[k * ldb + j]);
                }
                // Any fp32 summation order is within (K+1)·eps·Σ|terms| of the exact sum.
                ASSERT_LE(std::fabs(C[i * ldc + j] - ref), (K + 2) * test::kEps32 * mag + 1e-30)
                    << to_string(isa) << " M=" << M << " N=" << N << " K=" << K << " i=" << i << " j=" << j;
              }
            for (int i = 0; i < M; ++i)  // columns beyond N untouched
              for (int j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]);
          }
        }
      }
    }
  }
}

TEST(Microkernels, RowMaxExpSumAndTranspose) {
  for (Isa isa : fp32_tables()) {
    const auto& mk = kernels::microkernels(isa);
    const int n = 6 * mk.width * (mk.width == 1 ? 16 : 1);
    std::vector<float> x(n);
    test::fill_uniform(x.data(), n, 7, -20.0f, 5.0f);
    x[3] = -INFINITY;
    double mx = -INFINITY;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    EXPECT_EQ(mk.row_max(x.data(), n), static_cast<float>(mx));
    std::vector<float> e = x;
    const float sum = mk.exp2_shift_sum(e.data(), n, static_cast<float>(mx));
    double ref_sum = 0;
    for (int j = 0; j < n; ++j) {  // the fp32 subtraction is part of the contract
      const double r = std::exp2(static_cast<double>(x[j] - static_cast<float>(mx)));
      ref_sum += r;
      EXPECT_NEAR(e[j], r, 3e-7 * r + 1e-38);
    }
    EXPECT_EQ(e[3], 0.0f);
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
    std::vector<float> t(static_cast<std::size_t>(n) * 3, -1.0f), back(static_cast<std::size_t>(n) * 3);
    mk.transpose(x.data(), 3, t.data(), n / 3 + 1, n / 3, 3);  // x as [n/3][3] → [3][n/3 (+1 ld)]
    for (int r = 0; r < n / 3; ++r)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(t[c * (n / 3 + 1) + r], x[r * 3 + c]);
  }
}

// The softmax entries skip exp2's underflow mask (exp2_nonpos): above −126 they must match exp2's
// accuracy; below, at most the smallest normal (a denormal or 0), exactly 0 under FlushDenormals
// (as the kernels run) and for −inf / +inf shifts.
TEST(Microkernels, SoftmaxExp2EntriesAgainstDouble) {
  for (Isa isa : fp32_tables()) {
    const auto& mk = kernels::microkernels(isa);
    const int n = 64 * mk.width;
    std::vector<float> x(n);
    test::fill_uniform(x.data(), n, 11, -170.0f, 0.0f);
    const float edges[8] = {-126.0f, -126.25f, -126.5f, -126.75f, -127.0f, -127.5f, -150.0f, 0.0f};
    for (int j = 0; j < 8; ++j) x[j] = edges[j];
    x[9] = -INFINITY;
    const float shift = 3.0f;  // the fp32 subtraction is part of the contract
    for (int j = 0; j < n; ++j) x[j] += shift;
    x[9] = -INFINITY;
    for (const bool ftz : {false, true}) {
      std::vector<float> e = x;
      float sum = 0;
      if (ftz) {
        kernels::FlushDenormals flush;
        sum = mk.exp2_shift_sum(e.data(), n, shift);
      } else {
        sum = mk.exp2_shift_sum(e.data(), n, shift);
      }
      double ref_sum = 0;
      for (int j = 0; j < n; ++j) {
        const double arg = static_cast<double>(x[j] - shift);
        const double r = std::exp2(arg);
        ref_sum += r;
        if (arg >= -126.0) {
          EXPECT_NEAR(e[j], r, 3e-7 * r) << to_string(isa) << " x " << arg;
        } else {
          EXPECT_GE(e[j], 0.0f) << to_string(isa) << " x " << arg;
          EXPECT_LE(e[j], 0x1p-126f) << to_string(isa) << " x " << arg;
          if (ftz || arg < -149.0) {
            EXPECT_EQ(e[j], 0.0f) << to_string(isa) << " x " << arg << " ftz " << ftz;
          }
        }
      }
      EXPECT_EQ(e[9], 0.0f) << to_string(isa);
      EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum) << to_string(isa);
    }
    // probs_t: columns are queries with their own shift; +inf shifts give exact zeros.
    const int rows = 5, cols = 4 * mk.width, ld = cols + mk.width;
    const float c2 = 0.18f;
    std::vector<float> st(static_cast<std::size_t>(rows) * ld), shifts(cols);
    test::fill_uniform(st.data(), rows * ld, 12, -400.0f, 40.0f);
    test::fill_uniform(shifts.data(), cols, 13, 7.2f, 9.0f);  // ≥ c2·max score: arguments ≤ 0
    shifts[1] = INFINITY;
    std::vector<float> pt = st;
    mk.probs_t(pt.data(), ld, rows, cols, c2, shifts.data());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        // The argument in double; the kernel rounds it once or twice in fp32 (fused or not), an
        // absolute error of up to 2^−23·(|c2·s| + |shift|), i.e. that times ln 2 relative.
        const double prod = static_cast<double>(c2) * st[r * ld + c];
        const double arg = prod - shifts[c];
        const double ref = std::exp2(arg);
        const double tol = 3e-7 + 0.6931471805599453 * 0x1p-23 * (std::fabs(prod) + std::fabs(shifts[c]));
        const float got = pt[r * ld + c];
        if (c == 1) {
          EXPECT_EQ(got, 0.0f) << to_string(isa);
        } else if (arg >= -125.0) {
          EXPECT_NEAR(got, ref, tol * ref) << to_string(isa) << " arg " << arg;
        } else if (arg < -127.0) {
          EXPECT_LE(got, 0x1p-126f) << to_string(isa) << " arg " << arg;
        }
      }
  }
}

}  // namespace
}  // namespace burst
