// Tests of the peer strategies ulysses, usp, distflash and headpar under mpiexec -n 1..4: every
// strategy × supported layout × a mask from each family (full, causal, sliding window,
// document, prefix-LM, block-sparse) × GQA ratio 1/2/4 (+ replicated KV heads), forward and
// backward, against the single-process fp64 oracle on the unsharded global inputs; per-rank
// byte counters against the documented formulas; bad input (H % P ≠ 0, a usp degree not
// dividing P, distflash on a non-contiguous layout or a non-causal mask) raising the same
// burst::Error on every rank before any payload moves. Pure parts (DistFlashAttn schedule,
// head split, Ulysses index maps) are checked exhaustively on every rank.
// This file: the pure parts and the distributed sweeps (on one node and on the emulated
// cluster); tests/test_peer_strategies_contexts.cc: saved contexts and bad input. Both run
// the cases of tests/peer_strategies_harness.h and link into one binary.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "device/cpu/cpu_device.h"
#include "dist_test_util.h"
#include "peer_strategies_harness.h"
#include "plan_strategies.h"
#include "strategies/ulysses.h"
#include "test_util.h"

namespace burst {
namespace {

using strategies::HeadSplit;
using strategies::UlyssesExchange;

// ------------------------------------------------------------------ pure parts

TEST(DistFlashSchedule, CoversTheCausalTriangleOnceInHalfTheSteps) {
  for (int P = 1; P <= 9; ++P) {
    SCOPED_TRACE("P=" + std::to_string(P));
    const auto s = strategies::make_distflash_schedule(P, [](int, int) { return true; });
    EXPECT_EQ(s.steps, P / 2 + 1);
    std::set<std::pair<int, int>> seen;
    for (int t = 0; t < s.steps; ++t) {
      int busy = 0;
      for (int r = 0; r < P; ++r) {
        const auto& lb = s.local[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
        const auto& hb = s.help[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
        EXPECT_FALSE(lb.valid() && hb.valid()) << "rank " << r << " has two blocks at step " << t;
        if (lb.valid()) {
          EXPECT_EQ(lb.q, r);
          EXPECT_EQ(lb.q - lb.kv, t);  // distance t at step t
          EXPECT_TRUE(seen.insert({lb.q, lb.kv}).second);
          ++busy;
        }
        if (hb.valid()) {
          EXPECT_EQ(hb.kv, r);  // helpers compute with their own KV
          EXPECT_LT(r, t);      // only ranks whose own work is done help
          EXPECT_EQ(hb.q - hb.kv, P - t);
          EXPECT_TRUE(seen.insert({hb.q, hb.kv}).second);
          ++busy;
        }
      }
      // Odd P: every rank busy at every step (perfect balance); even P: all but the last step.
      if (P % 2 == 1 || t + 1 < s.steps) { EXPECT_EQ(busy, P) << "step " << t; }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), P * (P + 1) / 2);
  }
}

TEST(DistFlashSchedule, SkipsEmptyBlocksButKeepsTheDiagonal) {
  const auto s = strategies::make_distflash_schedule(6, [](int q, int kv) { return q - kv <= 1; });
  int blocks = 0;
  for (int t = 0; t < s.steps; ++t)
    for (int r = 0; r < 6; ++r) {
      blocks += s.local[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)].valid();
      EXPECT_FALSE(s.help[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)].valid());
    }
  EXPECT_EQ(blocks, 6 + 5);
  // Nothing needed off the diagonal: no bytes move.
  const auto d = strategies::make_distflash_schedule(4, [](int, int) { return false; });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(strategies::distflash_forward_bytes(d, {10, 5, 2}, r), 0);
    EXPECT_EQ(strategies::distflash_backward_bytes(d, {10, 5, 2}, r), 0);
  }
}

