// tests/lowp_oracle.h — the 16-bit oracle check shared by the bf16 / fp16 kernel tests
// (test_attention_bf16.cc, whose header comment derives the bound) and the AMX tests
// (test_attention_amx.cc): forward and backward of a Case on chosen ISAs against the fp64 twin
// fed the same rounded inputs, with the P / dS rounding terms of bf16 arithmetic added where the
// ISA computes on bf16 operands.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "burst/attention.h"
#include "burst/dispatch.h"
#include "burst/mask.h"
#include "lowp_test_util.h"
#include "test_util.h"

namespace burst::test {

inline double unit_roundoff(DType dt) { return dt == DType::BF16 ? 0x1.0p-8 : 0x1.0p-11; }

// Whether (dt, isa) runs the GEMMs on bf16 operands (src/kernels/tiled_common.h).
inline bool bf16_dot(DType dt, Isa isa) { return bf16_operands(isa, dt); }

// extra (optional): the fp64 first-order size of the P / dS rounding of bf16 arithmetic.
inline ::testing::AssertionResult within_lowp(const std::string& what, const Tensor& got, const Tensor& ref,
                                              double naive_err, DType dt, const Tensor* extra = nullptr) {
  const double u = unit_roundoff(dt);
  const double tol32 = tolerance(naive_err, max_abs(ref));
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

inline Case make_case(std::string name, std::int64_t H, std::int64_t H_kv, std::int64_t S_q,
                      std::int64_t S_kv, Mask mask) {
  Case c;
  c.name = std::move(name);
  c.H = H;
  c.H_kv = H_kv;
  c.S_q = S_q;
  c.S_kv = S_kv;
  c.mask = std::move(mask);
  return c;
}

inline AttentionParams params_of(const Case& c, KernelImpl impl, Isa isa = Isa::Auto) {
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
inline Tensor thd_rows(const Tensor& t, std::int64_t r0, std::int64_t r1) {
  const std::int64_t w = t.shape()[1] * t.shape()[2];
  Tensor out({1, r1 - r0, t.shape()[1], t.shape()[2]});
  std::copy(t.data() + r0 * w, t.data() + r1 * w, out.data());
  return out;
}
inline Tensor lse_cols(const Tensor& t, std::int64_t c0, std::int64_t c1) {
  const std::int64_t H = t.shape()[0], T = t.shape()[1];
  Tensor out({1, H, c1 - c0});
  for (std::int64_t h = 0; h < H; ++h)
    std::copy(t.data() + h * T + c0, t.data() + h * T + c1, out.data() + h * (c1 - c0));
  return out;
}

// The naive-fp32 error against fp64 on the (widened) inputs: the fp32 rule's yardstick. Varlen
// problems are measured per sequence (BSHD, B = 1) and the largest error kept.
inline NaiveErrors naive_errors(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& dout, const Tensor& out, const Tensor& lse) {
  NaiveErrors e;
  auto measure = [&e](const Tensor& q1, const Tensor& k1, const Tensor& v1, const Tensor& g1,
                      const Tensor& o1, const Tensor& l1, const AttentionParams& p) {
    AttentionParams pr = p;
    pr.impl = KernelImpl::Reference;
    const AttentionOutput ref = attention_forward(q1.view(), k1.view(), v1.view(), pr);
    const AttentionOutput nf = naive_fp32_forward(q1, k1, v1, pr);
    const AttentionGrads gr =
        attention_backward(g1.view(), q1.view(), k1.view(), v1.view(), o1.view(), l1.view(), pr);
    const AttentionGrads gn = naive_fp32_backward(g1, q1, k1, v1, o1, l1, pr);
    e.out = std::max(e.out, max_abs_diff(nf.out, ref.out));
    e.lse = std::max(e.lse, max_abs_diff(nf.lse, ref.lse));
    e.dq = std::max(e.dq, max_abs_diff(gn.dq, gr.dq));
    e.dk = std::max(e.dk, max_abs_diff(gn.dk, gr.dk));
    e.dv = std::max(e.dv, max_abs_diff(gn.dv, gr.dv));
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
inline RoundingBounds p_rounding_bounds_bshd(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& dout, const Tensor& out, const Tensor& lse,
                                             const AttentionParams& params) {
  const NaiveProblem n = naive_problem(q, k, v, params);
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
inline RoundingBounds p_rounding_bounds(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
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

inline Tensor lse_like(const Case& c) {
  return c.varlen() ? Tensor({c.H, c.S_q}) : Tensor({c.B, c.H, c.S_q});
}

// Forward and backward in dtype dt on each ISA of `isas` against the fp64 twin on the same
// rounded inputs (the bound of tests/test_attention_bf16.cc's header comment).
inline void check_lowp(const Case& c, DType dt, const std::vector<Isa>& isas) {
  SCOPED_TRACE(c.name + " " + to_string(dt));
  const Tensor q32 = random_tensor(c.q_shape(), 21), k32 = random_tensor(c.kv_shape(), 22),
               v32 = random_tensor(c.kv_shape(), 23), g32 = random_tensor(c.q_shape(), 24);
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

  for (Isa isa : isas) {
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
    const double lse_err = max_abs_diff(lse, ref.lse), lse_tol = tolerance(ne.lse, max_abs(ref.lse));
    EXPECT_LE(lse_err, lse_tol) << "lse (fp32 rule)";
    EXPECT_TRUE(within_lowp("dq", dq.wide, gref.dq, ne.dq, dt, pb ? &pb->dq : nullptr));
    EXPECT_TRUE(within_lowp("dk", dk.wide, gref.dk, ne.dk, dt, pb ? &pb->dk : nullptr));
    EXPECT_TRUE(within_lowp("dv", dv.wide, gref.dv, ne.dv, dt, pb ? &pb->dv : nullptr));
  }
}

}  // namespace burst::test
