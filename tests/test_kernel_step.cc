// The internal kernel entry (src/kernels/step.h) against its slow twin, the public validated
// entry (burst/attention.h): the strategies' steps call step_forward / step_backward with the
// mask resolved once per DistAttention and the rank's positions, the public entry validates and
// resolves the mask on every call. For a rank's slice of a longer sequence (zigzag and striped
// positions, both kernel implementations, every benchmark mask) the two must give the same
// bits; a mask resolved against other global lengths must not (the comparison can fail).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/isa.h"
#include "burst/mask.h"
#include "kernels/step.h"
#include "test_util.h"

namespace burst {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * sizeof(float)) == 0;
}

// A rank's positions in a sequence of S tokens: zigzag chunks (r, 2P − 1 − r) of P = 2 ranks, or
// striped (every other token).
std::vector<std::int64_t> rank_positions(bool zigzag, std::int64_t S, int rank) {
  std::vector<std::int64_t> pos;
  if (zigzag) {
    const std::int64_t c = S / 4;
    for (std::int64_t chunk : {std::int64_t{rank}, std::int64_t{3 - rank}})
      for (std::int64_t i = 0; i < c; ++i) pos.push_back(chunk * c + i);
  } else {
    for (std::int64_t i = rank; i < S; i += 2) pos.push_back(i);
  }
  return pos;
}

struct Results {
  Tensor out, lse, dq, dk, dv;
};

// Forward, then an accumulating backward into dq, dk, dv preset to 1 (as a ring step adds).
template <typename Fwd, typename Bwd>
Results run(const Tensor& q, const Tensor& k, const Tensor& dout, Fwd&& fwd, Bwd&& bwd) {
  const std::int64_t B = q.shape()[0], S_q = q.shape()[1], H = q.shape()[2];
  Results r{Tensor(q.shape()), Tensor({B, H, S_q}), Tensor(q.shape()), Tensor(k.shape()), Tensor(k.shape())};
  fwd(r.out.view(), r.lse.view());
  Tensor delta({B, H, S_q});
  attention_delta(dout.view(), r.out.view(), delta.view());
  for (Tensor* t : {&r.dq, &r.dk, &r.dv})
    for (float& x : t->vec()) x = 1.0f;
  bwd(r.lse.view(), delta.view(), r.dq.view(), r.dk.view(), r.dv.view());
  return r;
}

TEST(KernelStep, SameBitsAsThePublicEntryForEveryMaskAndLayout) {
  constexpr std::int64_t S = 256, B = 1, H = 2, H_kv = 1, D = 16;
  for (MaskType type : all_mask_types())
    for (bool zigzag : {true, false})
      for (KernelImpl impl : {KernelImpl::Tiled, KernelImpl::Reference}) {
        BenchmarkMaskConfig mc;
        mc.block = 16;  // block-sparse masks with many slices
        const Mask mask = make_benchmark_mask(type, S, mc);
        const ResolvedMask resolved(mask, S, S);
        const std::vector<std::int64_t> qp = rank_positions(zigzag, S, 0), kp = rank_positions(zigzag, S, 1);
        const auto n = static_cast<std::int64_t>(qp.size());
        SCOPED_TRACE(std::string(to_string(type)) + (zigzag ? " zigzag " : " striped ") + to_string(impl));
        const Tensor q = test::random_tensor({B, n, H, D}, 1), k = test::random_tensor({B, n, H_kv, D}, 2);
        const Tensor v = test::random_tensor({B, n, H_kv, D}, 3), dout = test::random_tensor({B, n, H, D}, 4);

        AttentionParams pub;  // the slow twin: validated, mask resolved per call
        pub.mask = mask;
        pub.q_positions = qp.data();
        pub.kv_positions = kp.data();
        pub.seq_q_global = pub.seq_kv_global = S;
        pub.num_threads = 2;
        pub.impl = impl;
        pub.block_q = pub.block_kv = 16;
        const Results slow = run(
            q, k, dout,
            [&](const TensorView& out, const TensorView& lse) {
              attention_forward(q.view(), k.view(), v.view(), out, lse, pub);
            },
            [&](const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                const TensorView& dv) {
              attention_backward_with_delta(dout.view(), q.view(), k.view(), v.view(), lse, delta, dq, dk, dv,
                                            pub, true);
            });

        kernels::KernelParams step;  // the fast path: resolved once, trusted
        step.mask = &resolved;
        step.q_pos = qp.data();
        step.kv_pos = kp.data();
        step.scale = 1.0f / 4.0f;  // 1/sqrt(D), as the public entry's default
        step.num_threads = 2;
        step.impl = impl;
        step.isa = detect_isa();
        step.block_q = step.block_kv = 16;
        const Results fast = run(
            q, k, dout,
            [&](const TensorView& out, const TensorView& lse) {
              kernels::step_forward(q.view(), k.view(), v.view(), out, lse, step);
            },
            [&](const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                const TensorView& dv) {
              kernels::step_backward(dout.view(), q.view(), k.view(), v.view(), lse, delta, dq, dk, dv, step,
                                     true);
            });
        EXPECT_TRUE(same_bits(fast.out, slow.out));
        EXPECT_TRUE(same_bits(fast.lse, slow.lse));
        EXPECT_TRUE(same_bits(fast.dq, slow.dq));
        EXPECT_TRUE(same_bits(fast.dk, slow.dk));
        EXPECT_TRUE(same_bits(fast.dv, slow.dv));
      }
}

