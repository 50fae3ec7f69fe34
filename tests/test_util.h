// tests/test_util.h — helpers shared by the kernel and strategy tests: seeded random tensors,
// error measures that understand lse = −inf, the naive-fp32 twin of the reference on BSHD
// tensors, and THE tolerance rule every fp32 kernel test uses.
//
// Tolerance rule. A fast fp32 kernel is compared with the fp64 oracle (KernelImpl::Reference),
// never with another fp32 result. Its error is judged against what plain fp32 arithmetic costs
// on the same problem: the naive-fp32 twin (same loops as the oracle, float accumulation) is run
// on the same inputs and its error against the oracle measured. Then
//     err(impl − ref_fp64) ≤ kTolC · max(err(naive_fp32 − ref_fp64), kTolFloorUlps · eps32 · max(1,
//     max|ref|)).
// * Why tie to the naive error: a dot product or row sum of n fp32 terms has rounding error
//   ≈ sqrt(n)·eps32·|terms| (random-walk accumulation), so absolute tolerances are either too loose
//   for short rows or too tight for long ones; the naive twin measures that growth on the actual
//   S, D and data (flash-attention issue #145 uses the same rule).
// * kTolC = 4: a tiled kernel sums in a different order (blocked partial sums are usually *more*
//   accurate than the naive running sum) and may use a polynomial exp (a few ulp instead of
//   libm's < 1 ulp) and an online-softmax rescale per tile (one extra rounding per tile). Those
//   add small constant factors; the max over elements of two different error patterns also
//   fluctuates by ~2× between seeds. 4 covers both while still failing on any real bug (a wrong
//   mask element or a missed rescale gives errors of order |values|, i.e. ≥ 1e4× larger).
// * Floor kTolFloorUlps = 8 ulps of the largest reference value (at least 1): when the naive sum
//   happens to be exact (one visible key, D = 1, zeros) its error is 0 and any different but
//   correct rounding (a different exp) would fail; 8 ulps is a few roundings of the output.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/splitmix64.h"
#include "burst/tensor.h"
#include "kernels/kernels.h"

