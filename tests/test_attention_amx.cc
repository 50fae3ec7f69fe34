// Tests of the AMX bf16 path (Isa::Amx: tdpbf16ps tiles; Isa::AmxEmulated: the same kernel over
// the software model of the tile instructions, src/kernels/microkernels_amx_emulated.cc).
//
// The kernel logic is the fused bf16 kernel of src/kernels/attention_tiled*.cc with its GEMMs on
// tiles, so it meets the same oracle as the vdpbf16ps path: the fp64 twin fed the same rounded
// inputs, with the bound derived in tests/test_attention_bf16.cc (fp32 rule + the P / dS
// rounding terms + the output's own rounding) — every benchmark mask, GQA 1/2/4, head dims
// across the 32-element tile K (20, 64, 80), odd lengths, varlen with empty sequences, forward
// and backward. *Emulated* tests run on any AVX2 CPU. *Hardware* tests need AMX and report
// SKIPPED with the reason elsewhere (ctest: test_attention_amx_hardware, SKIP_REGULAR_EXPRESSION).
// On AMX the hardware tile layer must also match the emulated one on the GEMM (bit for bit for one
// reduction pair, within fp32 accumulation error beyond), which pins the intrinsic mapping to the
// model the other tests validate.
// The bound can fail: a mask one key wider than the twin's is rejected on the emulated path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/dispatch.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "kernels/microkernels.h"
#include "lowp_oracle.h"

