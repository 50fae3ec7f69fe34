// The fp64 reference kernel (the oracle) and the attention boundary: finite-difference gradients,
// invariants (probabilities sum to 1 and vanish on masked keys, lse by definition, GQA = MHA with
// repeated KV, SDPA strides, positions), varlen = per-sequence calls, the accumulate flag, and the
// validation errors with the values in their messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

AttentionParams reference_params(Mask mask = Mask::full()) {
  AttentionParams p;
  p.impl = KernelImpl::Reference;
  p.mask = std::move(mask);
  p.num_threads = 1;  // tests run beside others on 2 cores; thread-count independence is tested below
  return p;
}

double weighted_sum(const Tensor& out, const Tensor& g) {
  double s = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.data()[i]) * g.data()[i];
  return s;
}

// Central differences of L = Σ g ∘ out(q, k, v) against the analytic gradients (dout = g).
// Step h = 1e-2 on inputs of size ~1 (the actual step is taken from the fp32-rounded inputs):
// the truncation error is h²/6·|L‴| ≤ ~2e-5, and the fp32 rounding of the stored outputs (the
// oracle computes in fp64 but returns fp32) perturbs L by ≈ eps32·sqrt(#out)·|g||out| ≈ 1e-6,
// i.e. ≤ ~5e-5 after dividing by 2h; a smaller h trades truncation for that rounding noise.
// Measured worst error on these shapes: 3.5e-6. Tolerance 1e-4·max(1, |grad|) leaves 2–30×
// margin over those bounds and is still ≥ 1000× below the O(0.1–1) errors of a wrong term
// (missing delta, missing scale, wrong GQA head), which the test catches.
void check_gradients(std::int64_t S_q, std::int64_t S_kv, std::int64_t H, std::int64_t H_kv, std::int64_t D,
                     const Mask& mask, std::uint64_t seed) {
  Tensor q = test::random_tensor({1, S_q, H, D}, seed), k = test::random_tensor({1, S_kv, H_kv, D}, seed + 1),
         v = test::random_tensor({1, S_kv, H_kv, D}, seed + 2),
         g = test::random_tensor({1, S_q, H, D}, seed + 3);
  AttentionParams p = reference_params(mask);
  p.softmax_scale = 0.7f;
  const AttentionOutput fwd = attention_forward(q.view(), k.view(), v.view(), p);
  const AttentionGrads grads =
      attention_backward(g.view(), q.view(), k.view(), v.view(), fwd.out.view(), fwd.lse.view(), p);
  constexpr float kStep = 1e-2f;
  for (auto [name, x, dx] : {std::tuple{"q", &q, &grads.dq}, {"k", &k, &grads.dk}, {"v", &v, &grads.dv}}) {
    for (std::int64_t i = 0; i < x->numel(); ++i) {
      const float orig = x->data()[i];
      x->data()[i] = orig + kStep;
      const float up = x->data()[i];
      const double l_up = weighted_sum(attention_forward(q.view(), k.view(), v.view(), p).out, g);
      x->data()[i] = orig - kStep;
      const float down = x->data()[i];
      const double l_down = weighted_sum(attention_forward(q.view(), k.view(), v.view(), p).out, g);
      x->data()[i] = orig;
      const double fd = (l_up - l_down) / (static_cast<double>(up) - down);
      const double analytic = dx->data()[i];
      ASSERT_NEAR(fd, analytic, 1e-4 * std::max(1.0, std::fabs(analytic)))
          << "d" << name << "[" << i << "] mask " << mask.describe() << " S_q=" << S_q << " S_kv=" << S_kv;
    }
  }
}

