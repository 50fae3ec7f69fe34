// Tests of bf16 / fp16 storage (src/kernels/convert.*, the dtype plumbing of the tiled and
// reference kernels and the boundary rules of src/attention.cc).
//
// Converters: the AVX2+F16C table is bitwise equal to the portable one (every 16-bit pattern
// widened; edge and random floats narrowed); the portable rules round to nearest, ties to even.
//
// Kernels vs the slow twin. The twin is the fp64 oracle (KernelImpl::Reference) fed with the
// SAME rounded inputs: q, k, v, dout are rounded to bf16/fp16 once, the kernel under test reads
// the 16-bit storage, the oracle reads their exact fp32 widening. The kernel computes in fp32 and
// rounds each result once, so per element
//     |got_i − ref_i| ≤ tol32·(1 + u) + u·|ref_i|
// where tol32 is the fp32 rule of tests/test_util.h on these inputs (kTolC × the naive-fp32
// error against fp64, floor 8 ulps) and u the unit roundoff of the output dtype (2^-8 bf16,
// 2^-11 fp16): rounding an fp32 value x̂ with |x̂ − ref| ≤ tol32 moves it by ≤ u·|x̂| ≤ u·(|ref| +
// tol32). lse stays fp32 and meets the fp32 rule unchanged. A wrong mask element or a missed
// conversion gives errors of order |values| (≫ u·|ref|), so these bounds fail on real bugs.
// Also: f32 outputs from 16-bit inputs are bitwise the fp32 kernel on the widened inputs.
//
// bf16 arithmetic (Isa::Avx512Bf16 with bf16 q, k, v, dout; vdpbf16ps). Q, K, V, dO are exact
// in bf16 and their products exact in fp32, so S and dP keep the fp32 rule; what is new is that
// P (forward, and the backward's dV operand) and dS (the dK, dQ operand) are rounded to bf16
// before their GEMM: P̃ = P(1 + ε), |ε| ≤ u. To first order that adds to each result element
//     out_id: u·Σ_j P_ij·|v_jd|        dv_jd: u·Σ_i P_ij·|dO_id|
//     dk_jd: u·τ·Σ_i |dS_ij|·|q_id|   dq_id: u·τ·Σ_j |dS_ij|·|k_jd|
// (P normalised by the final lse; sums over visible pairs and the query heads of a GQA group),
// which the test computes in fp64 (p_rounding_bounds) and adds, times (1 + u) for the output's
// own rounding, to the bound above. The fp32 rule's factor covers the fp32 P and dS the kernel
// rounds (they differ from the exact ones by ~1e-7 relative). This bound is per element and
// tight to a few: the planted-bug check below shows a one-element-wider sliding window fails it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "kernels/convert.h"
#include "lowp_oracle.h"
#include "lowp_test_util.h"
#include "test_util.h"