TEST(KernelStep, SharedBackwardQPacksGiveTheSameBitsAsPerItemPacks) {
  // One KV head, 256 kv rows in tiles of 16: the tiled backward cuts the (b, kv-head) into kv
  // chunks, whose items read each q tile's packs from one shared copy made once per call; with
  // backward_q_pack_cap = 0 every item packs them itself (the slow twin). Packing copies values,
  // so dq, dk, dv must agree bit for bit — fp32 and bf16 operands, full and causal, 1 and 2
  // threads, D odd (the bf16 pair packs' zero partner) and not, every ISA's tables here.
  constexpr std::int64_t S = 256, B = 2, H = 4, H_kv = 1;
  std::vector<std::int64_t> pos(S);
  for (std::int64_t i = 0; i < S; ++i) pos[static_cast<std::size_t>(i)] = i;
  for (Isa isa : supported_isas()) {
    if (isa == Isa::AmxEmulated) continue;  // slow; the same tables as Amx
    for (std::int64_t D : {16, 21})
      for (DType dt : {DType::F32, DType::BF16})
        for (bool causal : {false, true})
          for (int threads : {1, 2}) {
            SCOPED_TRACE(std::string(to_string(isa)) + " " + to_string(dt) + " D " + std::to_string(D) +
                         (causal ? " causal " : " full ") + std::to_string(threads));
            const Tensor q32 = test::random_tensor({B, S, H, D}, 11),
                         k32 = test::random_tensor({B, S, H_kv, D}, 12);
            const Tensor v32 = test::random_tensor({B, S, H_kv, D}, 13),
                         do32 = test::random_tensor({B, S, H, D}, 14);
            std::vector<std::vector<std::uint16_t>> store;
            const auto as = [&](const Tensor& t) {  // t in dt (rounded once for BF16)
              if (dt == DType::F32) return t.view();
              store.emplace_back(static_cast<std::size_t>(t.numel()));
              const TensorView v = make_view(store.back().data(), dt, t.shape());
              convert(t.view(), v);
              return v;
            };
            store.reserve(4);
            const TensorView q = as(q32), k = as(k32), v = as(v32), dout = as(do32);
            const ResolvedMask resolved(causal ? Mask::causal_mask() : Mask::full(), S, S);
            kernels::KernelParams step;
            step.mask = &resolved;
            step.q_pos = step.kv_pos = pos.data();
            step.scale = 0.25f;
            step.num_threads = threads;
            step.isa = isa;
            step.block_q = step.block_kv = 16;
            Tensor out({B, S, H, D}), lse({B, H, S}), delta({B, H, S});
            kernels::step_forward(q, k, v, out.view(), lse.view(), step);
            attention_delta(dout, out.view(), delta.view());
            Results r[2];
            for (int i = 0; i < 2; ++i) {
              step.backward_q_pack_cap = i == 0 ? -1 : 0;
              r[i].dq = Tensor({B, S, H, D});
              r[i].dk = Tensor({B, S, H_kv, D});
              r[i].dv = Tensor({B, S, H_kv, D});
              for (Tensor* t : {&r[i].dq, &r[i].dk, &r[i].dv})
                for (float& x : t->vec()) x = 0.5f;
              kernels::step_backward(dout, q, k, v, lse.view(), delta.view(), r[i].dq.view(), r[i].dk.view(),
                                     r[i].dv.view(), step, true);
            }
            EXPECT_GT(test::max_abs(r[0].dq), 0.5);  // the backward ran
            EXPECT_TRUE(same_bits(r[0].dq, r[1].dq));
            EXPECT_TRUE(same_bits(r[0].dk, r[1].dk));
            EXPECT_TRUE(same_bits(r[0].dv, r[1].dv));
          }
  }
}

TEST(KernelStep, AMaskResolvedAgainstOtherLengthsGivesOtherResults) {
  // causal is bottom-right aligned to the global lengths: resolved over 2S it sees other keys.
  constexpr std::int64_t S = 128, H = 2, D = 16;
  const std::vector<std::int64_t> qp = rank_positions(true, S, 0), kp = rank_positions(true, S, 1);
  const auto n = static_cast<std::int64_t>(qp.size());
  const Tensor q = test::random_tensor({1, n, H, D}, 5), k = test::random_tensor({1, n, H, D}, 6);
  const Tensor v = test::random_tensor({1, n, H, D}, 7);
  const ResolvedMask right(Mask::causal_mask(), S, S), wrong(Mask::causal_mask(), S, 2 * S);
  kernels::KernelParams step;
  step.q_pos = qp.data();
  step.kv_pos = kp.data();
  step.scale = 0.25f;
  step.isa = detect_isa();
  Tensor out_right({1, n, H, D}), lse_right({1, H, n}), out_wrong({1, n, H, D}), lse_wrong({1, H, n});
  step.mask = &right;
  kernels::step_forward(q.view(), k.view(), v.view(), out_right.view(), lse_right.view(), step);
  step.mask = &wrong;
  kernels::step_forward(q.view(), k.view(), v.view(), out_wrong.view(), lse_wrong.view(), step);
  AttentionParams pub;
  pub.mask = Mask::causal_mask();
  pub.q_positions = qp.data();
  pub.kv_positions = kp.data();
  pub.seq_q_global = pub.seq_kv_global = S;
  const AttentionOutput twin = attention_forward(q.view(), k.view(), v.view(), pub);
  EXPECT_TRUE(same_bits(out_right, twin.out));
  EXPECT_FALSE(same_bits(out_wrong, twin.out));
}

}  // namespace
}  // namespace burst