TEST(ReferenceGradients, MatchFiniteDifferences) {
  check_gradients(3, 4, 2, 2, 3, Mask::full(), 10);
  check_gradients(4, 6, 4, 2, 2, Mask::causal_mask(), 20);  // bottom-right causal, GQA 2
  check_gradients(5, 3, 2, 1, 3, Mask::causal_mask(), 30);  // rows 0, 1 fully masked
  check_gradients(6, 6, 2, 1, 2, Mask::sliding_window(1, 2), 40);
  check_gradients(6, 6, 1, 1, 4, Mask::document({0, 2, 6}, true), 50);
}

// With one-hot values (v_j = e_j), out_i is the probability row: it sums to 1 over visible keys,
// is 0 on masked keys, equals exp(s_ij − lse_i) with lse computed here from the definition.
TEST(ReferenceInvariants, ProbabilityRowsAndLse) {
  const std::int64_t S_q = 7, S_kv = 9, H = 2, D = 9;
  const float scale = 0.37f;
  for (MaskType type : all_mask_types()) {
    BenchmarkMaskConfig cfg;
    cfg.num_documents = 3;
    cfg.block = 2;
    const Mask mask = make_benchmark_mask(type, S_kv, cfg);
    Tensor q = test::random_tensor({1, S_q, H, D}, 3), k = test::random_tensor({1, S_kv, 1, D}, 4),
           v({1, S_kv, 1, D});
    for (std::int64_t j = 0; j < S_kv; ++j) v.data()[j * D + j] = 1.0f;
    AttentionParams p = reference_params(mask);
    p.softmax_scale = scale;
    p.q_offset = S_kv - S_q;  // the queries are the last rows of the sequence
    const AttentionOutput r = attention_forward(q.view(), k.view(), v.view(), p);
    const ResolvedMask m(mask, S_kv, S_kv);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < S_q; ++i) {
        double sum_exp = 0, row_sum = 0;
        for (std::int64_t j = 0; j < S_kv; ++j) {
          double s = 0;
          for (std::int64_t d = 0; d < D; ++d)
            s += static_cast<double>(q.data()[(i * H + h) * D + d]) * k.data()[j * D + d];
          if (m.visible(i + p.q_offset, j)) sum_exp += std::exp(scale * s);
          const float prob = r.out.data()[(i * H + h) * D + j];
          row_sum += prob;
          if (!m.visible(i + p.q_offset, j)) {
            ASSERT_EQ(prob, 0.0f) << to_string(type) << " i=" << i << " j=" << j;
          }
        }
        const float lse = r.lse.data()[h * S_q + i];
        if (sum_exp == 0) {
          ASSERT_EQ(lse, -kInf) << to_string(type);
          ASSERT_EQ(row_sum, 0.0) << to_string(type);
        } else {
          ASSERT_NEAR(lse, std::log(sum_exp), 1e-6 * std::max(1.0, std::fabs(std::log(sum_exp))))
              << to_string(type);
          ASSERT_NEAR(row_sum, 1.0, 1e-6) << to_string(type);
        }
      }
  }
}

