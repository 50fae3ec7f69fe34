// Merge form B: merging per-chunk partials equals attention over the concatenated KV (checked
// with the fp64 reference kernel), independent of merge order within fp32 rounding, and rows
// that saw no key stay (out = 0, lse = −inf) without NaN, even when the partial holds NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A causal problem whose 37 query rows are the last rows of a 100-token sequence, with the KV
// split into uneven chunks; the last chunk is entirely in the future of the first 17 rows.
struct Split {
  static constexpr std::int64_t B = 2, S_q = 37, S_kv = 100, H = 4, H_kv = 2, D = 16, q_offset = 63;
  std::vector<std::int64_t> cuts{0, 10, 35, 36, 80, 100};
  Tensor q = test::random_tensor({B, S_q, H, D}, 1), k = test::random_tensor({B, S_kv, H_kv, D}, 2),
         v = test::random_tensor({B, S_kv, H_kv, D}, 3);

  AttentionParams params(std::int64_t kv_offset) const {
    AttentionParams p;
    p.impl = KernelImpl::Reference;
    p.mask = Mask::causal_mask();
    p.q_offset = q_offset;
    p.kv_offset = kv_offset;
    p.seq_q_global = p.seq_kv_global = S_kv;
    p.num_threads = 1;
    return p;
  }
  // The reference over KV rows [a, b) (a slice view, no copy).
  AttentionOutput chunk(std::size_t c) const {
    const std::int64_t a = cuts[c], b = cuts[c + 1];
    TensorView kc = k.view(), vc = v.view();
    kc.data = kc.f32() + a * kc.stride[1];
    vc.data = vc.f32() + a * vc.stride[1];
    kc.shape[1] = vc.shape[1] = b - a;
    return attention_forward(q.view(), kc, vc, params(a));
  }
};

AttentionOutput empty_partial(const Split& s) {
  AttentionOutput r{Tensor({s.B, s.S_q, s.H, s.D}), Tensor({s.B, s.H, s.S_q})};
  std::fill(r.lse.vec().begin(), r.lse.vec().end(), -kInf);
  return r;
}

TEST(SoftmaxMerge, EqualsAttentionOverConcatenatedKvInAnyOrder) {
  const Split s;
  const AttentionOutput full = attention_forward(s.q.view(), s.k.view(), s.v.view(), s.params(0));
  std::vector<AttentionOutput> parts;
  for (std::size_t c = 0; c + 1 < s.cuts.size(); ++c) parts.push_back(s.chunk(c));
  // The last chunk really has fully masked rows (the −inf path is exercised).
  EXPECT_EQ(parts.back().lse.data()[0], -kInf);

  // fp32 merge of P = 5 fp32-rounded partials: each merge step rounds the weights and the
  // weighted sum (a few ulp), so the result is within ~P·few ulp of the fp64 attention; 32 ulps
  // of the output scale bounds it with margin while a wrong weight would be off by O(|out|).
  const double tol_out = 32 * test::kEps32 * std::max(1.0, test::max_abs(full.out));
  const double tol_lse = 32 * test::kEps32 * std::max(1.0, test::max_abs(full.lse));
  std::vector<std::size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  int permutations = 0;
  Tensor first_out;
  do {
    AttentionOutput acc = empty_partial(s);
    for (std::size_t c : order)
      merge_forward(acc.out.view(), acc.lse.view(), parts[c].out.view(), parts[c].lse.view());
    ASSERT_LE(test::max_abs_diff(acc.out, full.out), tol_out) << "permutation " << permutations;
    ASSERT_LE(test::max_abs_diff(acc.lse, full.lse), tol_lse) << "permutation " << permutations;
    if (permutations == 0) first_out = acc.out;
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 120);

  // fp64 twin: order independent to double rounding, and equal to the fp32 merge within its error.
  const long rows = s.B * s.S_q * s.H;
  std::vector<double> ref_out, ref_lse;
  for (bool reversed : {false, true}) {
    std::vector<double> out(static_cast<std::size_t>(rows * s.D), 0.0),
        lse(static_cast<std::size_t>(rows), -INFINITY);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& p = parts[reversed ? parts.size() - 1 - i : i];
      // Row r = (b, s, h) in BSHD order; lse is [B, H, S].
      std::vector<double> po(p.out.vec().begin(), p.out.vec().end()), pl(static_cast<std::size_t>(rows));
      for (long r = 0; r < rows; ++r) {
        const long b = r / (s.S_q * s.H), t = (r / s.H) % s.S_q, h = r % s.H;
        pl[static_cast<std::size_t>(r)] = p.lse.data()[(b * s.H + h) * s.S_q + t];
      }
      merge_rows_reference(out.data(), lse.data(), po.data(), pl.data(), rows, static_cast<long>(s.D));
    }
    if (!reversed) {
      ref_out = out;
      ref_lse = lse;
      continue;
    }
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref_out[i], 1e-13);
    for (std::size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(ref_lse[i])) {
        ASSERT_EQ(lse[i], ref_lse[i]);
      } else {
        ASSERT_NEAR(lse[i], ref_lse[i], 1e-13);
      }
    }
  }
  for (std::size_t i = 0; i < ref_out.size(); ++i)
    ASSERT_NEAR(ref_out[i], first_out.data()[i], tol_out) << "fp64 and fp32 merges disagree at " << i;
}

