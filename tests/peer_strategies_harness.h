// tests/peer_strategies_harness.h — the distributed cases of the peer-strategy tests
// (tests/test_peer_strategies.cc, tests/test_peer_strategies_contexts.cc): the tiny shapes, the
// memoised fp64 references, the documented byte formulas and run_case / expect_same_error,
// which run one configuration on every rank against them.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "dist_test_util.h"
#include "plan_strategies.h"
#include "strategies/ulysses.h"
#include "test_util.h"

namespace burst::test {

// Tiny shapes (docs/style.md: fast unit suite): S_global = 96 is divisible by 2P for P = 1..4
// (zigzag); D = 8; H = 4·P query heads so that H_kv = H/g divides P for g = 1, 2, 4.
inline constexpr std::int64_t kS = 96, kD = 8;

inline int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

inline Mask mask_of(Family f) { return test::mask_of(f, kS, /*seed=*/7, /*window=*/13); }

inline const std::vector<Family> kFamilies = {Family::Full,     Family::Causal,   Family::SlidingWindow,
                                              Family::Document, Family::PrefixLm, Family::BlockSparse};

/// Global inputs, the fp64 oracle's outputs and the naive-fp32 errors that set the tolerance
/// (test::oracle_case; tol[] in the order out, lse, dq, dk, dv).
struct Reference : test::OracleCase {
  /// Error of the single-process fp32 Tiled kernel on the same global problem.
  double local_out = 0, local_lse = 0, local_dq = 0, local_dk = 0, local_dv = 0;
};

inline Reference make_reference(std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family) {
  Reference r{test::oracle_case({B, kS, H, H_kv, kD}, mask_of(family),
                                static_cast<std::uint64_t>(H * 131 + H_kv * 17 + B))};
  AttentionParams tiled;
  tiled.mask = r.mask;
  tiled.impl = KernelImpl::Tiled;
  tiled.num_threads = 1;
  const AttentionOutput t = attention_forward(r.q.view(), r.k.view(), r.v.view(), tiled);
  const AttentionGrads tg = attention_backward(r.dout.view(), r.q.view(), r.k.view(), r.v.view(),
                                               t.out.view(), t.lse.view(), tiled);
  r.local_out = test::max_abs_diff(t.out, r.out);
  r.local_lse = test::max_abs_diff(t.lse, r.lse);
  r.local_dq = test::max_abs_diff(tg.dq, r.dq);
  r.local_dk = test::max_abs_diff(tg.dk, r.dk);
  r.local_dv = test::max_abs_diff(tg.dv, r.dv);
  return r;
}

inline const Reference& reference(std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family) {
  return test::memoised<Reference>(B, H, H_kv, family, make_reference);
}

inline std::vector<std::int64_t> lengths(const SequenceLayout& layout, int first, int count) {
  std::vector<std::int64_t> out;
  for (int m = 0; m < count; ++m)
    out.push_back(static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(first + m)].size()));
  return out;
}

/// usp's ring topology for cfg at P ranks: ranks_per_node when set, else the nodes of the
/// emulated cluster (one node outside it).
inline strategies::RingTopology usp_topology(const DistConfig& cfg, int P, int u) {
  const int nodes = std::max(1, test::multinode_expected_nodes());  // discovered on the cluster
  const int L = cfg.ranks_per_node > 0 ? cfg.ranks_per_node : P / nodes;
  return strategies::usp_ring_topology(P, u, L, cfg.double_ring);
}

