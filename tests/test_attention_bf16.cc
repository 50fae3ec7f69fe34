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
#include "lowp_test_util.h"
#include "test_util.h"

namespace burst {
namespace {

// Every Tiled ISA this CPU runs (forces each path; the bf16-arithmetic one only where
// AVX512_BF16 is reported).
std::vector<Isa> isas_here() { return supported_isas(); }

// Whether (dt, isa) runs the GEMMs on bf16 operands (src/kernels/tiled_common.h).
bool bf16_dot(DType dt, Isa isa) { return dt == DType::BF16 && isa == Isa::Avx512Bf16; }

double unit_roundoff(DType dt) { return dt == DType::BF16 ? 0x1.0p-8 : 0x1.0p-11; }

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

using test::empty_rounded;
using test::round_to;
using test::Rounded;
using test::widen_into;

// extra (optional): the fp64 first-order size of the P / dS rounding of bf16 arithmetic.
::testing::AssertionResult within_lowp(const std::string& what, const Tensor& got, const Tensor& ref,
                                       double naive_err, DType dt, const Tensor* extra = nullptr) {
  const double u = unit_roundoff(dt);
  const double tol32 = test::tolerance(naive_err, test::max_abs(ref));
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.data()[i], g = got.data()[i];
    if (r == g) continue;
    const double p_term = extra != nullptr ? u * (1 + u) * extra->data()[i] : 0.0;
    const double bound = tol32 * (1 + u) + u * std::fabs(r) + p_term;
    if (!(std::fabs(g - r) <= bound))
      return ::testing::AssertionFailure()
             << what << "[" << i << "]: got " << g << ", ref " << r << ", |diff| " << std::fabs(g - r)
             << " > " << bound << " (tol32 " << tol32 << ", u " << u << ")";
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  std::string name;
  std::int64_t B = 1, S_q = 0, S_kv = 0, H = 2, H_kv = 1, D = 32;
  Mask mask;
  std::vector<std::int32_t> cu_q, cu_kv;  // set → varlen THD (B ignored)
  bool varlen() const { return !cu_q.empty(); }
  std::vector<std::int64_t> q_shape() const {
    return varlen() ? std::vector<std::int64_t>{S_q, H, D} : std::vector<std::int64_t>{B, S_q, H, D};
  }
  std::vector<std::int64_t> kv_shape() const {
    return varlen() ? std::vector<std::int64_t>{S_kv, H_kv, D} : std::vector<std::int64_t>{B, S_kv, H_kv, D};
  }
};

Case make_case(std::string name, std::int64_t H, std::int64_t H_kv, std::int64_t S_q, std::int64_t S_kv,
               Mask mask) {
  Case c;
  c.name = std::move(name);
  c.H = H;
  c.H_kv = H_kv;
  c.S_q = S_q;
  c.S_kv = S_kv;
  c.mask = std::move(mask);
  return c;
}

AttentionParams params_of(const Case& c, KernelImpl impl, Isa isa = Isa::Auto) {
  AttentionParams p;
  p.mask = c.mask;
  p.impl = impl;
  p.isa = isa;
  p.num_threads = 1;
  p.block_q = p.block_kv = 32;
  p.cu_seqlens_q = c.cu_q;
  p.cu_seqlens_kv = c.cu_kv;
  return p;
}

struct NaiveErrors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
};

// Rows [r0, r1) of a THD tensor as a BSHD [1, r1−r0, H, D] tensor; of an [H, T] lse as [1, H, r1−r0].
Tensor thd_rows(const Tensor& t, std::int64_t r0, std::int64_t r1) {
  const std::int64_t w = t.shape()[1] * t.shape()[2];
  Tensor out({1, r1 - r0, t.shape()[1], t.shape()[2]});
  std::copy(t.data() + r0 * w, t.data() + r1 * w, out.data());
  return out;
}
Tensor lse_cols(const Tensor& t, std::int64_t c0, std::int64_t c1) {
  const std::int64_t H = t.shape()[0], T = t.shape()[1];
  Tensor out({1, H, c1 - c0});
  for (std::int64_t h = 0; h < H; ++h)
    std::copy(t.data() + h * T + c0, t.data() + h * T + c1, out.data() + h * (c1 - c0));
  return out;
}

// The naive-fp32 error against fp64 on the (widened) inputs: the fp32 rule's yardstick. Varlen
// problems are measured per sequence (BSHD, B = 1) and the largest error kept.
NaiveErrors naive_errors(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                         const Tensor& out, const Tensor& lse) {
  NaiveErrors e;
  auto measure = [&e](const Tensor& q1, const Tensor& k1, const Tensor& v1, const Tensor& g1,
                      const Tensor& o1, const Tensor& l1, const AttentionParams& p) {
    AttentionParams pr = p;
    pr.impl = KernelImpl::Reference;
    const AttentionOutput ref = attention_forward(q1.view(), k1.view(), v1.view(), pr);
    const AttentionOutput nf = test::naive_fp32_forward(q1, k1, v1, pr);
    const AttentionGrads gr =
        attention_backward(g1.view(), q1.view(), k1.view(), v1.view(), o1.view(), l1.view(), pr);
    const AttentionGrads gn = test::naive_fp32_backward(g1, q1, k1, v1, o1, l1, pr);
    e.out = std::max(e.out, test::max_abs_diff(nf.out, ref.out));
    e.lse = std::max(e.lse, test::max_abs_diff(nf.lse, ref.lse));
    e.dq = std::max(e.dq, test::max_abs_diff(gn.dq, gr.dq));
    e.dk = std::max(e.dk, test::max_abs_diff(gn.dk, gr.dk));
    e.dv = std::max(e.dv, test::max_abs_diff(gn.dv, gr.dv));
  };
  AttentionParams p = params_of(c, KernelImpl::Reference);
  if (!c.varlen()) {
    measure(q, k, v, dout, out, lse, p);
    return e;
  }
  p.cu_seqlens_q.clear();
  p.cu_seqlens_kv.clear();
  for (std::size_t b = 0; b + 1 < c.cu_q.size(); ++b) {
    const std::int64_t q0 = c.cu_q[b], q1 = c.cu_q[b + 1], k0 = c.cu_kv[b], k1 = c.cu_kv[b + 1];
    if (q1 == q0 || k1 == k0) continue;  // no pairs: nothing to round
    measure(thd_rows(q, q0, q1), thd_rows(k, k0, k1), thd_rows(v, k0, k1), thd_rows(dout, q0, q1),
            thd_rows(out, q0, q1), lse_cols(lse, q0, q1), p);
  }
  return e;
}

struct RoundingBounds {
  Tensor out, dq, dk, dv;
};

// The P / dS rounding terms of the header comment in fp64 on BSHD tensors: out and lse are the
// kernel's (the twin's backward reads them too), delta = rowsum(dO ∘ out).
RoundingBounds p_rounding_bounds_bshd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                      const Tensor& out, const Tensor& lse, const AttentionParams& params) {
  const test::NaiveProblem n = test::naive_problem(q, k, v, params);
  const kernels::Problem& p = n.p;
  RoundingBounds r{Tensor(q.shape()), Tensor(q.shape()), Tensor(k.shape()), Tensor(k.shape())};
  const std::int64_t G = p.H / p.H_kv, D = p.D;
  const double tau = p.scale;
  auto at = [D](const Tensor& t, std::int64_t b, std::int64_t s, std::int64_t h) {
    return ((b * t.shape()[1] + s) * t.shape()[2] + h) * D;
  };
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        const double l = lse.data()[(b * p.H + h) * p.S_q + i];
        if (std::isinf(l)) continue;  // fully masked row: P = 0
        const float* qi = q.data() + at(q, b, i, h);
        const float* gi = dout.data() + at(dout, b, i, h);
        const float* oi = out.data() + at(out, b, i, h);
        double delta = 0;
        for (std::int64_t d = 0; d < D; ++d) delta += static_cast<double>(gi[d]) * oi[d];
        for (std::int64_t j = 0; j < p.S_kv; ++j) {
          if (!n.mask.visible(n.q_pos[static_cast<std::size_t>(i)], n.kv_pos[static_cast<std::size_t>(j)]))
            continue;
          const float* kj = k.data() + at(k, b, j, h / G);
          const float* vj = v.data() + at(v, b, j, h / G);
          double s = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            s += static_cast<double>(qi[d]) * kj[d];
            dp += static_cast<double>(gi[d]) * vj[d];
          }
          const double P = std::exp(tau * s - l), dS = std::fabs(P * (dp - delta));
          float* ob = r.out.data() + at(q, b, i, h);
          float* qb = r.dq.data() + at(q, b, i, h);
          float* kb = r.dk.data() + at(k, b, j, h / G);
          float* vb = r.dv.data() + at(k, b, j, h / G);
          for (std::int64_t d = 0; d < D; ++d) {
            ob[d] += static_cast<float>(P * std::fabs(vj[d]));
            vb[d] += static_cast<float>(P * std::fabs(gi[d]));
            kb[d] += static_cast<float>(tau * dS * std::fabs(qi[d]));
            qb[d] += static_cast<float>(tau * dS * std::fabs(kj[d]));
          }
        }
      }
  return r;
}