TEST(SoftmaxMerge, FullyMaskedRowsNeverProduceNaN) {
  const std::int64_t B = 1, S = 3, H = 1, D = 4;
  AttentionOutput acc{Tensor({B, S, H, D}), Tensor({B, H, S})}, part{Tensor({B, S, H, D}), Tensor({B, H, S})};
  // Row 0: both sides saw nothing, and the partial's out holds NaN (must not be read).
  // Row 1: only the running side saw keys.   Row 2: only the partial saw keys.
  acc.lse.vec() = {-kInf, 0.5f, -kInf};
  part.lse.vec() = {-kInf, -kInf, 1.5f};
  for (int d = 0; d < D; ++d) {
    part.out.data()[0 * D + d] = std::numeric_limits<float>::quiet_NaN();
    acc.out.data()[1 * D + d] = 2.0f + static_cast<float>(d);
    part.out.data()[1 * D + d] = std::numeric_limits<float>::quiet_NaN();
    part.out.data()[2 * D + d] = -1.0f - static_cast<float>(d);
  }
  merge_forward(acc.out.view(), acc.lse.view(), part.out.view(), part.lse.view());
  EXPECT_EQ(acc.lse.data()[0], -kInf);
  EXPECT_EQ(acc.lse.data()[1], 0.5f);
  EXPECT_EQ(acc.lse.data()[2], 1.5f);
  for (int d = 0; d < D; ++d) {
    EXPECT_EQ(acc.out.data()[0 * D + d], 0.0f);
    EXPECT_EQ(acc.out.data()[1 * D + d], 2.0f + static_cast<float>(d));
    EXPECT_EQ(acc.out.data()[2 * D + d], -1.0f - static_cast<float>(d));
  }
  // Same three rows through the fp64 twin.
  std::vector<double> o(3 * D, 0.0), l{-INFINITY, 0.5, -INFINITY}, po(3 * D, 0.0),
      pl{-INFINITY, -INFINITY, 1.5};
  po[0] = NAN;
  o[static_cast<std::size_t>(D)] = 7.0;
  merge_rows_reference(o.data(), l.data(), po.data(), pl.data(), 3, D);
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_EQ(o[0], 0.0);
  EXPECT_EQ(o[static_cast<std::size_t>(D)], 7.0);
  EXPECT_EQ(l[2], 1.5);
}

TEST(SoftmaxMerge, EqualLsesAverageAndWeightsFollowTheFormula) {
  // lse_a = lse_b: weights 1/2 each and lse + log 2.
  const MergeWeights w = merge_weights(0.25f, 0.25f);
  EXPECT_FLOAT_EQ(w.lse, 0.25f + std::log(2.0f));
  EXPECT_FLOAT_EQ(w.w_a, 0.5f);
  EXPECT_FLOAT_EQ(w.w_b, 0.5f);
  // Far-apart lses do not overflow: the larger side gets weight ~1.
  const MergeWeights far = merge_weights(1000.0f, -1000.0f);
  EXPECT_FLOAT_EQ(far.lse, 1000.0f);
  EXPECT_FLOAT_EQ(far.w_a, 1.0f);
  EXPECT_EQ(far.w_b, 0.0f);
}

TEST(SoftmaxMerge, StridedViewsAndErrors) {
  // SDPA-style [B,H,S,D] memory passed as a BSHD view with permuted strides.
  const std::int64_t B = 1, S = 5, H = 3, D = 8;
  Tensor a_bhsd = test::random_tensor({B, H, S, D}, 5), b_bshd = test::random_tensor({B, S, H, D}, 6);
  Tensor la = test::random_tensor({B, H, S}, 7), lb = test::random_tensor({B, H, S}, 8);
  Tensor a_bshd({B, S, H, D});
  for (std::int64_t s = 0; s < S; ++s)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        a_bshd.data()[(s * H + h) * D + d] = a_bhsd.data()[(h * S + s) * D + d];
  Tensor la2 = la;
  TensorView av = a_bhsd.view();
  av.shape = {B, S, H, D};
  av.stride = {H * S * D, D, S * D, 1};
  merge_forward(av, la.view(), b_bshd.view(), lb.view());
  merge_forward(a_bshd.view(), la2.view(), b_bshd.view(), lb.view());
  for (std::int64_t s = 0; s < S; ++s)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        ASSERT_EQ(a_bshd.data()[(s * H + h) * D + d], a_bhsd.data()[(h * S + s) * D + d]);

  Tensor wrong({B, S + 1, H, D});
  try {
    merge_forward(a_bshd.view(), la2.view(), wrong.view(), lb.view());
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("[1,6,3,8]"), std::string::npos) << e.message();
  }
  TensorView bf = b_bshd.view();
  bf.dtype = DType::BF16;
  try {
    merge_forward(a_bshd.view(), la2.view(), bf, lb.view());
    FAIL() << "no throw";
  } catch (const Error& e) { EXPECT_EQ(e.kind(), ErrorKind::Unsupported); }
}

}  // namespace
}  // namespace burst