/// Predicted bytes of this rank for one pass of a peer strategy (the documented formulas).
inline std::int64_t predicted_bytes(const DistConfig& cfg, const ProblemShape& shape,
                                    const SequenceLayout& layout, const Mask& mask, int rank, bool backward) {
  const int P = layout.P;
  switch (cfg.strategy) {
    case StrategyKind::Ulysses: {
      const strategies::HeadSplit split = strategies::make_head_split(shape.H, shape.H_kv, P, "t");
      const auto len = lengths(layout, 0, P);
      return backward ? strategies::ulysses_backward_bytes(split, len, shape.B, shape.D, rank)
                      : strategies::ulysses_forward_bytes(split, len, shape.B, shape.D, rank);
    }
    case StrategyKind::Usp: {
      const int u = strategies::resolve_ulysses_degree(cfg.ulysses_degree, P, shape.H_kv);
      const strategies::HeadSplit split = strategies::make_head_split(shape.H, shape.H_kv, u, "t");
      const auto len = lengths(layout, rank / u * u, u);
      const auto groups = strategies::usp_ring_groups(layout, u);
      const auto topo = usp_topology(cfg, P, u);
      if (backward && cfg.usp_ring == UspRing::Burst) {
        // Burst-USP: the query-side backward on the ring over the groups. Hand count: Q, dO,
        // delta, lse hop r − 1 times; the dQ partial hops once per ring step, except at the
        // step holding the member's own block when the ring has one member per node.
        const int r = P / u;
        const std::int64_t S = static_cast<std::int64_t>(groups[0].size()), h = split.heads;
        const std::int64_t dq_hops = r == 1 ? 0 : topo.ranks_per_node == 1 ? r - 1 : r;
        return strategies::ulysses_backward_bytes(split, len, shape.B, shape.D, rank % u) +
               4 * ((r - 1) * shape.B * S * h * (2 * shape.D + 2) + dq_hops * shape.B * S * h * shape.D);
      }
      return backward ? strategies::ulysses_backward_bytes(split, len, shape.B, shape.D, rank % u) +
                            strategies::ring_group_backward_bytes(groups, topo, shape.B, split.kv_heads,
                                                                  shape.D, rank / u)
                      : strategies::ulysses_forward_bytes(split, len, shape.B, shape.D, rank % u) +
                            strategies::ring_group_forward_bytes(groups, shape.B, split.kv_heads, shape.D,
                                                                 rank / u);
    }
    case StrategyKind::HeadParallel:
      return backward ? strategies::headpar_backward_bytes(layout, shape, rank)
                      : strategies::headpar_forward_bytes(layout, shape, rank);
    case StrategyKind::DistFlash: {
      // Block needs decided by brute force over every pair (independent of the strategy's check).
      const ResolvedMask rm(mask, shape.S_global, shape.S_global);
      const std::int64_t c = shape.S_global / P;
      auto needed = [&](int i, int j) {
        for (std::int64_t a = i * c; a < (i + 1) * c; ++a)
          for (std::int64_t b = j * c; b < (j + 1) * c; ++b)
            if (rm.visible(a, b)) return true;
        return false;
      };
      const auto s = strategies::make_distflash_schedule(P, needed);
      const strategies::ChunkFloats f{shape.B * c * shape.H * shape.D, shape.B * c * shape.H_kv * shape.D,
                                      shape.B * shape.H * c};
      return backward ? strategies::distflash_backward_bytes(s, f, rank)
                      : strategies::distflash_forward_bytes(s, f, rank);
    }
    default: return -1;
  }
}

/// A BSHD view over [B,H,S,D] memory (SDPA's layout: strided, D contiguous) holding a copy of
/// a contiguous BSHD tensor; contiguous() copies it back.
struct StridedCopy {
  Tensor mem;
  TensorView view;
  explicit StridedCopy(const Tensor& bshd) {
    const auto& sh = bshd.shape();
    const std::int64_t B = sh[0], S = sh[1], H = sh[2], D = sh[3];
    mem = Tensor({B, H, S, D});
    view = make_view(mem.data(), {B, S, H, D});
    view.stride = {H * S * D, D, S * D, 1};
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d)
            mem.data()[((b * H + h) * S + s) * D + d] = bshd.data()[((b * S + s) * H + h) * D + d];
  }
  Tensor contiguous() const {
    Tensor t({view.shape[0], view.shape[1], view.shape[2], view.shape[3]});
    for (std::int64_t b = 0; b < view.shape[0]; ++b)
      for (std::int64_t s = 0; s < view.shape[1]; ++s)
        for (std::int64_t h = 0; h < view.shape[2]; ++h)
          for (std::int64_t d = 0; d < view.shape[3]; ++d)
            t.data()[((b * view.shape[1] + s) * view.shape[2] + h) * view.shape[3] + d] =
                mem.data()[b * view.stride[0] + s * view.stride[1] + h * view.stride[2] + d];
    return t;
  }
};