// p_rounding_bounds_bshd for a Case (varlen: per sequence, scattered back to THD rows).
RoundingBounds p_rounding_bounds(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& dout, const Tensor& out, const Tensor& lse) {
  AttentionParams p = params_of(c, KernelImpl::Reference);
  if (!c.varlen()) return p_rounding_bounds_bshd(q, k, v, dout, out, lse, p);
  p.cu_seqlens_q.clear();
  p.cu_seqlens_kv.clear();
  RoundingBounds r{Tensor(q.shape()), Tensor(q.shape()), Tensor(k.shape()), Tensor(k.shape())};
  const std::int64_t wq = c.H * c.D, wk = c.H_kv * c.D;
  for (std::size_t b = 0; b + 1 < c.cu_q.size(); ++b) {
    const std::int64_t q0 = c.cu_q[b], q1 = c.cu_q[b + 1], k0 = c.cu_kv[b], k1 = c.cu_kv[b + 1];
    if (q1 == q0 || k1 == k0) continue;
    const RoundingBounds s =
        p_rounding_bounds_bshd(thd_rows(q, q0, q1), thd_rows(k, k0, k1), thd_rows(v, k0, k1),
                               thd_rows(dout, q0, q1), thd_rows(out, q0, q1), lse_cols(lse, q0, q1), p);
    std::copy(s.out.data(), s.out.data() + s.out.numel(), r.out.data() + q0 * wq);
    std::copy(s.dq.data(), s.dq.data() + s.dq.numel(), r.dq.data() + q0 * wq);
    std::copy(s.dk.data(), s.dk.data() + s.dk.numel(), r.dk.data() + k0 * wk);
    std::copy(s.dv.data(), s.dv.data() + s.dv.numel(), r.dv.data() + k0 * wk);
  }
  return r;
}