namespace burst {
namespace {

// Every Tiled ISA this CPU runs but the emulated AMX tiles (forces each path; the
// bf16-arithmetic ones only where the CPU reports them; the emulation is test_attention_amx's).
std::vector<Isa> isas_here() {
  std::vector<Isa> out;
  for (Isa isa : supported_isas())
    if (isa != Isa::AmxEmulated) out.push_back(isa);
  return out;
}

// ---------------------------------------------------------------- converters

TEST(Converters, SimdTableIsBitwiseThePortableRules) {
  if (detect_isa() == Isa::Portable) GTEST_SKIP() << "no AVX2+F16C on this CPU";
  const auto& scalar = kernels::converters_portable();
  const auto& simd = kernels::converters(detect_isa());
  ASSERT_NE(&scalar, &simd);
  std::vector<std::uint16_t> all(65536 + 5);  // odd length: the scalar tail runs too
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> a(all.size()), b(all.size());
  for (auto [ws, wv] : {std::pair{scalar.widen_bf16, simd.widen_bf16}, {scalar.widen_f16, simd.widen_f16}}) {
    ws(all.data(), a.data(), static_cast<std::int64_t>(all.size()));
    wv(all.data(), b.data(), static_cast<std::int64_t>(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(float_bits(a[i]), float_bits(b[i])) << "pattern " << i;
  }
  // Edge floats (ties, overflow to inf, fp16 subnormals, NaN, ±0) then random ones of every scale.
  std::vector<float> x = {0.0f,
                          -0.0f,
                          INFINITY,
                          -INFINITY,
                          NAN,
                          -NAN,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -65520.0f,
                          0x1.0p-24f,
                          0x1.8p-25f,
                          0x1.0p-25f,
                          0x1.0p-14f,
                          0x1.ffcp-15f,
                          1.0f + 0x1.0p-8f,
                          1.0f + 0x1.8p-8f,
                          1.0f + 0x1.0p-11f,
                          3.0e38f,
                          0x1.0p-130f,
                          -1.5f};
  test::fill_uniform(b.data(), 4096, 3, -1.0f, 1.0f);
  for (int i = 0; i < 4096; ++i) x.push_back(b[static_cast<std::size_t>(i)] * std::ldexp(1.0f, i % 60 - 30));
  std::vector<std::uint16_t> hs(x.size()), hv(x.size());
  for (auto [ns, nv] :
       {std::pair{scalar.narrow_bf16, simd.narrow_bf16}, {scalar.narrow_f16, simd.narrow_f16}}) {
    ns(x.data(), hs.data(), static_cast<std::int64_t>(x.size()));
    nv(x.data(), hv.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(hs[i], hv[i]) << "x = " << x[i];
  }
}

TEST(Converters, PortableRoundsToNearestEvenAndRoundTrips) {
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(to_string(dt));
    auto widen = [dt](std::uint16_t h) { return dt == DType::BF16 ? bf16_to_float(h) : f16_to_float(h); };
    auto narrow = [dt](float f) { return dt == DType::BF16 ? bf16_from_float(f) : f16_from_float(f); };
    for (std::uint32_t h = 0; h < 65536; ++h) {  // widen then narrow is the identity (NaN stays NaN)
      const float f = widen(static_cast<std::uint16_t>(h));
      if (std::isnan(f))
        EXPECT_TRUE(std::isnan(widen(narrow(f))));
      else
        ASSERT_EQ(narrow(f), h) << h;
    }
    std::vector<float> x(20000);
    test::fill_uniform(x.data(), static_cast<std::int64_t>(x.size()), 9, -4.0f, 4.0f);
    for (float f : x) {  // the nearest of the two neighbours, ties to the even pattern
      const std::uint16_t h = narrow(f);
      const double e = std::fabs(static_cast<double>(widen(h)) - f);
      for (int step : {-1, 1}) {
        const double n = std::fabs(static_cast<double>(widen(static_cast<std::uint16_t>(h + step))) - f);
        ASSERT_TRUE(e < n || (e == n && (h & 1u) == 0)) << f;
      }
    }
    EXPECT_TRUE(std::isinf(widen(narrow(dt == DType::F16 ? 65520.0f : 3.4e38f))));
  }
  EXPECT_EQ(f16_from_float(65519.0f), 0x7bffu);           // largest finite half
  EXPECT_EQ(f16_from_float(0x1.8p-25f), 0x0001u);         // 1.5 × 2^-25 → the smallest subnormal
  EXPECT_EQ(f16_from_float(0x1.0p-25f), 0x0000u);         // exactly half of it: tie to even = 0
  EXPECT_EQ(bf16_from_float(1.0f + 0x1.0p-8f), 0x3f80u);  // tie → even (1.0)
  EXPECT_EQ(bf16_from_float(1.0f + 0x1.8p-8f), 0x3f81u);  // above the tie → up
}

// ---------------------------------------------------------------- kernels vs the twin

using test::bf16_dot;
using test::Case;
using test::check_lowp;
using test::empty_rounded;
using test::lse_like;
using test::make_case;
using test::naive_errors;
using test::NaiveErrors;
using test::p_rounding_bounds;
using test::params_of;
using test::round_to;
using test::Rounded;
using test::RoundingBounds;
using test::widen_into;
using test::within_lowp;

TEST(LowPrecisionVsTwin, EveryBenchmarkMask) {
  for (DType dt : {DType::BF16, DType::F16})
    for (MaskType type : all_mask_types()) {
      BenchmarkMaskConfig cfg;
      cfg.block = 16;
      cfg.num_documents = 4;
      check_lowp(make_case(to_string(type), 4, 2, 100, 100, make_benchmark_mask(type, 100, cfg)), dt,
                 isas_here());
    }
}

TEST(LowPrecisionVsTwin, GqaRatiosHeadDimsAndEdgeLengths) {
  for (DType dt : {DType::BF16, DType::F16}) {
    for (std::int64_t ratio : {1, 4})
      check_lowp(make_case("gqa " + std::to_string(ratio), 4, 4 / ratio, 45, 45, Mask::causal_mask()), dt,
                 isas_here());
    for (auto [D, S_q, S_kv] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{20, 33, 31}, {64, 1, 40}, {80, 70, 33}}) {
      Case c = make_case(
          "D=" + std::to_string(D) + " S_q=" + std::to_string(S_q) + " S_kv=" + std::to_string(S_kv), 2, 1,
          S_q, S_kv, Mask::sliding_window(9, 2));
      c.D = D;
      c.B = 2;
      check_lowp(c, dt, isas_here());
    }
  }
}

TEST(LowPrecisionVsTwin, VarlenWithEmptySequences) {
  for (DType dt : {DType::BF16, DType::F16}) {
    Case c = make_case("varlen causal", 4, 2, 90, 110, Mask::causal_mask());
    c.cu_q = {0, 5, 5, 40, 90};
    c.cu_kv = {0, 0, 30, 70, 110};
    check_lowp(c, dt, isas_here());
  }
}

// The bf16-arithmetic bound can fail: the kernel run with a sliding window one key wider than
// the twin's (one extra visible key per row) must be rejected, forward and backward.
TEST(LowPrecisionVsTwin, Bf16ArithmeticBoundRejectsAOneKeyMaskError) {
  if (detect_isa() != Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  const DType dt = DType::BF16;
  const Case c = make_case("window", 2, 1, 96, 96, Mask::sliding_window(24, 0)),
             wide = make_case("window+1", 2, 1, 96, 96, Mask::sliding_window(25, 0));
  const Rounded q = round_to(test::random_tensor(c.q_shape(), 31), dt),
                k = round_to(test::random_tensor(c.kv_shape(), 32), dt),
                v = round_to(test::random_tensor(c.kv_shape(), 33), dt),
                g = round_to(test::random_tensor(c.q_shape(), 34), dt);
  const AttentionParams pr = params_of(c, KernelImpl::Reference);
  const AttentionOutput ref = attention_forward(q.wide.view(), k.wide.view(), v.wide.view(), pr);
  Rounded out = empty_rounded(c.q_shape(), dt), dq = empty_rounded(c.q_shape(), dt);
  Rounded dk = empty_rounded(c.kv_shape(), dt), dv = empty_rounded(c.kv_shape(), dt);
  Tensor lse = lse_like(c);
  const AttentionParams pw = params_of(wide, KernelImpl::Tiled, Isa::Avx512Bf16);
  attention_forward(q.view, k.view, v.view, out.view, lse.view(), pw);
  attention_backward(g.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view, pw);
  widen_into(out);
  widen_into(dk);
  const AttentionGrads gref = attention_backward(g.wide.view(), q.wide.view(), k.wide.view(), v.wide.view(),
                                                 out.wide.view(), ref.lse.view(), pr);
  const NaiveErrors ne = naive_errors(c, q.wide, k.wide, v.wide, g.wide, out.wide, ref.lse);
  const RoundingBounds pb = p_rounding_bounds(c, q.wide, k.wide, v.wide, g.wide, out.wide, ref.lse);
  EXPECT_FALSE(within_lowp("out", out.wide, ref.out, ne.out, dt, &pb.out));
  EXPECT_FALSE(within_lowp("dk", dk.wide, gref.dk, ne.dk, dt, &pb.dk));
}

// f32 outputs from 16-bit inputs: the kernels widen exactly, so the result is bit for bit the
// fp32 kernel on the widened inputs (forward, backward, and accumulate into f32 gradients).
TEST(LowPrecisionOutputs, F32ResultsAreTheFp32KernelOnWidenedInputs) {
  for (DType dt : {DType::BF16, DType::F16}) {
    const Case c = make_case("f32 outputs", 4, 2, 70, 70, Mask::causal_mask());
    const Rounded q = round_to(test::random_tensor(c.q_shape(), 1), dt),
                  k = round_to(test::random_tensor(c.kv_shape(), 2), dt),
                  v = round_to(test::random_tensor(c.kv_shape(), 3), dt),
                  g = round_to(test::random_tensor(c.q_shape(), 4), dt);
    for (Isa isa : isas_here()) {
      if (bf16_dot(dt, isa)) continue;  // bf16 arithmetic rounds P: not the fp32 kernel (checked vs the twin)
      SCOPED_TRACE(std::string(to_string(dt)) + " " + to_string(isa));
      const AttentionParams p = params_of(c, KernelImpl::Tiled, isa);
      const AttentionOutput want = attention_forward(q.wide.view(), k.wide.view(), v.wide.view(), p);
      const AttentionOutput got = attention_forward(q.view, k.view, v.view, p);  // allocating form: f32
      EXPECT_EQ(want.out.vec(), got.out.vec());
      EXPECT_EQ(want.lse.vec(), got.lse.vec());
      const AttentionGrads gw = attention_backward(g.wide.view(), q.wide.view(), k.wide.view(), v.wide.view(),
                                                   want.out.view(), want.lse.view(), p);
      const AttentionGrads gg =
          attention_backward(g.view, q.view, k.view, v.view, got.out.view(), got.lse.view(), p);
      EXPECT_EQ(gw.dq.vec(), gg.dq.vec());
      EXPECT_EQ(gw.dk.vec(), gg.dk.vec());
      EXPECT_EQ(gw.dv.vec(), gg.dv.vec());
      Tensor delta({c.B, c.H, c.S_q});
      attention_delta(g.wide.view(), want.out.view(), delta.view());
      AttentionGrads acc_w = gw, acc_g = gw;  // accumulate on top of a non-zero start
      attention_backward_with_delta(g.wide.view(), q.wide.view(), k.wide.view(), v.wide.view(),
                                    want.lse.view(), delta.view(), acc_w.dq.view(), acc_w.dk.view(),
                                    acc_w.dv.view(), p, true);
      attention_backward_with_delta(g.view, q.view, k.view, v.view, want.lse.view(), delta.view(),
                                    acc_g.dq.view(), acc_g.dk.view(), acc_g.dv.view(), p, true);
      EXPECT_EQ(acc_w.dq.vec(), acc_g.dq.vec());
      EXPECT_EQ(acc_w.dk.vec(), acc_g.dk.vec());
    }
  }
}

// ---------------------------------------------------------------- boundary

template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LowPrecisionErrors, MixedDtypesF64AndAccumulateIntoBf16) {
  const Tensor q32 = test::random_tensor({1, 8, 2, 16}, 1), k32 = test::random_tensor({1, 8, 1, 16}, 2);
  const Rounded q = round_to(q32, DType::BF16), k = round_to(k32, DType::BF16),
                v = round_to(k32, DType::BF16);
  const Rounded kh = round_to(k32, DType::F16);
  AttentionParams p;
  expect_error([&] { attention_forward(q.view, kh.view, v.view, p); }, ErrorKind::InvalidArgument,
               "mixed dtypes q bf16, k f16, v bf16");
  expect_error([&] { attention_forward(q.view, k32.view(), v.view, p); }, ErrorKind::InvalidArgument,
               "mixed dtypes");
  Rounded out_f16 = empty_rounded(q32.shape(), DType::F16);
  Tensor lse({1, 2, 8});
  expect_error([&] { attention_forward(q.view, k.view, v.view, out_f16.view, lse.view(), p); },
               ErrorKind::InvalidArgument, "out has dtype f16 but q, k, v are bf16");
  Rounded dq = empty_rounded(q32.shape(), DType::BF16), dk = empty_rounded(k32.shape(), DType::BF16),
          dv = empty_rounded(k32.shape(), DType::BF16);
  Tensor delta({1, 2, 8});
  expect_error(
      [&] {
        attention_backward_with_delta(q.view, q.view, k.view, v.view, lse.view(), delta.view(), dq.view,
                                      dk.view, dv.view, p, true);
      },
      ErrorKind::InvalidArgument, "accumulate=true");
  std::vector<double> q64(static_cast<std::size_t>(q32.numel()));
  const TensorView q64v = make_view(q64.data(), DType::F64, q32.shape());
  expect_error([&] { attention_forward(q64v, k32.view(), k32.view(), p); }, ErrorKind::Unsupported,
               "convert q, k and v");
}

}  // namespace
}  // namespace burst