// GQA reads KV head h / (H/H_kv): equal to MHA on K, V with each KV head repeated.
TEST(ReferenceInvariants, GqaEqualsRepeatedKv) {
  const std::int64_t S = 11, H = 8, H_kv = 2, D = 5, g = H / H_kv;
  Tensor q = test::random_tensor({2, S, H, D}, 1), k = test::random_tensor({2, S, H_kv, D}, 2),
         v = test::random_tensor({2, S, H_kv, D}, 3), dout = test::random_tensor({2, S, H, D}, 4);
  Tensor k_rep({2, S, H, D}), v_rep({2, S, H, D});
  for (std::int64_t bs = 0; bs < 2 * S; ++bs)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d) {
        k_rep.data()[(bs * H + h) * D + d] = k.data()[(bs * H_kv + h / g) * D + d];
        v_rep.data()[(bs * H + h) * D + d] = v.data()[(bs * H_kv + h / g) * D + d];
      }
  const AttentionParams p = reference_params(Mask::causal_mask());
  const AttentionOutput a = attention_forward(q.view(), k.view(), v.view(), p);
  const AttentionOutput b = attention_forward(q.view(), k_rep.view(), v_rep.view(), p);
  EXPECT_EQ(test::max_abs_diff(a.out, b.out), 0.0);
  EXPECT_EQ(test::max_abs_diff(a.lse, b.lse), 0.0);
  const AttentionGrads ga =
      attention_backward(dout.view(), q.view(), k.view(), v.view(), a.out.view(), a.lse.view(), p);
  const AttentionGrads gb =
      attention_backward(dout.view(), q.view(), k_rep.view(), v_rep.view(), b.out.view(), b.lse.view(), p);
  EXPECT_EQ(test::max_abs_diff(ga.dq, gb.dq), 0.0);
  // The reference parallelises over independent (b, h) / (b, h_kv) only: any thread count gives
  // the same bits.
  AttentionParams p3 = p;
  p3.num_threads = 3;
  const AttentionGrads g3 =
      attention_backward(dout.view(), q.view(), k.view(), v.view(), a.out.view(), a.lse.view(), p3);
  EXPECT_EQ(test::max_abs_diff(attention_forward(q.view(), k.view(), v.view(), p3).out, a.out), 0.0);
  EXPECT_EQ(test::max_abs_diff(g3.dq, ga.dq), 0.0);
  EXPECT_EQ(test::max_abs_diff(g3.dk, ga.dk), 0.0);
  EXPECT_EQ(test::max_abs_diff(g3.dv, ga.dv), 0.0);
  // dK of a KV head = Σ over its query heads of the repeated-head dK (fp64 sums rounded: 1e-6).
  for (std::int64_t bs = 0; bs < 2 * S; ++bs)
    for (std::int64_t hk = 0; hk < H_kv; ++hk)
      for (std::int64_t d = 0; d < D; ++d) {
        double sk = 0, sv = 0;
        for (std::int64_t h = hk * g; h < (hk + 1) * g; ++h) {
          sk += gb.dk.data()[(bs * H + h) * D + d];
          sv += gb.dv.data()[(bs * H + h) * D + d];
        }
        ASSERT_NEAR(ga.dk.data()[(bs * H_kv + hk) * D + d], sk, 1e-6);
        ASSERT_NEAR(ga.dv.data()[(bs * H_kv + hk) * D + d], sv, 1e-6);
      }
}

// SDPA's [B,H,S,D] memory through permuted strides gives the BSHD result exactly.
TEST(ReferenceInvariants, SdpaStridesAndExplicitPositions) {
  const std::int64_t B = 2, S = 12, H = 3, D = 4;
  Tensor q = test::random_tensor({B, S, H, D}, 7), k = test::random_tensor({B, S, H, D}, 8),
         v = test::random_tensor({B, S, H, D}, 9);
  auto to_bhsd = [&](const Tensor& t) {
    Tensor r({B, H, S, D});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d)
            r.data()[((b * H + h) * S + s) * D + d] = t.data()[((b * S + s) * H + h) * D + d];
    return r;
  };
  auto bhsd_view = [&](Tensor& t) {
    TensorView view = t.view();
    view.shape = {B, S, H, D};
    view.stride = {H * S * D, D, S * D, 1};
    return view;
  };
  Tensor qs = to_bhsd(q), ks = to_bhsd(k), vs = to_bhsd(v), outs({B, H, S, D}), lse({B, H, S});
  const AttentionParams p = reference_params(Mask::causal_mask());
  const AttentionOutput ref = attention_forward(q.view(), k.view(), v.view(), p);
  attention_forward(bhsd_view(qs), bhsd_view(ks), bhsd_view(vs), bhsd_view(outs), lse.view(), p);
  EXPECT_EQ(test::max_abs_diff(to_bhsd(ref.out), outs), 0.0);
  EXPECT_EQ(test::max_abs_diff(ref.lse, lse), 0.0);

  // Striped rows {1, 4, 7, 10} as explicit positions equal those rows of the full call.
  const std::vector<std::int64_t> rows{1, 4, 7, 10};
  const auto n = static_cast<std::int64_t>(rows.size());
  Tensor qr({B, n, H, D});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t hd = 0; hd < H * D; ++hd)
        qr.data()[(b * n + i) * H * D + hd] =
            q.data()[(b * S + rows[static_cast<std::size_t>(i)]) * H * D + hd];
  AttentionParams ps = p;
  ps.q_positions = rows.data();
  ps.seq_q_global = S;
  const AttentionOutput r = attention_forward(qr.view(), k.view(), v.view(), ps);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t hd = 0; hd < H * D; ++hd)
        ASSERT_EQ(r.out.data()[(b * n + i) * H * D + hd],
                  ref.out.data()[(b * S + rows[static_cast<std::size_t>(i)]) * H * D + hd]);
}