Tensor lse_like(const Case& c) { return c.varlen() ? Tensor({c.H, c.S_q}) : Tensor({c.B, c.H, c.S_q}); }

// Forward and backward in dtype dt on every ISA here against the fp64 twin on the same rounded
// inputs (header comment).
void check_lowp(const Case& c, DType dt) {
  SCOPED_TRACE(c.name + " " + to_string(dt));
  const Tensor q32 = test::random_tensor(c.q_shape(), 21), k32 = test::random_tensor(c.kv_shape(), 22),
               v32 = test::random_tensor(c.kv_shape(), 23), g32 = test::random_tensor(c.q_shape(), 24);
  const Rounded q = round_to(q32, dt), k = round_to(k32, dt), v = round_to(v32, dt), g = round_to(g32, dt);
  const AttentionParams pr = params_of(c, KernelImpl::Reference);
  const AttentionOutput ref = attention_forward(q.wide.view(), k.wide.view(), v.wide.view(), pr);

  // The reference itself on 16-bit storage: its fp32 result rounded once, bit for bit.
  Rounded ref_out = empty_rounded(q32.shape(), dt);
  Tensor ref_lse = lse_like(c);
  attention_forward(q.view, k.view, v.view, ref_out.view, ref_lse.view(), pr);
  const Rounded expect_out = round_to(ref.out, dt);
  EXPECT_EQ(ref_out.bits, expect_out.bits);
  EXPECT_EQ(0, std::memcmp(ref_lse.data(), ref.lse.data(),
                           sizeof(float) * static_cast<std::size_t>(ref.lse.numel())));

  for (Isa isa : isas_here()) {
    SCOPED_TRACE(to_string(isa));
    const AttentionParams pt = params_of(c, KernelImpl::Tiled, isa);
    Rounded out = empty_rounded(q32.shape(), dt);
    Tensor lse = lse_like(c);
    attention_forward(q.view, k.view, v.view, out.view, lse.view(), pt);
    widen_into(out);
    // Backward from the kernel's own rounded out and fp32 lse; the twin gets the same values.
    Rounded dq = empty_rounded(q32.shape(), dt), dk = empty_rounded(k32.shape(), dt),
            dv = empty_rounded(k32.shape(), dt);
    attention_backward(g.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view, pt);
    widen_into(dq);
    widen_into(dk);
    widen_into(dv);
    const AttentionGrads gref = attention_backward(g.wide.view(), q.wide.view(), k.wide.view(), v.wide.view(),
                                                   out.wide.view(), lse.view(), pr);
    const NaiveErrors ne = naive_errors(c, q.wide, k.wide, v.wide, g.wide, out.wide, lse);
    std::optional<RoundingBounds> pb;
    if (bf16_dot(dt, isa)) pb = p_rounding_bounds(c, q.wide, k.wide, v.wide, g.wide, out.wide, lse);
    EXPECT_TRUE(within_lowp("out", out.wide, ref.out, ne.out, dt, pb ? &pb->out : nullptr));
    const double lse_err = test::max_abs_diff(lse, ref.lse),
                 lse_tol = test::tolerance(ne.lse, test::max_abs(ref.lse));
    EXPECT_LE(lse_err, lse_tol) << "lse (fp32 rule)";
    EXPECT_TRUE(within_lowp("dq", dq.wide, gref.dq, ne.dq, dt, pb ? &pb->dq : nullptr));
    EXPECT_TRUE(within_lowp("dk", dk.wide, gref.dk, ne.dk, dt, pb ? &pb->dk : nullptr));
    EXPECT_TRUE(within_lowp("dv", dv.wide, gref.dv, ne.dv, dt, pb ? &pb->dv : nullptr));
  }
}