/// Runs one case on every rank and checks out, lse, dq, dk, dv and the byte counters. With
/// `strided`, every BSHD operand is a permuted-stride view ([B,H,S,D] memory).
inline void run_case(const DistConfig& cfg, std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family,
                     bool strided = false) {
  const Reference& ref = reference(B, H, H_kv, family);
  SCOPED_TRACE(std::string("strategy=") + to_string(cfg.strategy) + " layout=" + to_string(cfg.layout) +
               " mask=" + name_of(family) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
               " H_kv=" + std::to_string(H_kv) + " u=" + std::to_string(cfg.ulysses_degree));
  const Communicator world = Communicator::world();
  DistAttention attn(world, cfg, ref.shape, ref.mask);
  const int rank = world.rank();
  const SequenceLayout& layout = attn.plan().layout();
  ASSERT_EQ(attn.positions(), layout.positions[static_cast<std::size_t>(rank)]);
  Tensor q = shard_of(layout, rank, ref.q), k = shard_of(layout, rank, ref.k),
         v = shard_of(layout, rank, ref.v);
  Tensor dout = shard_of(layout, rank, ref.dout);
  Tensor out(q.shape()), lse({B, H, attn.local_length()});
  StridedCopy sq(q), sk(k), sv(v), sdout(dout), sout(out), sdq(q), sdk(k), sdv(v);
  const auto pick = [&](Tensor& t, StridedCopy& c) { return strided ? c.view : t.view(); };
  attn.forward(pick(q, sq), pick(k, sk), pick(v, sv), pick(out, sout), lse.view());
  if (strided) out = sout.contiguous();
  EXPECT_TRUE(dist_close("out", out, shard_of(layout, rank, ref.out), ref.tol[0], ref.local_out));
  EXPECT_TRUE(dist_close("lse", lse, rows_of(layout, rank, ref.lse), ref.tol[1], ref.local_lse));
  EXPECT_EQ(attn.last_stats().bytes_sent, predicted_bytes(cfg, ref.shape, layout, ref.mask, rank, false))
      << "forward bytes";
  const DistStats fs = attn.last_stats();
  const auto r = static_cast<std::size_t>(rank);
  ASSERT_FALSE(attn.plan().forward().bytes_sent.empty()) << "the plan predicts the strategy's bytes";
  EXPECT_EQ(fs.bytes_sent, attn.plan().forward().bytes_sent[r]);
  EXPECT_EQ(fs.visible_pairs, attn.plan().forward().visible_pairs[r]);
  EXPECT_LE(fs.peak_buffer_bytes, attn.plan().forward().peak_buffer_bytes[r]);
  // Work is conserved: the ranks' shares add up to the mask area (up to the /P, /u rounding).
  const long long mine = fs.visible_pairs;
  long long total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  const long long area = ResolvedMask(ref.mask, kS, kS).visible_pairs();
  EXPECT_LE(total, area);
  EXPECT_GT(total, area - world.size());
  Tensor dq(q.shape()), dk(k.shape()), dv(v.shape());
  attn.backward(pick(dout, sdout), pick(q, sq), pick(k, sk), pick(v, sv), pick(out, sout), lse.view(),
                pick(dq, sdq), pick(dk, sdk), pick(dv, sdv));
  if (strided) {
    dq = sdq.contiguous();
    dk = sdk.contiguous();
    dv = sdv.contiguous();
  }
  EXPECT_TRUE(dist_close("dq", dq, shard_of(layout, rank, ref.dq), ref.tol[2], ref.local_dq));
  EXPECT_TRUE(dist_close("dk", dk, shard_of(layout, rank, ref.dk), ref.tol[3], ref.local_dk));
  EXPECT_TRUE(dist_close("dv", dv, shard_of(layout, rank, ref.dv), ref.tol[4], ref.local_dv));
  EXPECT_EQ(attn.last_stats().bytes_sent, predicted_bytes(cfg, ref.shape, layout, ref.mask, rank, true))
      << "backward bytes";
  const DistStats bs = attn.last_stats();
  EXPECT_EQ(bs.bytes_sent, attn.plan().backward().bytes_sent[r]);
  EXPECT_LE(bs.peak_buffer_bytes, attn.plan().backward().peak_buffer_bytes[r]);
}

/// Constructs DistAttention on every rank expecting an Error of `kind`; checks that every rank
/// got the same message (hash min == max over ranks) — i.e. the verdict was agreed before any
/// payload could move.
inline void expect_same_error(const DistConfig& cfg, const ProblemShape& shape, const Mask& mask,
                              ErrorKind kind) {
  const Communicator world = Communicator::world();
  std::string message;
  try {
    DistAttention attn(world, cfg, shape, mask);
    ADD_FAILURE() << "no error for strategy " << to_string(cfg.strategy);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    message = e.what();
  }
  const long long h = static_cast<long long>(std::hash<std::string>{}(message)&0x7fffffffffffll);
  long long lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "ranks disagree; this rank: " << message;
}

inline const std::vector<LayoutKind> kAllLayouts = {LayoutKind::Contiguous, LayoutKind::Zigzag,
                                                    LayoutKind::Striped, LayoutKind::Balanced};

/// (H, H_kv) for GQA ratios 1, 2, 4 with H_kv divisible by P.
inline std::vector<std::pair<std::int64_t, std::int64_t>> head_configs(int P) {
  const std::int64_t H = 4 * P;
  return {{H, H}, {H, H / 2}, {H, H / 4}};
}

}  // namespace burst::test
