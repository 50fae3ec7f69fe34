// Tests of the peer strategies under mpiexec -n 1..4, part 2 (part 1, the pure parts and the
// sweeps: tests/test_peer_strategies.cc, same binary): ulysses' and usp's saved contexts
// (the bytes DeepSpeed-Ulysses moves, eviction back to the stateless backward) and bad input
// (H % P ≠ 0, a usp degree not dividing P, distflash on a non-contiguous layout or a
// non-causal mask) raising the same burst::Error on every rank before any payload moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "dist_test_util.h"
#include "peer_strategies_harness.h"
#include "plan_strategies.h"
#include "strategies/ulysses.h"

namespace burst {
namespace {

using strategies::HeadSplit;
using test::dist_close;
using test::expect_same_error;
using test::Family;
using test::kD;
using test::kS;
using test::lengths;
using test::mask_of;
using test::reference;
using test::Reference;
using test::rows_of;
using test::shard_of;
using test::usp_topology;
using test::world_size;

// ------------------------------------------------------------------ saved contexts (ulysses, usp)

/// This rank's bytes under the Ulysses formulas for cfg (ulysses or usp): forward with or
/// without lse, backward saved or stateless.
std::int64_t head_parallel_bytes(const DistConfig& cfg, const ProblemShape& shape,
                                 const SequenceLayout& layout, int rank, bool backward, bool flag) {
  const int P = layout.P;
  const int u = cfg.strategy == StrategyKind::Ulysses
                    ? P
                    : strategies::resolve_ulysses_degree(cfg.ulysses_degree, P, shape.H_kv);
  const HeadSplit split = strategies::make_head_split(shape.H, shape.H_kv, u, "t");
  const auto len = lengths(layout, rank / u * u, u);
  const auto groups = strategies::usp_ring_groups(layout, u);
  return backward
             ? strategies::ulysses_backward_bytes(split, len, shape.B, shape.D, rank % u, flag) +
                   strategies::ring_group_backward_bytes(groups, usp_topology(cfg, P, u), shape.B,
                                                         split.kv_heads, shape.D, rank / u)
             : strategies::ulysses_forward_bytes(split, len, shape.B, shape.D, rank % u, flag) +
                   strategies::ring_group_forward_bytes(groups, shape.B, split.kv_heads, shape.D, rank / u);
}

TEST(PeerStrategies, HeadParallelSavedContextsMoveWhatDeepSpeedMoves) {
  // DeepSpeed-Ulysses moves Q, K, V in and O out forward, dO in and dQ, dK, dV out backward.
  // Checked: an empty lse ships no lse; the backward from a saved context (lse may then be
  // empty) moves the saved formula's bytes and is exact; at MHA its bytes are ≤ 1.05× the
  // forward's; two saved contexts serve two interleaved layers; a context evicted by a newer
  // forward falls back to the stateless backward (its bytes), which then needs lse.
  const int P = world_size();
  std::vector<DistConfig> cfgs(2);
  cfgs[0].strategy = StrategyKind::Ulysses;
  cfgs[1].strategy = StrategyKind::Usp;
  cfgs[1].ulysses_degree = P % 2 == 0 ? 2 : 1;
  for (DistConfig cfg : cfgs) {
    cfg.layout = LayoutKind::Zigzag;
    const std::int64_t H = 2 * P;
    const Reference& ref = reference(1, H, H, Family::Causal);
    SCOPED_TRACE(std::string("strategy=") + to_string(cfg.strategy));
    const Communicator world = Communicator::world();
    const int rank = world.rank();
    cfg.saved_contexts = 2;
    DistAttention attn(world, cfg, ref.shape, ref.mask);
    const SequenceLayout& layout = attn.plan().layout();
    Tensor q = shard_of(layout, rank, ref.q), k = shard_of(layout, rank, ref.k),
           v = shard_of(layout, rank, ref.v);
    Tensor dout = shard_of(layout, rank, ref.dout);
    Tensor out(q.shape()), dq(q.shape()), dk(k.shape()), dv(v.shape());
    // A second "layer": other inputs (scaled q), forward between the first's forward and backward.
    Tensor q2 = q, out2(q.shape()), dq2(q.shape()), dk2(k.shape()), dv2(v.shape());
    for (std::int64_t i = 0; i < q2.numel(); ++i) q2.data()[i] *= 0.5f;
    const auto check_grads = [&] {
      EXPECT_TRUE(dist_close("dq", dq, shard_of(layout, rank, ref.dq), ref.tol[2], ref.local_dq));
      EXPECT_TRUE(dist_close("dk", dk, shard_of(layout, rank, ref.dk), ref.tol[3], ref.local_dk));
      EXPECT_TRUE(dist_close("dv", dv, shard_of(layout, rank, ref.dv), ref.tol[4], ref.local_dv));
    };
    attn.forward(q.view(), k.view(), v.view(), out.view(), TensorView{});
    EXPECT_TRUE(dist_close("out", out, shard_of(layout, rank, ref.out), ref.tol[0], ref.local_out));
    const std::int64_t fwd = attn.last_stats().bytes_sent;
    EXPECT_EQ(fwd, head_parallel_bytes(cfg, ref.shape, layout, rank, false, false)) << "forward without lse";
    attn.forward(q2.view(), k.view(), v.view(), out2.view(), TensorView{});
    attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), TensorView{}, dq.view(), dk.view(),
                  dv.view());
    check_grads();
    const std::int64_t bwd = attn.last_stats().bytes_sent;
    EXPECT_EQ(bwd, head_parallel_bytes(cfg, ref.shape, layout, rank, true, true)) << "saved backward";
    EXPECT_EQ(bwd, attn.plan().backward().bytes_sent[static_cast<std::size_t>(rank)]);
    if (cfg.strategy == StrategyKind::Ulysses && P > 1) {
      EXPECT_LE(static_cast<double>(bwd), 1.05 * static_cast<double>(fwd))
          << "DeepSpeed: 4 all-to-alls each way";
      EXPECT_GE(static_cast<double>(bwd), 1.0 * static_cast<double>(fwd));
    }
    // The second layer's context is still there.
    attn.backward(dout.view(), q2.view(), k.view(), v.view(), out2.view(), TensorView{}, dq2.view(),
                  dk2.view(), dv2.view());
    EXPECT_EQ(attn.last_stats().bytes_sent, head_parallel_bytes(cfg, ref.shape, layout, rank, true, true));
    // Each backward consumed its context: a repeat takes the stateless path and needs lse.
    std::string message;
    try {
      attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), TensorView{}, dq.view(), dk.view(),
                    dv.view());
      ADD_FAILURE() << "no error for a stateless backward without lse";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      message = e.what();
    }
    EXPECT_NE(message.find("lse"), std::string::npos) << message;
    // Stateless: with the forward's lse, exact, the stateless formula's bytes.
    Tensor lse({1, H, attn.local_length()});
    attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
    EXPECT_TRUE(dist_close("lse", lse, rows_of(layout, rank, ref.lse), ref.tol[1], ref.local_lse));
    EXPECT_EQ(attn.last_stats().bytes_sent, head_parallel_bytes(cfg, ref.shape, layout, rank, false, true));
    attn.forward(q2.view(), k.view(), v.view(), out2.view(), TensorView{});
    attn.forward(q2.view(), v.view(), v.view(), out2.view(), TensorView{});  // evicts q's context (2 slots)
    attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                  dv.view());
    check_grads();
    EXPECT_EQ(attn.last_stats().bytes_sent, head_parallel_bytes(cfg, ref.shape, layout, rank, true, false))
        << "stateless";
  }
}