namespace burst::test {

inline constexpr double kTolC = 4.0;
inline constexpr double kTolFloorUlps = 8.0;
inline constexpr double kEps32 = 1.1920928955078125e-07;  // 2^-23

/// Deterministic uniform floats in [lo, hi) from SplitMix64 (identical on every platform).
inline void fill_uniform(float* data, std::int64_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  burst::SplitMix64 rng(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
  for (std::int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(lo + (hi - lo) * rng.uniform());
}

/// Seeded random contiguous tensor (e.g. BSHD [B,S,H,D]) with entries uniform in [lo, hi).
inline Tensor random_tensor(std::vector<std::int64_t> shape, std::uint64_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
  Tensor t(std::move(shape));
  fill_uniform(t.data(), t.numel(), seed, lo, hi);
  return t;
}

/// max_i |a_i − b_i| over equal-sized arrays; equal infinities (lse = −inf) count as 0, a NaN
/// or an infinity on one side only as +inf.
inline double max_abs_diff(const float* a, const float* b, std::int64_t n) {
  double m = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return max_abs_diff(a.data(), b.data(), std::min(a.numel(), b.numel()));
}

/// max_i |a_i| over the finite entries (the scale of a reference result).
inline double max_abs(const Tensor& a) {
  double m = 0;
  for (float x : a.vec())
    if (std::isfinite(x)) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

/// max_i |a_i − b_i| / max(|b_i|, tiny): relative error against reference b.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (std::int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (x == y) continue;
    const double d =
        std::fabs(static_cast<double>(x) - y) / std::max(std::fabs(static_cast<double>(y)), 1e-30);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

/// The tolerance rule (header comment): bound for err(impl − ref) given err(naive − ref).
inline double tolerance(double naive_err, double ref_scale) {
  return kTolC * std::max(naive_err, kTolFloorUlps * kEps32 * std::max(1.0, ref_scale));
}

/// Checks impl against the fp64 reference under the tolerance rule; `what` names the tensor.
inline ::testing::AssertionResult within_tolerance(const std::string& what, const Tensor& impl,
                                                   const Tensor& ref, const Tensor& naive) {
  const double err = max_abs_diff(impl, ref), naive_err = max_abs_diff(naive, ref);
  const double tol = tolerance(naive_err, max_abs(ref));
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": max |impl − ref| = " << err << " > tolerance " << tol << " (naive fp32 error "
         << naive_err << ", max|ref| " << max_abs(ref) << ", c = " << kTolC << ")";
}

/// Runs the naive-fp32 twin of the reference on contiguous BSHD tensors (not varlen): the
/// same positions (offsets / explicit arrays), seq_*_global, scale and mask semantics as
/// attention_forward. Returns out [B,S_q,H,D] and lse [B,H,S_q].
struct NaiveProblem {
  std::vector<std::int64_t> q_pos, kv_pos;
  ResolvedMask mask;
  kernels::Problem p;
};
inline NaiveProblem naive_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionParams& params) {
  const auto& qs = q.shape();
  const auto& ks = k.shape();
  std::vector<std::int64_t> qp(static_cast<std::size_t>(qs[1])), kp(static_cast<std::size_t>(ks[1]));
  for (std::size_t i = 0; i < qp.size(); ++i)
    qp[i] = params.q_positions ? params.q_positions[i] : params.q_offset + static_cast<std::int64_t>(i);
  for (std::size_t i = 0; i < kp.size(); ++i)
    kp[i] = params.kv_positions ? params.kv_positions[i] : params.kv_offset + static_cast<std::int64_t>(i);
  const std::int64_t sq = params.seq_q_global >= 0 ? params.seq_q_global : (qp.empty() ? 0 : qp.back() + 1);
  const std::int64_t skv =
      params.seq_kv_global >= 0 ? params.seq_kv_global : (kp.empty() ? 0 : kp.back() + 1);
  NaiveProblem n{std::move(qp), std::move(kp), ResolvedMask(params.mask, sq, skv), {}};
  kernels::Problem& p = n.p;
  p.B = qs[0];
  p.S_q = qs[1];
  p.H = qs[2];
  p.D = qs[3];
  p.S_kv = ks[1];
  p.H_kv = ks[2];
  auto op = [](const Tensor& t) {
    const auto& s = t.shape();
    return kernels::Operand{t.data(), s[1] * s[2] * s[3], s[2] * s[3], s[3]};
  };
  p.q = op(q);
  p.k = op(k);
  p.v = op(v);
  p.scale = params.softmax_scale ? *params.softmax_scale
                                 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  p.num_threads = 1;
  p.isa = Isa::Portable;
  return n;
}
inline kernels::MutOperand mut_operand(Tensor& t) {
  const auto& s = t.shape();
  return {t.data(), s[1] * s[2] * s[3], s[2] * s[3], s[3]};
}

inline AttentionOutput naive_fp32_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionParams& params) {
  NaiveProblem n = naive_problem(q, k, v, params);
  n.p.mask = &n.mask;
  n.p.q_pos = n.q_pos.data();
  n.p.kv_pos = n.kv_pos.data();
  AttentionOutput r{Tensor(q.shape()), Tensor({n.p.B, n.p.H, n.p.S_q})};
  kernels::ForwardIO io;
  io.out = mut_operand(r.out);
  io.lse = {r.lse.data(), n.p.H * n.p.S_q, n.p.S_q, 1};
  kernels::forward_reference_fp32(n.p, io);
  return r;
}

/// Naive-fp32 backward from (out, lse) of the caller, delta computed as attention_delta does.
inline AttentionGrads naive_fp32_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& out, const Tensor& lse,
                                          const AttentionParams& params) {
  NaiveProblem n = naive_problem(q, k, v, params);
  n.p.mask = &n.mask;
  n.p.q_pos = n.q_pos.data();
  n.p.kv_pos = n.kv_pos.data();
  Tensor delta({n.p.B, n.p.H, n.p.S_q});
  attention_delta(dout.view(), out.view(), delta.view());
  AttentionGrads g{Tensor(q.shape()), Tensor(k.shape()), Tensor(k.shape())};
  kernels::BackwardIO io;
  const auto& s = dout.shape();
  io.dout = {dout.data(), s[1] * s[2] * s[3], s[2] * s[3], s[3]};
  io.lse = {lse.data(), n.p.H * n.p.S_q, n.p.S_q, 1};
  io.delta = {delta.data(), n.p.H * n.p.S_q, n.p.S_q, 1};
  io.dq = mut_operand(g.dq);
  io.dk = mut_operand(g.dk);
  io.dv = mut_operand(g.dv);
  kernels::backward_reference_fp32(n.p, io);
  return g;
}

}  // namespace burst::test