TEST(DistFlashSchedule, BytesMatchTheClosedFormForCausal) {
  // Causal, all blocks needed: rank x serves its KV to min(L, P−1−x) later ranks, ships Q for
  // max(0, x − L) helped blocks and returns max(0, P − 1 − L − x) partials (L = ⌊P/2⌋).
  const strategies::ChunkFloats c{64, 16, 8};
  for (int P = 1; P <= 8; ++P) {
    const int L = P / 2;
    const auto s = strategies::make_distflash_schedule(P, [](int, int) { return true; });
    for (int x = 0; x < P; ++x) {
      const std::int64_t serve = std::min(L, P - 1 - x), own_local = std::min(L, x);
      const std::int64_t helped = std::max(0, x - L), helps = std::max(0, P - 1 - L - x);
      EXPECT_EQ(strategies::distflash_forward_bytes(s, c, x),
                4 * (serve * 2 * c.kv + helped * c.q + helps * (c.q + c.row)))
          << "P=" << P << " rank " << x;
      EXPECT_EQ(strategies::distflash_backward_bytes(s, c, x),
                4 * (serve * 2 * c.kv + own_local * 2 * c.kv + helped * (2 * c.q + 2 * c.row) + helps * c.q))
          << "P=" << P << " rank " << x;
    }
  }
}

TEST(HeadSplit, EveryQueryHeadFindsItsKvHeadLocally) {
  for (int u = 1; u <= 8; ++u)
    for (std::int64_t H : {1, 2, 3, 4, 6, 8, 12, 16, 24})
      for (std::int64_t H_kv = 1; H_kv <= H; ++H_kv) {
        if (H % H_kv != 0) continue;
        SCOPED_TRACE("u=" + std::to_string(u) + " H=" + std::to_string(H) + " H_kv=" + std::to_string(H_kv));
        const bool ok = H % u == 0 && (H_kv % u == 0 || u % H_kv == 0);
        if (!ok) {
          EXPECT_THROW(strategies::make_head_split(H, H_kv, u, "test"), Error);
          continue;
        }
        const HeadSplit s = strategies::make_head_split(H, H_kv, u, "test");
        EXPECT_EQ(s.kv_replicated, H_kv % u != 0);
        const std::int64_t g = H / H_kv, local_g = s.heads / s.kv_heads;
        std::vector<int> owner(static_cast<std::size_t>(H), -1);
        for (int p = 0; p < u; ++p)
          for (std::int64_t i = 0; i < s.heads; ++i) {
            const std::int64_t h = s.q_lo(p) + i;
            ASSERT_LT(h, H);
            EXPECT_EQ(owner[static_cast<std::size_t>(h)], -1);
            owner[static_cast<std::size_t>(h)] = p;
            // The kernel maps local head i to local KV head i / local_g.
            EXPECT_EQ(h / g, s.kv_lo(p) + i / local_g);
            EXPECT_LT(s.kv_lo(p) + s.kv_heads - 1, H_kv);
          }
      }
}

TEST(PeerFormulas, ReduceToThePapersOnEqualShards) {
  // Equal shards of c tokens, B = 2, D = 8. Closed forms (docs/strategies.md), ×4 bytes:
  //  ulysses fwd (P−1)·B·c·[(H/P + 2·H_kv/P)·D + (H/P)·(D + 1)]  (Ulysses, arXiv 2309.14509: (2H +
  //  2H_kv)·N·d/G + lse) headpar fwd (P−1)·B·c·[(H + 2·H_kv)·D + H·(D + 1)]               (Megatron SP, arXiv
  //  2205.05198: AG + RS, full width) usp with u = P is ulysses; with u = 1 it is the KV ring, whose backward
  //  must equal the ring family's own formula ring_backward_bytes(KvSide) (plan.h, written independently).
  const std::int64_t B = 2, D = 8, c = 12;
  for (int P = 1; P <= 8; ++P) {
    const std::int64_t H = 2 * P, H_kv = P;
    const ProblemShape shape{B, c * P, H, H_kv, D};
    const SequenceLayout layout = make_layout(LayoutKind::Contiguous, P, c * P);
    const std::vector<std::int64_t> len(static_cast<std::size_t>(P), c);
    const HeadSplit s = strategies::make_head_split(H, H_kv, P, "t");
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(strategies::ulysses_forward_bytes(s, len, B, D, r),
                4 * (P - 1) * B * c * ((H / P + 2 * H_kv / P) * D + (H / P) * (D + 1)));
      EXPECT_EQ(strategies::headpar_forward_bytes(layout, shape, r),
                4 * (P - 1) * B * c * ((H + 2 * H_kv) * D + H * (D + 1)));
      DistConfig cfg;
      cfg.strategy = StrategyKind::Usp;
      cfg.ulysses_degree = 1;
      const ResolvedMask full_mask(Mask::full(), shape.S_global, shape.S_global);
      const auto ring = strategies::strategy_plan(cfg, shape, layout, full_mask);
      ASSERT_EQ(static_cast<int>(ring.forward_bytes.size()), P);
      EXPECT_EQ(ring.forward_bytes[static_cast<std::size_t>(r)], 4 * (P - 1) * 2 * B * c * H_kv * D);
      EXPECT_EQ(ring.backward_bytes[static_cast<std::size_t>(r)],
                ring_backward_bytes(BackwardSide::KvSide, shape, P));
      cfg.ulysses_degree = P;
      const auto full = strategies::strategy_plan(cfg, shape, layout, full_mask);
      EXPECT_EQ(full.forward_bytes[static_cast<std::size_t>(r)],
                strategies::ulysses_forward_bytes(s, len, B, D, r));
      EXPECT_EQ(full.backward_bytes[static_cast<std::size_t>(r)],
                strategies::ulysses_backward_bytes(s, len, B, D, r));
    }
  }
  // Rejected configurations plan no bytes instead of throwing.
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ulysses;
  const auto none = strategies::strategy_plan(
      cfg, {1, 12, 3, 1, 8}, make_layout(LayoutKind::Contiguous, 2, 12), ResolvedMask(Mask::full(), 12, 12));
  EXPECT_TRUE(none.empty() && none.backward_bytes.empty() && none.visible_pairs.empty());
}