namespace burst {
namespace {

using test::Case;
using test::check_lowp;
using test::make_case;

void every_mask(Isa isa) {
  for (MaskType type : all_mask_types()) {
    BenchmarkMaskConfig cfg;
    cfg.block = 16;
    cfg.num_documents = 4;
    check_lowp(make_case(to_string(type), 4, 2, 100, 100, make_benchmark_mask(type, 100, cfg)), DType::BF16,
               {isa});
  }
}

void gqa_and_edges(Isa isa) {
  for (std::int64_t ratio : {1, 2, 4})
    check_lowp(make_case("gqa " + std::to_string(ratio), 4, 4 / ratio, 45, 45, Mask::causal_mask()),
               DType::BF16, {isa});
  for (auto [D, S_q, S_kv] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{20, 33, 31},
                              {64, 1, 40},
                              {80, 70, 33},
                              {64, 130, 97}}) {
    Case c =
        make_case("D=" + std::to_string(D) + " S_q=" + std::to_string(S_q) + " S_kv=" + std::to_string(S_kv),
                  2, 1, S_q, S_kv, Mask::sliding_window(9, 2));
    c.D = D;
    c.B = 2;
    check_lowp(c, DType::BF16, {isa});
  }
}

void varlen(Isa isa) {
  Case c = make_case("varlen causal", 4, 2, 90, 110, Mask::causal_mask());
  c.cu_q = {0, 5, 5, 40, 90};
  c.cu_kv = {0, 0, 30, 70, 110};
  check_lowp(c, DType::BF16, {isa});
}

// Non-bf16 dtypes on the AMX ISAs run the fp32 path (widened inputs), as on Avx512Bf16.
void other_dtypes(Isa isa) {
  for (DType dt : {DType::F16})
    check_lowp(make_case("f16 causal", 4, 2, 70, 70, Mask::causal_mask()), dt, {isa});
}

#define AMX_KERNEL_TESTS(Suite, isa, skip_unless) \
  TEST(Suite, EveryBenchmarkMask) {               \
    skip_unless;                                  \
    every_mask(isa);                              \
  }                                               \
  TEST(Suite, GqaHeadDimsAndEdgeLengths) {        \
    skip_unless;                                  \
    gqa_and_edges(isa);                           \
  }                                               \
  TEST(Suite, VarlenWithEmptySequences) {         \
    skip_unless;                                  \
    varlen(isa);                                  \
  }                                               \
  TEST(Suite, Fp16RunsTheFp32Path) {              \
    skip_unless;                                  \
    other_dtypes(isa);                            \
  }

#define SKIP_WITHOUT_AMX                                                                                \
  if (!isa_available(Isa::Amx)) {                                                                       \
    const CpuFeatures& cpu = detect_cpu_features();                                                     \
    GTEST_SKIP() << "no usable AMX on this CPU (CPUID amx_bf16+amx_tile=" << cpu.amx_bf16               \
                 << ", OS tile state=" << cpu.amx_os << ", arch_prctl permission=" << cpu.amx_permitted \
                 << ", avx512_bf16=" << cpu.avx512_bf16 << ")";                                         \
  }
#define SKIP_WITHOUT_AVX2 \
  if (!isa_available(Isa::AmxEmulated)) GTEST_SKIP() << "the emulated tiles need AVX2+FMA+F16C"

AMX_KERNEL_TESTS(AmxEmulated, Isa::AmxEmulated, SKIP_WITHOUT_AVX2)
AMX_KERNEL_TESTS(AmxHardware, Isa::Amx, SKIP_WITHOUT_AMX)

// The hardware tiles compute what the model computes: bit for bit for one reduction pair (K = 2),
// and within fp32 accumulation error for more, since the hardware's order and internal precision
// across pairs are undocumented. Any two fp32 sums of the same n terms differ by at most
// 2·n·u·Σ|term| (u = 2^-24, first order), n = K + 1 here (the K products and C); a wrong tile
// layout, pair order or operand is an error of the size of a term, far outside it.
TEST(AmxHardware, TilesMatchTheEmulatedTiles) {
  SKIP_WITHOUT_AMX;
  const kernels::Microkernels& hw = kernels::microkernels(Isa::Amx);
  const kernels::Microkernels& em = kernels::microkernels(Isa::AmxEmulated);
  for (int M : {1, 16, 17, 96})
    for (int N : {16, 48, 128})
      for (int K : {2, 32, 34, 64, 128})
        for (bool acc : {false, true}) {
          const int lda = K + 6, ldb = 2 * N + 8, ldc = N + 4;
          const float alpha = acc ? 1.0f : 0.5f;
          std::vector<float> fa(static_cast<std::size_t>(M * lda)), fb(static_cast<std::size_t>(K / 2 * ldb));
          test::fill_uniform(fa.data(), static_cast<std::int64_t>(fa.size()), 11, -3.0f, 3.0f);
          test::fill_uniform(fb.data(), static_cast<std::int64_t>(fb.size()), 12, -3.0f, 3.0f);
          std::vector<std::uint16_t> A(fa.size()), B(fb.size());
          for (std::size_t i = 0; i < A.size(); ++i) A[i] = bf16_from_float(fa[i]);
          for (std::size_t i = 0; i < B.size(); ++i) B[i] = bf16_from_float(fb[i]);
          std::vector<float> c0(static_cast<std::size_t>(M * ldc));
          test::fill_uniform(c0.data(), static_cast<std::int64_t>(c0.size()), 13);
          std::vector<float> c1 = c0, c2 = c0;
          hw.gemm_bf16(A.data(), lda, B.data(), ldb, c1.data(), ldc, M, N, K, acc, alpha);
          em.gemm_bf16(A.data(), lda, B.data(), ldb, c2.data(), ldc, M, N, K, acc, alpha);
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
              const std::size_t at = static_cast<std::size_t>(m * ldc + n);
              double magnitude = acc ? std::abs(static_cast<double>(c0[at])) : 0.0;
              for (int k = 0; k < K; ++k)
                magnitude += std::abs(
                    static_cast<double>(bf16_to_float(A[static_cast<std::size_t>(m * lda + k)])) *
                    bf16_to_float(B[static_cast<std::size_t>((k / 2) * ldb + 2 * n + (k & 1))]) * alpha);
              const double bound = K == 2 ? 0.0 : 2.0 * (K + 2) * 0x1.0p-24 * magnitude;
              ASSERT_LE(std::abs(static_cast<double>(c1[at]) - c2[at]), bound)
                  << "M=" << M << " N=" << N << " K=" << K << " acc=" << acc << " at (" << m << ", " << n
                  << "): hardware " << c1[at] << ", model " << c2[at];
            }
        }
}