// Varlen THD with empty sequences (no queries, no keys, or both) equals one BSHD call per
// sequence, forward and backward, bitwise (same kernel, same arithmetic).
TEST(ReferenceVarlen, EqualsPerSequenceCalls) {
  const std::int64_t H = 4, H_kv = 2, D = 6;
  const std::vector<std::int32_t> cu_q{0, 3, 3, 8, 8, 12}, cu_kv{0, 4, 4, 4, 9, 15};
  const std::int64_t T_q = cu_q.back(), T_kv = cu_kv.back();
  Tensor q = test::random_tensor({T_q, H, D}, 1), k = test::random_tensor({T_kv, H_kv, D}, 2),
         v = test::random_tensor({T_kv, H_kv, D}, 3), dout = test::random_tensor({T_q, H, D}, 4);
  AttentionParams p = reference_params(Mask::causal_mask());
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_kv = cu_kv;
  const AttentionOutput vr = attention_forward(q.view(), k.view(), v.view(), p);
  ASSERT_EQ(vr.lse.shape(), (std::vector<std::int64_t>{H, T_q}));
  const AttentionGrads vg =
      attention_backward(dout.view(), q.view(), k.view(), v.view(), vr.out.view(), vr.lse.view(), p);
  const AttentionParams pb = reference_params(Mask::causal_mask());
  for (std::size_t s = 0; s + 1 < cu_q.size(); ++s) {
    const std::int64_t q0 = cu_q[s], nq = cu_q[s + 1] - q0, k0 = cu_kv[s], nk = cu_kv[s + 1] - k0;
    auto slice = [](const Tensor& t, std::int64_t row0, std::int64_t rows) {
      TensorView view =
          make_view(t.data() + row0 * t.shape()[1] * t.shape()[2], {1, rows, t.shape()[1], t.shape()[2]});
      return view;
    };
    const AttentionOutput r = attention_forward(slice(q, q0, nq), slice(k, k0, nk), slice(v, k0, nk), pb);
    const AttentionGrads g = attention_backward(slice(dout, q0, nq), slice(q, q0, nq), slice(k, k0, nk),
                                                slice(v, k0, nk), r.out.view(), r.lse.view(), pb);
    for (std::int64_t i = 0; i < nq * H * D; ++i) {
      ASSERT_EQ(vr.out.data()[q0 * H * D + i], r.out.data()[i]) << "sequence " << s;
      ASSERT_EQ(vg.dq.data()[q0 * H * D + i], g.dq.data()[i]) << "sequence " << s;
    }
    for (std::int64_t i = 0; i < nk * H_kv * D; ++i) {
      ASSERT_EQ(vg.dk.data()[k0 * H_kv * D + i], g.dk.data()[i]) << "sequence " << s;
      ASSERT_EQ(vg.dv.data()[k0 * H_kv * D + i], g.dv.data()[i]) << "sequence " << s;
    }
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < nq; ++i) {
        const float want = r.lse.data()[h * nq + i];
        ASSERT_EQ(vr.lse.data()[h * T_q + q0 + i], want) << "sequence " << s;
        if (nk == 0) { ASSERT_EQ(want, -kInf); }
      }
  }
}