TEST(UlyssesExchange, RowsFollowGlobalPositions) {
  const SequenceLayout striped = make_layout(LayoutKind::Striped, 3, 12);
  const device::CpuDevice cpu;
  const UlyssesExchange ex(cpu, striped.positions, strategies::make_head_split(3, 3, 3, "test"));
  ASSERT_EQ(ex.group_length(), 12);
  for (int m = 0; m < 3; ++m)
    for (std::size_t s = 0; s < ex.rows(m).size(); ++s)
      EXPECT_EQ(ex.positions()[static_cast<std::size_t>(ex.rows(m)[s])],
                striped.positions[static_cast<std::size_t>(m)][s]);
  EXPECT_THROW(UlyssesExchange(cpu, {{0, 1}, {1, 2}}, strategies::make_head_split(2, 2, 2, "test")), Error);
}

// ------------------------------------------------------------------ distributed cases

using test::expect_same_error;
using test::Family;
using test::head_configs;
using test::kAllLayouts;
using test::kD;
using test::kFamilies;
using test::kS;
using test::mask_of;
using test::name_of;
using test::reference;
using test::Reference;
using test::run_case;
using test::shard_of;
using test::world_size;

TEST(PeerStrategies, UlyssesEveryLayoutMaskAndGqaRatio) {
  const int P = world_size();
  for (LayoutKind layout : kAllLayouts)
    for (Family f : kFamilies)
      for (auto [H, H_kv] : head_configs(P)) {
        DistConfig cfg;
        cfg.strategy = StrategyKind::Ulysses;
        cfg.layout = layout;
        run_case(cfg, 1, H, H_kv, f);
      }
}

TEST(PeerStrategies, TpEveryLayoutMaskAndGqaRatio) {
  const int P = world_size();
  for (LayoutKind layout : kAllLayouts)
    for (Family f : kFamilies)
      for (auto [H, H_kv] : head_configs(P)) {
        DistConfig cfg;
        cfg.strategy = StrategyKind::HeadParallel;
        cfg.layout = layout;
        run_case(cfg, 1, H, H_kv, f);
      }
}

TEST(PeerStrategies, UspEveryDegreeLayoutMaskAndGqaRatio) {
  const int P = world_size();
  for (int u = 1; u <= P; ++u) {
    if (P % u != 0) continue;
    // u = P is ulysses (its own test covers every layout): one layout suffices for usp's path.
    const std::vector<LayoutKind> layouts = u < P ? kAllLayouts : std::vector<LayoutKind>{LayoutKind::Zigzag};
    for (LayoutKind layout : layouts)
      for (Family f : kFamilies)
        for (auto [H, H_kv] : head_configs(P)) {
          DistConfig cfg;
          cfg.strategy = StrategyKind::Usp;
          cfg.layout = layout;
          cfg.ulysses_degree = u;
          run_case(cfg, 1, H, H_kv, f);
        }
  }
}