TEST(LowPrecisionVsTwin, EveryBenchmarkMask) {
  for (DType dt : {DType::BF16, DType::F16})
    for (MaskType type : all_mask_types()) {
      BenchmarkMaskConfig cfg;
      cfg.block = 16;
      cfg.num_documents = 4;
      check_lowp(make_case(to_string(type), 4, 2, 100, 100, make_benchmark_mask(type, 100, cfg)), dt);
    }
}

TEST(LowPrecisionVsTwin, GqaRatiosHeadDimsAndEdgeLengths) {
  for (DType dt : {DType::BF16, DType::F16}) {
    for (std::int64_t ratio : {1, 4})
      check_lowp(make_case("gqa " + std::to_string(ratio), 4, 4 / ratio, 45, 45, Mask::causal_mask()), dt);
    for (auto [D, S_q, S_kv] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{20, 33, 31}, {64, 1, 40}, {80, 70, 33}}) {
      Case c = make_case(
          "D=" + std::to_string(D) + " S_q=" + std::to_string(S_q) + " S_kv=" + std::to_string(S_kv), 2, 1,
          S_q, S_kv, Mask::sliding_window(9, 2));
      c.D = D;
      c.B = 2;
      check_lowp(c, dt);
    }
  }
}

TEST(LowPrecisionVsTwin, VarlenWithEmptySequences) {
  for (DType dt : {DType::BF16, DType::F16}) {
    Case c = make_case("varlen causal", 4, 2, 90, 110, Mask::causal_mask());
    c.cu_q = {0, 5, 5, 40, 90};
    c.cu_kv = {0, 0, 30, 70, 110};
    check_lowp(c, dt);
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