TEST(ReferenceBackward, AccumulateAddsAndDeltaIsRowsumOfDoutOut) {
  const std::int64_t S = 9, H = 2, D = 5;
  Tensor q = test::random_tensor({1, S, H, D}, 1), k = test::random_tensor({1, S, H, D}, 2),
         v = test::random_tensor({1, S, H, D}, 3), dout = test::random_tensor({1, S, H, D}, 4);
  const AttentionParams p = reference_params(Mask::sliding_window(2, 1));
  const AttentionOutput f = attention_forward(q.view(), k.view(), v.view(), p);
  Tensor delta({1, H, S});
  attention_delta(dout.view(), f.out.view(), delta.view());
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t s = 0; s < S; ++s) {
      double want = 0;
      for (std::int64_t d = 0; d < D; ++d)
        want += static_cast<double>(dout.data()[(s * H + h) * D + d]) * f.out.data()[(s * H + h) * D + d];
      ASSERT_NEAR(delta.data()[h * S + s], want, 1e-6);
    }
  const AttentionGrads fresh =
      attention_backward(dout.view(), q.view(), k.view(), v.view(), f.out.view(), f.lse.view(), p);
  AttentionGrads acc{test::random_tensor({1, S, H, D}, 5), test::random_tensor({1, S, H, D}, 6),
                     test::random_tensor({1, S, H, D}, 7)};
  const AttentionGrads before = acc;
  attention_backward_with_delta(dout.view(), q.view(), k.view(), v.view(), f.lse.view(), delta.view(),
                                acc.dq.view(), acc.dk.view(), acc.dv.view(), p, /*accumulate=*/true);
  for (auto [a, b0, fr] : {std::tuple{&acc.dq, &before.dq, &fresh.dq},
                           {&acc.dk, &before.dk, &fresh.dk},
                           {&acc.dv, &before.dv, &fresh.dv}})
    for (std::int64_t i = 0; i < a->numel(); ++i)
      ASSERT_NEAR(a->data()[i], b0->data()[i] + fr->data()[i],
                  4 * test::kEps32 * (2 + std::fabs(b0->data()[i])));
}