TEST(PeerStrategies, BurstUspEveryDegreeLayoutMaskAndGqaRatio) {
  // Burst-USP (usp ring=burst): Ulysses inside the group, burst's ring with the query-side
  // backward across the groups; one node here (flat ring), the double ring below.
  const int P = world_size();
  for (int u = 1; u < P || u == 1; ++u) {
    if (P % u != 0) continue;
    for (LayoutKind layout : {LayoutKind::Zigzag, LayoutKind::Contiguous})
      for (Family f : kFamilies)
        for (auto [H, H_kv] : head_configs(P)) {
          if (H_kv * 2 == H) continue;  // GQA 1 and 4 suffice here (usp's own test covers 2)
          DistConfig cfg;
          cfg.strategy = StrategyKind::Usp;
          cfg.usp_ring = UspRing::Burst;
          cfg.layout = layout;
          cfg.ulysses_degree = u;
          run_case(cfg, 1, H, H_kv, f);
        }
  }
}

TEST(PeerStrategies, UspDoubleRingOnTwoByTwoNodes) {
  // P = 4 as 2 nodes × 2 ranks (ranks_per_node): u = 2 puts each Ulysses group inside a node
  // and the ring across the nodes (BurstEngine's hybrid; ring 2 × 1); u = 1 is the double ring
  // on the whole mesh (2 × 2) — burst's (usp_ring = burst) or LoongTrain's double-ring
  // attention (usp's K,V ring); overlap off and flat ring as ablations.
  const int P = world_size();
  if (P != 4) GTEST_SKIP() << "2 x 2 nodes need 4 ranks";
  for (UspRing ring : {UspRing::Burst, UspRing::Ring})
    for (int u : {2, 1})
      for (bool overlap : {true, false})
        for (bool dbl : {true, false}) {
          if (ring == UspRing::Ring && !overlap) continue;  // the ablation runs the same executor
          DistConfig cfg;
          cfg.strategy = StrategyKind::Usp;
          cfg.usp_ring = ring;
          cfg.layout = LayoutKind::Zigzag;
          cfg.ulysses_degree = u;
          cfg.ranks_per_node = 2;
          cfg.overlap = overlap;
          cfg.double_ring = dbl;
          SCOPED_TRACE(std::string(ring == UspRing::Burst ? "burst" : "ring") + " u=" + std::to_string(u) +
                       " overlap=" + std::to_string(overlap) + " double=" + std::to_string(dbl));
          for (Family f : {Family::Causal, Family::Document, Family::SlidingWindowCausal})
            run_case(cfg, 1, 8, 4, f);
          const Plan plan = Plan::make(cfg, {1, kS, 8, 4, kD}, Mask::causal_mask(), P, 2);
          EXPECT_EQ(plan.ranks_per_node(), dbl ? 2 : P);
        }
}

TEST(UspRingTopology, GroupsInsideNodesRingAcrossThem) {
  using strategies::usp_ring_topology;
  const auto is = [](strategies::RingTopology t, int n, int L) {
    return t.nodes == n && t.ranks_per_node == L;
  };
  EXPECT_TRUE(is(usp_ring_topology(4, 2, 2, true), 2, 1));   // u = L: one ring member per node
  EXPECT_TRUE(is(usp_ring_topology(4, 1, 2, true), 2, 2));   // burst's double ring
  EXPECT_TRUE(is(usp_ring_topology(8, 2, 4, true), 2, 2));   // two groups per node
  EXPECT_TRUE(is(usp_ring_topology(8, 4, 2, true), 2, 1));   // a group spans two nodes
  EXPECT_TRUE(is(usp_ring_topology(12, 2, 3, true), 1, 6));  // groups straddle nodes: flat
  EXPECT_TRUE(is(usp_ring_topology(8, 2, 4, false), 1, 4));  // no double ring: flat
  EXPECT_TRUE(is(usp_ring_topology(4, 2, 4, true), 1, 2));   // one node
}

/// True when no visible pair has its key in a later chunk than its query (brute force).
bool causal_like(const Mask& mask, int P) {
  const ResolvedMask rm(mask, kS, kS);
  const std::int64_t c = kS / P;
  for (std::int64_t q = 0; q < kS; ++q)
    for (std::int64_t k = (q / c + 1) * c; k < kS; ++k)
      if (rm.visible(q, k)) return false;
  return true;
}