TEST(AmxHardware, ProbeCountsFlopOrRefuses) {
  if (!isa_available(Isa::Amx)) {
    EXPECT_THROW(run_amx_probe(10), Error);
    SKIP_WITHOUT_AMX;
  }
  EXPECT_EQ(run_amx_probe(100), 100.0 * 4 * 16 * 16 * 32 * 2);
}

// The tile model's instruction semantics where they differ from plain fp32 arithmetic: bf16
// denormal inputs are zeros (DAZ), and a pair's two products are summed first (one rounding) and
// then added to the accumulator, as the hardware does (not one after the other, as the SDM's
// pseudocode reads).
TEST(AmxEmulated, TileProductFollowsTheInstructionSemantics) {
  SKIP_WITHOUT_AVX2;
  const kernels::Microkernels& em = kernels::microkernels(Isa::AmxEmulated);
  const int N = 16;
  std::vector<std::uint16_t> A(2, 0), B(2 * N, 0);
  std::vector<float> C(N, 0.0f);
  A[0] = 0x0001;                       // the smallest bf16 denormal, 2^-133
  B[0] = bf16_from_float(0x1.0p100f);  // product 2^-33 if the denormal were kept
  em.gemm_bf16(A.data(), 2, B.data(), 2 * N, C.data(), N, 1, N, 2, false, 1.0f);
  EXPECT_EQ(C[0], 0.0f);
  // Pair 0 gives 1·1 + 0; pair 1 sums 2^-24 + 2^-24 = 2^-23 first, and 1 + 2^-23 is exact.
  // Adding the products one after the other would round 1 + 2^-24 to 1 (tie to even) twice.
  A.assign(4, 0);
  B.assign(2 * 2 * N, 0);
  A[0] = bf16_from_float(1.0f);
  A[2] = A[3] = bf16_from_float(0x1.0p-12f);
  B[0] = bf16_from_float(1.0f);                           // pair row 0, column 0: (1, 0)
  B[2 * N] = B[2 * N + 1] = bf16_from_float(0x1.0p-12f);  // pair row 1, column 0
  em.gemm_bf16(A.data(), 4, B.data(), 2 * N, C.data(), N, 1, N, 4, false, 1.0f);
  EXPECT_EQ(C[0], 1.0f + 0x1.0p-23f);
  EXPECT_EQ(C[1], 0.0f);  // B's other columns are zero
}

// The bound rejects a real error on this path: a sliding window one key wider than the twin's.
TEST(AmxEmulated, BoundRejectsAOneKeyMaskError) {
  SKIP_WITHOUT_AVX2;
  const DType dt = DType::BF16;
  const Case c = make_case("window", 2, 1, 96, 96, Mask::sliding_window(24, 0)),
             wide = make_case("window+1", 2, 1, 96, 96, Mask::sliding_window(25, 0));
  const test::Rounded q = test::round_to(test::random_tensor(c.q_shape(), 31), dt),
                      k = test::round_to(test::random_tensor(c.kv_shape(), 32), dt),
                      v = test::round_to(test::random_tensor(c.kv_shape(), 33), dt);
  const AttentionOutput ref = attention_forward(q.wide.view(), k.wide.view(), v.wide.view(),
                                                test::params_of(c, KernelImpl::Reference));
  test::Rounded out = test::empty_rounded(c.q_shape(), dt);
  Tensor lse = test::lse_like(c);
  attention_forward(q.view, k.view, v.view, out.view, lse.view(),
                    test::params_of(wide, KernelImpl::Tiled, Isa::AmxEmulated));
  test::widen_into(out);
  const test::Rounded g = test::round_to(test::random_tensor(c.q_shape(), 34), dt);
  const test::NaiveErrors ne = test::naive_errors(c, q.wide, k.wide, v.wide, g.wide, out.wide, ref.lse);
  const test::RoundingBounds pb =
      test::p_rounding_bounds(c, q.wide, k.wide, v.wide, g.wide, out.wide, ref.lse);
  EXPECT_FALSE(test::within_lowp("out", out.wide, ref.out, ne.out, dt, &pb.out));
}

}  // namespace
}  // namespace burst