// Each invalid input throws burst::Error naming the offending values.
TEST(AttentionErrors, MessagesNameTheValues) {
  Tensor q({1, 4, 6, 8}), k({1, 4, 4, 8}), v({1, 4, 4, 8}), k2({1, 4, 2, 8}), v2({1, 4, 2, 8});
  auto expect = [](auto&& call, ErrorKind kind, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(e.message().find(needle), std::string::npos) << "message: " << e.message();
    }
  };
  AttentionParams p = reference_params();
  expect([&] { attention_forward(q.view(), k.view(), v.view(), p); }, ErrorKind::InvalidArgument, "H=6");
  expect([&] { attention_forward(q.view(), k.view(), v.view(), p); }, ErrorKind::InvalidArgument, "H_kv=4");
  Tensor q3({4, 6, 8});
  expect([&] { attention_forward(q3.view(), k2.view(), v2.view(), p); }, ErrorKind::InvalidArgument,
         "[4,6,8]");
  Tensor v_bad({1, 5, 2, 8});
  expect([&] { attention_forward(q.view(), k2.view(), v_bad.view(), p); }, ErrorKind::InvalidArgument,
         "[1,5,2,8]");
  Tensor q_big({1, 4, 2, 300}), k_big({1, 4, 2, 300});
  expect([&] { attention_forward(q_big.view(), k_big.view(), k_big.view(), p); }, ErrorKind::InvalidArgument,
         "D=300");
  TensorView q_strided = q.view();
  q_strided.stride[3] = 2;
  expect([&] { attention_forward(q_strided, k2.view(), v2.view(), p); }, ErrorKind::InvalidArgument,
         "D contiguous");
  TensorView q_bf16 = q.view();
  q_bf16.dtype = DType::BF16;
  expect([&] { attention_forward(q_bf16, k2.view(), v2.view(), p); }, ErrorKind::InvalidArgument,
         "mixed dtypes q bf16, k f32, v f32");
  TensorView q_f64 = q.view();
  q_f64.dtype = DType::F64;
  expect([&] { attention_forward(q_f64, k2.view(), v2.view(), p); }, ErrorKind::Unsupported,
         "convert q, k and v");

  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -1.0f, 0.0f, kInf}) {
    AttentionParams ps = p;
    ps.softmax_scale = bad;
    expect([&] { attention_forward(q.view(), k2.view(), v2.view(), ps); }, ErrorKind::InvalidArgument,
           "softmax_scale=");
  }
  {
    AttentionParams ps = p;
    ps.softmax_scale = std::numeric_limits<float>::quiet_NaN();
    expect([&] { attention_forward(q.view(), k2.view(), v2.view(), ps); }, ErrorKind::InvalidArgument, "nan");
  }

  Tensor tq({10, 2, 8}), tk({12, 2, 8});
  auto varlen = [&](std::vector<std::int32_t> cq, std::vector<std::int32_t> ck, const std::string& needle) {
    AttentionParams pv = p;
    pv.cu_seqlens_q = std::move(cq);
    pv.cu_seqlens_kv = std::move(ck);
    expect([&] { attention_forward(tq.view(), tk.view(), tk.view(), pv); }, ErrorKind::InvalidArgument,
           needle);
  };
  varlen({0, 6, 4, 10}, {0, 4, 8, 12}, "cu_seqlens_q[1]=6 > cu_seqlens_q[2]=4");  // not monotone
  varlen({0, 4, 9}, {0, 4, 12}, "ends at 9 but the tensor has T=10");             // last != T
  varlen({1, 4, 10}, {0, 4, 12}, "cu_seqlens_q[0] must be 0, got 1");
  varlen({0}, {0}, "entries, got 1");
  varlen({0, 4, 10}, {0, 12}, "cu_seqlens_q has 3 entries but cu_seqlens_kv has 2");
  varlen({0, 4, 10}, {0, -2, 12}, "cu_seqlens_kv[0]=0 > cu_seqlens_kv[1]=-2");  // negative offsets

  Tensor out_bad({1, 4, 2, 8}), lse_bad({1, 2, 5}), out({1, 4, 6, 8});
  Tensor q6({1, 4, 6, 8});
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), out.view(), lse_bad.view(), p); },
         ErrorKind::InvalidArgument, "[B, H, S_q] = [1, 6, 4]");
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), out_bad.view(), lse_bad.view(), p); },
         ErrorKind::InvalidArgument, "[1,4,2,8]");
  Tensor lse({1, 6, 4});
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), q6.view(), lse.view(), p); },
         ErrorKind::InvalidArgument, "overlaps q");

  const std::vector<std::int64_t> not_increasing{0, 2, 2, 3};
  AttentionParams pp = p;
  pp.q_positions = not_increasing.data();
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), pp); }, ErrorKind::InvalidArgument,
         "strictly increasing");
  AttentionParams pg = p;
  pg.q_offset = 10;
  pg.seq_q_global = 12;
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), pg); }, ErrorKind::InvalidArgument,
         "seq_q_global=12");
  AttentionParams pm = p;
  pm.mask = Mask::from_slices({{0, 8, 0, 4}});
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), pm); }, ErrorKind::InvalidArgument,
         "S_q_global=4");
  AttentionParams pt = p;
  pt.num_threads = -1;
  expect([&] { attention_forward(q6.view(), k2.view(), v2.view(), pt); }, ErrorKind::InvalidArgument,
         "num_threads=-1");
}

}  // namespace
}  // namespace burst