TEST(PeerStrategies, DistFlashCausalLikeMasksAndGqaRatio) {
  const int P = world_size();
  for (Family f : {Family::Causal, Family::SlidingWindowCausal, Family::Document, Family::PrefixLm,
                   Family::BlockSparse, Family::Full, Family::SlidingWindow}) {
    DistConfig cfg;
    cfg.strategy = StrategyKind::DistFlash;
    cfg.layout = LayoutKind::Contiguous;
    if (!causal_like(mask_of(f), P)) {
      SCOPED_TRACE(name_of(f));
      EXPECT_NE(f, Family::Causal);
      expect_same_error(cfg, {1, kS, 4, 4, kD}, mask_of(f), ErrorKind::Unsupported);
      continue;
    }
    for (auto [H, H_kv] : head_configs(P)) run_case(cfg, 1, H, H_kv, f);
  }
}

TEST(PeerStrategies, ReplicatedKvHeadsAndBatch) {
  // H_kv = 1 < P: every rank reads a copy of the one KV head; dK, dV sum over the copies.
  const int P = world_size();
  for (StrategyKind s :
       {StrategyKind::Ulysses, StrategyKind::Usp, StrategyKind::HeadParallel, StrategyKind::DistFlash}) {
    DistConfig cfg;
    cfg.strategy = s;
    cfg.layout = s == StrategyKind::DistFlash ? LayoutKind::Contiguous : LayoutKind::Zigzag;
    cfg.ulysses_degree = s == StrategyKind::Usp ? P : 0;
    run_case(cfg, 2, 2 * P, 1, Family::Causal);
  }
}

TEST(PeerStrategies, StridedOperands) {
  // SDPA-layout memory ([B,H,S,D]) passed as BSHD views with permuted strides, GQA 2.
  const int P = world_size();
  for (StrategyKind s :
       {StrategyKind::Ulysses, StrategyKind::Usp, StrategyKind::HeadParallel, StrategyKind::DistFlash}) {
    DistConfig cfg;
    cfg.strategy = s;
    cfg.layout = s == StrategyKind::DistFlash ? LayoutKind::Contiguous : LayoutKind::Striped;
    cfg.ulysses_degree = s == StrategyKind::Usp ? (P % 2 == 0 ? 2 : 1) : 0;
    run_case(cfg, 2, 4 * P, 2 * P, Family::Document, true);
  }
}

TEST(PeerStrategies, UspAutoDegreeAndNoOverlap) {
  const int P = world_size();
  DistConfig cfg;
  cfg.strategy = StrategyKind::Usp;
  cfg.layout = LayoutKind::Zigzag;
  cfg.overlap = false;
  // H_kv = 2: the auto degree is the largest divisor of P dividing 2, so P = 4 runs u = 2, r = 2.
  run_case(cfg, 1, 2 * P, 2, Family::Document);
  cfg.strategy = StrategyKind::DistFlash;  // transfers completed before each step computes
  cfg.layout = LayoutKind::Contiguous;
  run_case(cfg, 1, 2 * P, 2, Family::Causal);
}

TEST(PeerStrategies, DistFlashReturnOverlapOffWaitsInsideTheStepWithTheSameBits) {
  // return_overlap = false: the returned partials are waited for in the step that made them
  // (the ablation of docs/strategies.md § distflash); merged at the same point, so same bits.
  const int P = world_size();
  DistConfig cfg;
  cfg.strategy = StrategyKind::DistFlash;
  cfg.layout = LayoutKind::Contiguous;
  cfg.return_overlap = false;
  run_case(cfg, 1, 2 * P, 2, Family::Causal);
  const Reference& ref = reference(1, 2 * P, 2, Family::Causal);
  const Communicator world = Communicator::world();
  std::vector<Tensor> got[2];
  for (bool returns : {true, false}) {
    cfg.return_overlap = returns;
    DistAttention attn(world, cfg, ref.shape, ref.mask);
    const SequenceLayout& layout = attn.plan().layout();
    const Tensor q = shard_of(layout, world.rank(), ref.q), k = shard_of(layout, world.rank(), ref.k);
    const Tensor v = shard_of(layout, world.rank(), ref.v), dout = shard_of(layout, world.rank(), ref.dout);
    Tensor out(q.shape()), lse({1, 2 * P, attn.local_length()}), dq(q.shape()), dk(k.shape()), dv(v.shape());
    attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
    attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                  dv.view());
    got[returns ? 0 : 1] = {out, lse, dq, dk, dv};
  }
  for (std::size_t i = 0; i < got[0].size(); ++i)
    EXPECT_EQ(got[0][i].vec(), got[1][i].vec()) << "tensor " << i << " (out, lse, dq, dk, dv)";
}