TEST(PeerStrategies, HeadParallelWithoutSavedContexts) {
  // saved_contexts = 0: every backward is the stateless one, and the plan says so.
  const int P = world_size();
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ulysses;
  cfg.layout = LayoutKind::Striped;
  cfg.saved_contexts = 0;
  const Reference& ref = reference(1, 2 * P, P, Family::Document);
  const Communicator world = Communicator::world();
  DistAttention attn(world, cfg, ref.shape, ref.mask);
  const int rank = world.rank();
  const SequenceLayout& layout = attn.plan().layout();
  Tensor q = shard_of(layout, rank, ref.q), k = shard_of(layout, rank, ref.k),
         v = shard_of(layout, rank, ref.v);
  Tensor dout = shard_of(layout, rank, ref.dout), out(q.shape()), lse({1, 2 * P, attn.local_length()});
  Tensor dq(q.shape()), dk(k.shape()), dv(v.shape());
  attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
  attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                dv.view());
  EXPECT_TRUE(dist_close("dq", dq, shard_of(layout, rank, ref.dq), ref.tol[2], ref.local_dq));
  EXPECT_TRUE(dist_close("dk", dk, shard_of(layout, rank, ref.dk), ref.tol[3], ref.local_dk));
  EXPECT_EQ(attn.last_stats().bytes_sent, head_parallel_bytes(cfg, ref.shape, layout, rank, true, false));
  EXPECT_EQ(attn.last_stats().bytes_sent, attn.plan().backward().bytes_sent[static_cast<std::size_t>(rank)]);
  EXPECT_LE(attn.last_stats().peak_buffer_bytes,
            attn.plan().backward().peak_buffer_bytes[static_cast<std::size_t>(rank)]);
}

