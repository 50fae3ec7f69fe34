// Tests of the peer strategies ulysses, usp, distflash and headpar under mpiexec -n 1..4: every
// strategy × supported layout × a mask from each family (full, causal, sliding window,
// document, prefix-LM, block-sparse) × GQA ratio 1/2/4 (+ replicated KV heads), forward and
// backward, against the single-process fp64 oracle on the unsharded global inputs; per-rank
// byte counters against the documented formulas; bad input (H % P ≠ 0, a usp degree not
// dividing P, distflash on a non-contiguous layout or a non-causal mask) raising the same
// burst::Error on every rank before any payload moves. Pure parts (DistFlashAttn schedule,
// head split, Ulysses index maps) are checked exhaustively on every rank.
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
#include "plan_strategies.h"
#include "strategies/ulysses.h"
#include "test_util.h"

namespace burst {
namespace {

using strategies::HeadSplit;
using strategies::UlyssesExchange;

// Tiny shapes (docs/style.md: fast unit suite): S_global = 96 is divisible by 2P for P = 1..4
// (zigzag); D = 8; H = 4·P query heads so that H_kv = H/g divides P for g = 1, 2, 4.
constexpr std::int64_t kS = 96, kD = 8;

int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

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

using test::Family;
using test::name_of;

Mask mask_of(Family f) { return test::mask_of(f, kS, /*seed=*/7, /*window=*/13); }

const std::vector<Family> kFamilies = {Family::Full,     Family::Causal,   Family::SlidingWindow,
                                       Family::Document, Family::PrefixLm, Family::BlockSparse};

/// Global inputs, the fp64 oracle's outputs and the naive-fp32 errors that set the tolerance
/// (test::oracle_case; tol[] in the order out, lse, dq, dk, dv).
struct Reference : test::OracleCase {
  /// Error of the single-process fp32 Tiled kernel on the same global problem.
  double local_out = 0, local_lse = 0, local_dq = 0, local_dk = 0, local_dv = 0;
};

Reference make_reference(std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family) {
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

const Reference& reference(std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family) {
  return test::memoised<Reference>(B, H, H_kv, family, make_reference);
}

using test::rows_of;
using test::shard_of;

using test::dist_close;

std::vector<std::int64_t> lengths(const SequenceLayout& layout, int first, int count) {
  std::vector<std::int64_t> out;
  for (int m = 0; m < count; ++m)
    out.push_back(static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(first + m)].size()));
  return out;
}

/// usp's ring topology for cfg at P ranks: ranks_per_node when set, else the nodes of the
/// emulated cluster (one node outside it).
strategies::RingTopology usp_topology(const DistConfig& cfg, int P, int u) {
  const int nodes = std::max(1, test::multinode_expected_nodes());  // discovered on the cluster
  const int L = cfg.ranks_per_node > 0 ? cfg.ranks_per_node : P / nodes;
  return strategies::usp_ring_topology(P, u, L, cfg.double_ring);
}

/// Predicted bytes of this rank for one pass of a peer strategy (the documented formulas).
std::int64_t predicted_bytes(const DistConfig& cfg, const ProblemShape& shape, const SequenceLayout& layout,
                             const Mask& mask, int rank, bool backward) {
  const int P = layout.P;
  switch (cfg.strategy) {
    case StrategyKind::Ulysses: {
      const HeadSplit split = strategies::make_head_split(shape.H, shape.H_kv, P, "t");
      const auto len = lengths(layout, 0, P);
      return backward ? strategies::ulysses_backward_bytes(split, len, shape.B, shape.D, rank)
                      : strategies::ulysses_forward_bytes(split, len, shape.B, shape.D, rank);
    }
    case StrategyKind::Usp: {
      const int u = strategies::resolve_ulysses_degree(cfg.ulysses_degree, P, shape.H_kv);
      const HeadSplit split = strategies::make_head_split(shape.H, shape.H_kv, u, "t");
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
void run_case(const DistConfig& cfg, std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family,
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
void expect_same_error(const DistConfig& cfg, const ProblemShape& shape, const Mask& mask, ErrorKind kind) {
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

const std::vector<LayoutKind> kAllLayouts = {LayoutKind::Contiguous, LayoutKind::Zigzag, LayoutKind::Striped,
                                             LayoutKind::Balanced};

/// (H, H_kv) for GQA ratios 1, 2, 4 with H_kv divisible by P.
std::vector<std::pair<std::int64_t, std::int64_t>> head_configs(int P) {
  const std::int64_t H = 4 * P;
  return {{H, H}, {H, H / 2}, {H, H / 4}};
}

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