// ctest label multinode: 2 emulated hosts × 2 ranks over TCP (scripts/cluster.sh). Every peer
// strategy on every layout it takes, causal and a sparse (document) mask, forward and backward
// against fp64; usp with its Ulysses groups inside a node and its ring across nodes (u = L).
TEST(Multinode, PeerStrategiesOverTcp) {
  const int nodes = test::multinode_expected_nodes();
  if (nodes == 0) GTEST_SKIP() << "runs on the emulated cluster only (ctest -L multinode)";
  ASSERT_TRUE(test::discovered_topology_is(nodes));
  const int P = world_size();
  for (StrategyKind s :
       {StrategyKind::Ulysses, StrategyKind::Usp, StrategyKind::HeadParallel, StrategyKind::DistFlash})
    for (LayoutKind layout : kAllLayouts) {
      if (s == StrategyKind::DistFlash && layout != LayoutKind::Contiguous) continue;  // contiguous only
      for (Family f : {Family::Causal, Family::Document}) {
        DistConfig cfg;
        cfg.strategy = s;
        cfg.layout = layout;
        cfg.ulysses_degree = s == StrategyKind::Usp ? P / nodes : 0;
        run_case(cfg, 1, 4 * P, 2 * P, f);
      }
    }
  // usp's K,V ring and Burst-USP's: Ulysses inside each host with the ring across the hosts
  // (u = L), and the double ring over the discovered topology (u = 1), or the flat ring.
  for (UspRing ring : {UspRing::Burst, UspRing::Ring})
    for (int u : {P / nodes, 1})
      for (bool dbl : {true, false}) {
        if (!dbl && u != 1) continue;  // u = L: one member per host, the same ring either way
        for (Family f : {Family::Causal, Family::Document}) {
          DistConfig cfg;
          cfg.strategy = StrategyKind::Usp;
          cfg.usp_ring = ring;
          cfg.layout = LayoutKind::Zigzag;
          cfg.ulysses_degree = u;
          cfg.double_ring = dbl;
          run_case(cfg, 1, 4 * P, 2 * P, f);
        }
      }
}

// usp's inter-node bytes (DistStats::bytes_sent_inter_node) on the emulated cluster, forward:
// with u = 1 the double ring sends n − 1 of its P − 1 K,V blocks across hosts on every rank, the
// flat ring all of them from each host's last rank; with u = L the all-to-all stays inside a host
// and every ring hop crosses (the ring part of the bytes, ring_group_forward_bytes).
TEST(Multinode, UspInterNodeBytesFollowTheRing) {
  const int nodes = test::multinode_expected_nodes();
  if (nodes == 0) GTEST_SKIP() << "runs on the emulated cluster only (ctest -L multinode)";
  const Communicator world = Communicator::world();
  const int P = world.size(), L = P / nodes, rank = world.rank();
  const Reference& ref = reference(1, 4 * P, 2 * P, Family::Causal);
  for (UspRing ring : {UspRing::Ring, UspRing::Burst})
    for (int u : {1, L})
      for (bool dbl : {true, false}) {
        DistConfig cfg;
        cfg.strategy = StrategyKind::Usp;
        cfg.usp_ring = ring;
        cfg.ulysses_degree = u;
        cfg.double_ring = dbl;
        cfg.num_threads = 1;
        const auto [st, layout] = test::run_forward(world, cfg, ref.shape, ref.mask, ref.q, ref.k, ref.v);
        SCOPED_TRACE(std::string(ring == UspRing::Burst ? "burst" : "ring") + " u=" + std::to_string(u) +
                     (dbl ? " double" : " flat"));
        ASSERT_GT(st.bytes_sent, 0);
        if (u == L) {
          const HeadSplit split = strategies::make_head_split(ref.shape.H, ref.shape.H_kv, u, "t");
          EXPECT_EQ(st.bytes_sent_inter_node,
                    strategies::ring_group_forward_bytes(strategies::usp_ring_groups(layout, u), 1,
                                                         split.kv_heads, kD, rank / u));
        } else if (dbl) {
          EXPECT_EQ(st.bytes_sent_inter_node * (P - 1), st.bytes_sent * (nodes - 1));
        } else {
          EXPECT_EQ(st.bytes_sent_inter_node, rank % L == L - 1 ? st.bytes_sent : 0);
        }
      }
}

}  // namespace
}  // namespace burst