// ------------------------------------------------------------------ bad input

TEST(PeerStrategiesErrors, HeadsNotDivisibleByRanks) {
  const int P = world_size();
  if (P < 2) {  // every H is divisible by one rank: accepted
    DistConfig cfg;
    cfg.strategy = StrategyKind::Ulysses;
    EXPECT_NO_THROW(DistAttention(Communicator::world(), cfg, {1, kS, 3, 1, kD}, Mask::causal_mask()));
    return;
  }
  for (StrategyKind s : {StrategyKind::Ulysses, StrategyKind::HeadParallel}) {
    DistConfig cfg;
    cfg.strategy = s;
    cfg.layout = LayoutKind::Contiguous;
    expect_same_error(cfg, {1, kS, P + 1, 1, kD}, Mask::causal_mask(), ErrorKind::Unsupported);
  }
  // KV heads neither divisible by P nor dividing it: H = 12, H_kv = 6 at P = 4; H_kv = 2 at P = 3.
  if (P >= 3) {
    DistConfig cfg;
    cfg.strategy = StrategyKind::Ulysses;
    cfg.layout = LayoutKind::Zigzag;
    expect_same_error(cfg, {1, kS, 12, P == 4 ? 6 : 2, kD}, Mask::full(), ErrorKind::Unsupported);
  }
}

TEST(PeerStrategiesErrors, UspDegreeNotDividingRanks) {
  const int P = world_size();
  DistConfig cfg;
  cfg.strategy = StrategyKind::Usp;
  cfg.layout = LayoutKind::Contiguous;
  cfg.ulysses_degree = P + 1;
  expect_same_error(cfg, {1, kS, 4 * (P + 1), 4 * (P + 1), kD}, Mask::causal_mask(),
                    ErrorKind::InvalidArgument);
  cfg.ulysses_degree = -1;
  expect_same_error(cfg, {1, kS, 4, 4, kD}, Mask::causal_mask(), ErrorKind::InvalidArgument);
}

TEST(PeerStrategiesErrors, DistFlashLayoutAndMask) {
  const int P = world_size();
  DistConfig cfg;
  cfg.strategy = StrategyKind::DistFlash;
  cfg.layout = LayoutKind::Zigzag;
  expect_same_error(cfg, {1, kS, 4, 4, kD}, Mask::causal_mask(), ErrorKind::Unsupported);
  if (P < 2) return;  // one chunk: every mask is "at or below the diagonal"
  cfg.layout = LayoutKind::Contiguous;
  for (Family f : {Family::Full, Family::SlidingWindow})
    expect_same_error(cfg, {1, kS, 4, 4, kD}, mask_of(f), ErrorKind::Unsupported);
}

}  // namespace
}  // namespace burst
