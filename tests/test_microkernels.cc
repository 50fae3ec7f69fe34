// Tests of the fp32 microkernel entries that have a slower twin in the same table
// (src/kernels/microkernels_impl.h): gemm_packed on panels from pack_panels against gemm on the
// row-major B (bit for bit: the same FMAs in the same k order per element) and against fp64, over
// edge sizes (rows 1..13 across the 6-row block, 1..5 vectors across the 2-vector panel and a
// narrower last panel, K 0, 1, 17, 64, a K below the packed one); and the FMA peak probe against
// a scalar twin of its chains (the flop count run_fma_probe reports is the work it did). Every
// fp32 table this CPU runs; tables without packed entries (panel = 0) skip that part.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace burst
