// Tests of the cost model, part 2 (part 1, the formulas and the step simulator:
// tests/test_cost_model.cc, same binary): each strategy's schedule on tiny problems whose
// answer can be worked out on paper, the mask-driven pair matrix against a brute-force count,
// and the model's ranking, bytes and steps against the Plan the strategies execute.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "burst/cost_model.h"
#include "burst/error.h"
#include "cost_model_internal.h"
#include "cost_test_util.h"
#include "plan_strategies.h"

namespace burst {
namespace {

using test::toy_cluster;
using test::toy_workload;

// Causal mask, S = 4, P = 2. Contiguous: rank 0 = {0,1}, rank 1 = {2,3}; pairs (q-rank, kv-rank):
// (0,0) = 3, (0,1) = 0, (1,0) = 4, (1,1) = 3. Zigzag: rank 0 = {0,3}, rank 1 = {1,2}:
// (0,0) = {(0,0),(3,0),(3,3)} = 3, (0,1) = {(3,1),(3,2)} = 2, (1,0) = {(1,0),(2,0)} = 2, (1,1) = 3.
const std::vector<double> kCausalContiguous = {3, 0, 4, 3};
const std::vector<double> kCausalZigzag = {3, 2, 2, 3};

TEST(CostSchedules, RingForwardImbalanceAndZigzag) {
  const ClusterSpec c = toy_cluster(1, 2);
  const Workload w = toy_workload(4, 1, 1, 1);
  const cost::Context ctx{&c, &w, 2};
  // K, V hop: 2·b_kv·β = 2·(1·2·1·1)·4 = 16 bytes = 2 s. Contiguous: rank 0 computes 3 then 0,
  // rank 1 computes 3 then 4; rank 1 starts step 1 at max(3, 0 + 2) = 3, ends at 7.
  PassEstimate p =
      cost::simulate(cost::ring_schedule(ctx, kCausalContiguous, 2, false, false, false, 1, 1, 1));
  EXPECT_DOUBLE_EQ(p.seconds, 7.0);
  EXPECT_DOUBLE_EQ(p.balance, 7.0 / 5.0);
  EXPECT_EQ(p.bytes_per_device, 16);
  EXPECT_DOUBLE_EQ(p.exposed_comm_seconds, 0.0);
  // Zigzag: both ranks 3 then 2 → 5 s, balanced.
  p = cost::simulate(cost::ring_schedule(ctx, kCausalZigzag, 2, false, false, false, 1, 1, 1));
  EXPECT_DOUBLE_EQ(p.seconds, 5.0);
  EXPECT_DOUBLE_EQ(p.balance, 1.0);
  // A slow link exposes communication: 16 bytes at 1 byte/s = 16 s > 3 s of compute.
  ClusterSpec slow = c;
  slow.intra_bandwidth = 1;
  const cost::Context sctx{&slow, &w, 2};
  p = cost::simulate(cost::ring_schedule(sctx, kCausalZigzag, 2, false, false, false, 1, 1, 1));
  EXPECT_DOUBLE_EQ(p.seconds, 18.0);  // start step 1 at 16, + 2
  EXPECT_DOUBLE_EQ(p.exposed_comm_seconds, 13.0);
}

TEST(CostSchedules, RingBackwardPayloadsBothSides) {
  const ClusterSpec c = toy_cluster(1, 2);
  const Workload w = toy_workload(4, 1, 1, 2);
  const cost::Context ctx{&c, &w, 2};
  // s = 2, D = 2: b_q = b_kv = 4 elements, r = 2. Query side: read 2·4·4 + 2·2·4 = 48 bytes,
  // write dQ 4·4 = 16; per rank (P−1)·48 + P·16 = 80. KV side: read 2·4·4 = 32, write
  // 2·4·4 = 32; 32 + 2·32 = 96.
  auto q = cost::simulate(cost::ring_schedule(ctx, kCausalZigzag, 2, true, true, false, 1, 1, 1));
  auto kv = cost::simulate(cost::ring_schedule(ctx, kCausalZigzag, 2, true, false, false, 1, 1, 1));
  EXPECT_EQ(q.bytes_per_device, 80);
  EXPECT_EQ(kv.bytes_per_device, 96);
  // Compute: a pair's backward costs 2.5·4·D = 20 flop = 5 s; each rank 3 + 2 pairs = 25 s.
  // The final dQ hop (16 bytes, 2 s) lands after the last step: 25 + 2 = 27 s.
  EXPECT_DOUBLE_EQ(q.compute_seconds, 25.0);
  EXPECT_DOUBLE_EQ(q.seconds, 27.0);
}

// A ring schedule of n members over pairs[i·n + j] = i·n + j + 1 (distinct per block, so a
// step's compute seconds name the partition it ran on): checks that every member computes on each
// partition exactly once and that the partition a feed's sender held when posting it is the one
// the receiver computes on next. Returns part[i][t] (member i's partition at step t) and each
// member's number of inter-node feeds.
struct RingVisits {
  std::vector<std::vector<int>> part;
  std::vector<int> inter;
};
RingVisits check_ring_visits(const cost::Schedule& s, int n) {
  RingVisits r{std::vector<std::vector<int>>(n, std::vector<int>(n)), std::vector<int>(n, 0)};
  auto part_of = [&](int i, int t) { return static_cast<int>(s.ranks[i].compute[t]) - 1 - n * i; };
  for (int i = 0; i < n; ++i) {
    std::vector<int> seen(n, 0);
    for (int t = 0; t < n; ++t) ++seen[r.part[i][t] = part_of(i, t)];
    EXPECT_EQ(seen, std::vector<int>(n, 1)) << "member " << i;
    for (int t = 1; t < n; ++t) {
      const cost::Feed& f = s.ranks[i].feed[t];
      EXPECT_EQ(part_of(f.src, f.step), part_of(i, t)) << "member " << i << " step " << t;
      r.inter[i] += f.inter_node ? 1 : 0;
    }
  }
  return r;
}

TEST(CostSchedules, DoubleRingVisitsEveryPartitionAndFeedsMatch) {
  // 2 nodes × 2: each rank must hold every partition exactly once, and the partition a feed's
  // sender held when posting it must be the one the receiver computes on next.
  const ClusterSpec c = toy_cluster(2, 2);
  const Workload w = toy_workload(8, 1, 1, 1);
  const cost::Context ctx{&c, &w, 4};
  std::vector<double> pairs(16);
  std::iota(pairs.begin(), pairs.end(), 1.0);
  const RingVisits r = check_ring_visits(cost::ring_schedule(ctx, pairs, 4, false, false, true, 1, 1, 1), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.part[i][0], i);
  // (n−1) = 1 inter-node hop per rank, docs/algorithm.md §7
  EXPECT_EQ(std::accumulate(r.inter.begin(), r.inter.end(), 0), 4);
}

TEST(CostSchedules, UspRingRunsOnTheDoubleRingAcrossNodes) {
  // usp at P = 16 on 4 nodes × 4, u = 2: ring members i = world ranks 2i, two per node. With
  // double_ring the members' ring is the 4 × 2 double ring (usp_ring_topology, as the library
  // runs it): every member holds each partition once and crosses nodes n − 1 = 3 times; flat,
  // member 0 receives from member 7 (node 3) at every one of its 7 steps.
  const ClusterSpec c = toy_cluster(4, 4);
  const Workload w = toy_workload(16, 2, 2, 1);
  const cost::Context ctx{&c, &w, 16};
  std::vector<double> pairs(64);
  std::iota(pairs.begin(), pairs.end(), 1.0);
  for (bool dbl : {true, false}) {
    const RingVisits r = check_ring_visits(cost::ring_schedule(ctx, pairs, 8, false, false, dbl, 1, 1, 2), 8);
    if (dbl) {
      for (int i = 0; i < 8; ++i) EXPECT_EQ(r.inter[i], 3) << "member " << i;
    } else {
      EXPECT_EQ(r.inter[0], 7);
    }
  }
  // Through estimate(): with the communication exposed (compute nearly free) on this cluster's
  // slow inter-node link (2 bytes/s against 8 inside a node), the double ring's usp is faster
  // than its flat ring, as burst's and ring's are.
  ClusterSpec fast = c;
  fast.matmul_flops = 1e9;
  const Workload big = toy_workload(64, 2, 2, 4);
  auto usp = [&](bool dbl) {
    return estimate(fast, big,
                    Candidate{StrategyKind::Usp, LayoutKind::Contiguous, 2, BackwardSide::Auto, dbl})
        .seconds;
  };
  EXPECT_LT(usp(true), usp(false));
  // The 2 rings of usp (one per head slice, members 2i and 2i + 1) run at once: on nodes whose
  // devices share one inter-node link each inter-node payload takes twice as long; intra-node
  // ones and the flat ring's intra hops are unchanged.
  ClusterSpec shared = c;
  shared.inter_links_per_node = 1;
  const cost::Context sctx{&shared, &w, 16};
  for (bool dbl : {true, false}) {
    const cost::Schedule own = cost::ring_schedule(ctx, pairs, 8, false, false, dbl, 1, 1, 2);
    const cost::Schedule one = cost::ring_schedule(sctx, pairs, 8, false, false, dbl, 1, 1, 2);
    int inter = 0;
    for (int i = 0; i < 8; ++i)
      for (int t = 1; t < 8; ++t) {
        const cost::Feed& a = own.ranks[i].feed[t];
        const cost::Feed& b = one.ranks[i].feed[t];
        inter += a.inter_node ? 1 : 0;
        const double bw = a.inter_node ? c.inter_bandwidth : c.intra_bandwidth;
        const double lat = a.inter_node ? c.inter_latency : c.intra_latency;
        EXPECT_NEAR(b.seconds - lat, (a.inter_node ? 2.0 : 1.0) * (a.seconds - lat), 1e-12 * bw);
      }
    EXPECT_GT(inter, 0);
  }
}

TEST(CostSchedules, AllGatherAndHeadParallel) {
  const ClusterSpec c = toy_cluster(1, 2);
  Workload w = toy_workload(4, 1, 1, 1);
  cost::Context ctx{&c, &w, 2};
  // All-gather K, V: block 16 bytes, 1 hop = 2 s; rank 1 then computes 4 + 3 = 7 pairs → 9 s.
  PassEstimate p = cost::simulate(cost::allgather_schedule(ctx, kCausalContiguous, false));
  EXPECT_DOUBLE_EQ(p.seconds, 9.0);
  EXPECT_EQ(p.bytes_per_device, 16);
  {  // Backward: gather 2 s; rank 1 computes 2.5·(4 + 3) = 17.5 s in one call per non-empty
     // block (2 calls; rank 0 has 1); reduce-scatter of dK, dV (2·2·4 = 16 bytes) 2 s.
    ClusterSpec cb = c;
    cost::Context ctx_b{&cb, &w, 2};
    EXPECT_DOUBLE_EQ(cost::simulate(cost::allgather_schedule(ctx_b, kCausalContiguous, true)).seconds, 21.5);
    cb.kernel_call_seconds_backward = 0.5;
    EXPECT_DOUBLE_EQ(cost::simulate(cost::allgather_schedule(ctx_b, kCausalContiguous, true)).seconds, 22.5);
  }
  // Ulysses, H = H_kv = 2, s = 2: b_q = b_kv = 4 elements, r = 4. Causal S = 4 has 10 pairs,
  // 1 head per rank → 10 s. a2a #1 of (b_q + 2·b_kv)·β = 48 bytes moves half = 24 bytes = 3 s;
  // a2a #2 of (O, lse) = 4·4 + 4·4 = 32 bytes moves 16 = 2 s. Total 15 s, 24 + 16 = 40 bytes.
  w = toy_workload(4, 2, 2, 1);
  ctx.workload = &w;
  p = cost::simulate(cost::head_parallel_schedule(ctx, 10, false, false, 2, 2));
  EXPECT_DOUBLE_EQ(p.seconds, 15.0);
  EXPECT_EQ(p.bytes_per_device, 40);
  // Ulysses backward from the saved context (DeepSpeed's): a2a #1 dO·β = 16 → 8 bytes = 1 s;
  // a2a #2 (dQ, dK, dV)·4 = 48 → 24 bytes = 3 s; compute 2.5·10 = 25 s. Total 29 s, 32 bytes.
  p = cost::simulate(cost::head_parallel_schedule(ctx, 10, true, false, 2, 2));
  EXPECT_DOUBLE_EQ(p.seconds, 29.0);
  EXPECT_EQ(p.bytes_per_device, 32);
  // TP (attention-only): all-gather Q, K, V = (4 + 8)·4 = 48 bytes, 1 hop = 6 s; reduce-scatter
  // (O, lse) = 32 bytes = 4 s; compute 10 s. Total 20 s, (P−1)·(48 + 32) = 80 bytes.
  p = cost::simulate(cost::head_parallel_schedule(ctx, 10, false, true, 2, 2));
  EXPECT_DOUBLE_EQ(p.seconds, 20.0);
  EXPECT_EQ(p.bytes_per_device, 80);
  // TP with a model width (Megatron SP): X block = B·s·h·β = 1·2·6·4 = 48 bytes; AG 6 s +
  // RS 6 s + 10 s = 22 s, 2·(P−1)·48 = 96 bytes.
  w.model_width = 6;
  p = cost::simulate(cost::head_parallel_schedule(ctx, 10, false, true, 2, 2));
  EXPECT_DOUBLE_EQ(p.seconds, 22.0);
  EXPECT_EQ(p.bytes_per_device, 96);
}

TEST(CostSchedules, DistFlashCoversTheCausalBlocksInHalfTheSteps) {
  // P = 4, one token per rank, causal: pairs[i][j] = 1 for j ≤ i (10 blocks). Steps t = 0..2:
  // t0 four diagonals; t1 (1,0), (2,1), (3,2) locally + rank 0 helps with (3,0); t2 (2,0), (3,1).
  const ClusterSpec c = toy_cluster(1, 4);
  const Workload w = toy_workload(4, 1, 1, 1);
  const cost::Context ctx{&c, &w, 4};
  std::vector<double> pairs(16, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) pairs[i * 4 + j] = 1;
  const cost::Schedule s = cost::distflash_schedule(ctx, pairs, false);
  double total = 0;
  for (const auto& r : s.ranks) {
    ASSERT_EQ(r.compute.size(), 3u);
    for (double x : r.compute) {
      EXPECT_LE(x, 1.0);
      total += x;
    }
  }
  EXPECT_DOUBLE_EQ(total, 10.0);
  EXPECT_DOUBLE_EQ(s.ranks[0].compute[1], 1.0);  // the helper
  EXPECT_DOUBLE_EQ(s.ranks[1].compute[2], 0.0);  // idle at t = P/2
}

TEST(CostMask, PairMatrixMatchesBruteForce) {
  const std::int64_t S = 24;
  const int P = 3;
  for (MaskType type : {MaskType::Causal, MaskType::SlidingWindow, MaskType::CausalDocument}) {
    const Mask m = make_benchmark_mask(type, S);
    const ResolvedMask rm(m, S, S);
    const SequenceLayout layout = make_layout(LayoutKind::Striped, P, S, m);
    const std::vector<double> pairs = visible_pair_matrix(rm, layout, 2.0);
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < P; ++j) {
        double count = 0;
        for (std::int64_t q : layout.positions[i])
          for (std::int64_t k : layout.positions[j]) count += rm.visible(q, k) ? 1 : 0;
        EXPECT_DOUBLE_EQ(pairs[i * P + j], 2.0 * count) << to_string(type) << " " << i << "," << j;
      }
  }
}

TEST(CostMask, TileGranularWorkCountsPartialTilesWhole) {
  // Causal S = 8 on one rank: 36 visible pairs. With 4×4 tiles: (q 0-3, k 0-3) partial → 16,
  // (q 0-3, k 4-7) empty → 0, (q 4-7, k 0-3) full → 16, (q 4-7, k 4-7) partial → 16: 48.
  const ResolvedMask rm(Mask::causal_mask(), 8, 8);
  const SequenceLayout one = make_layout(LayoutKind::Contiguous, 1, 8);
  EXPECT_DOUBLE_EQ(visible_pair_matrix(rm, one)[0], 36.0);
  EXPECT_DOUBLE_EQ(visible_pair_matrix(rm, one, 1.0, 4, 4)[0], 48.0);
  // Tiles of one row and one key are exact.
  EXPECT_DOUBLE_EQ(visible_pair_matrix(rm, one, 1.0, 1, 1)[0], 36.0);
  // The kernel time follows: with tiles the causal block costs 48/36 of the exact count.
  ClusterSpec c = toy_cluster(1, 1);
  Workload w = toy_workload(8, 1, 1, 1);
  w.mask = Mask::causal_mask();
  const double exact = estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds;
  c.kernel_tile_q = c.kernel_tile_kv = 4;
  const Estimate tiled = estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous});
  EXPECT_DOUBLE_EQ(exact, 36.0);  // 36 pairs · 4 flop / 4 flop/s
  EXPECT_DOUBLE_EQ(tiled.seconds, 48.0);
  EXPECT_DOUBLE_EQ(tiled.flops, 144.0);  // FLOPs stay on the mask area: 4·36

  // Per-element masking: the two diagonal tiles are Partial, 4 rows each → 8 Partial rows.
  std::vector<double> rows;
  visible_pair_matrix(rm, one, 1.0, 4, 4, &rows);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0], 8.0);
  // At 0.5 s per Partial row (B = H = 1) the forward costs 48 + 8·0.5 = 52 s; the backward has
  // its own rate: 2.5·48 s of area + 8·0.25 s.
  c.partial_row_seconds = 0.5;
  EXPECT_DOUBLE_EQ(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 52.0);
  c.partial_row_seconds_backward = 0.25;
  w.pass = PassKind::Backward;
  c.memory_bandwidth = 1e30;
  EXPECT_NEAR(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 2.5 * 48.0 + 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).flops, 2.5 * 144.0);
  // The backward counts its own kernel's tiles: 8 × 8 covers the whole causal block (64 pairs,
  // one Partial tile of 8 rows): 2.5·64 + 8·0.25 = 162 s; the forward keeps 4 × 4 (52 s).
  c.kernel_tile_q_backward = c.kernel_tile_kv_backward = 8;
  EXPECT_NEAR(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 2.5 * 64.0 + 2.0, 1e-9);
  w.pass = PassKind::Forward;
  EXPECT_DOUBLE_EQ(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 52.0);
  // The part that grows with D (partial_row_seconds_per_dim[_backward]): at D = 1 another 0.25 s
  // per forward row (8 rows: 54 s) and 0.5 s per backward row (2.5·64 + 8·0.75 = 166 s); at
  // D = 2 twice that per row (and the area twice: 2·48 + 8·(0.5 + 0.5) = 104 s forward).
  ASSERT_EQ(w.D, 1);
  c.partial_row_seconds_per_dim = 0.25;
  c.partial_row_seconds_per_dim_backward = 0.5;
  EXPECT_NEAR(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 54.0, 1e-9);
  w.pass = PassKind::Backward;
  EXPECT_NEAR(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 2.5 * 64.0 + 6.0, 1e-9);
  w.pass = PassKind::Forward;
  w.D = 2;
  EXPECT_NEAR(estimate(c, w, {StrategyKind::Ring, LayoutKind::Contiguous}).seconds, 2 * 48.0 + 8.0, 1e-9);
  EXPECT_DOUBLE_EQ(c.partial_row_cost(true, 2), 0.25 + 2 * 0.5);
  c.partial_row_seconds_per_dim_backward = -1;
  EXPECT_THROW(c.validate(), Error);
}

// Packing and unpacking around the collectives are memory-bound copies (read + write at the copy
// bandwidth): each Ulysses all-to-all copies its whole buffer twice, headpar copies its block and
// its heads of the P gathered blocks (one block's worth; likewise around the reduce-scatter),
// all-gather reorders the P gathered K, V blocks. One rank copies nothing.
TEST(CostSchedules, CollectiveStagingCopies) {
  ClusterSpec c = toy_cluster(1, 2);
  c.memory_bandwidth = 16;  // bytes/s of read + write: a copy of b bytes takes 2b/16 s
  Workload w = toy_workload(4, 2, 2, 1);
  cost::Context ctx{&c, &w, 2};
  // Ulysses forward (see AllGatherAndHeadParallel, 15 s without copies): a2a #1 of 48 bytes
  // copied twice = 2·2·48/16 = 12 s, a2a #2 of 32 bytes = 8 s → 35 s.
  EXPECT_DOUBLE_EQ(cost::simulate(cost::head_parallel_schedule(ctx, 10, false, false, 2, 2)).seconds, 35.0);
  // headpar forward (20 s without copies): 2·48 = 96 bytes → 12 s, 2·32 = 64 → 8 s.
  EXPECT_DOUBLE_EQ(cost::simulate(cost::head_parallel_schedule(ctx, 10, false, true, 2, 2)).seconds, 40.0);
  // One rank: the kernel alone on both heads (2 × 10 s), for both.
  const cost::Context one{&c, &w, 1};
  EXPECT_DOUBLE_EQ(cost::simulate(cost::head_parallel_schedule(one, 10, false, true, 2, 4)).seconds, 20.0);
  EXPECT_DOUBLE_EQ(cost::simulate(cost::head_parallel_schedule(one, 10, false, false, 2, 4)).seconds, 20.0);
  // All-gather forward, H = 1 (9 s without copies): P·16 = 32 bytes reordered → 4 s.
  w = toy_workload(4, 1, 1, 1);
  EXPECT_DOUBLE_EQ(cost::simulate(cost::allgather_schedule(ctx, kCausalContiguous, false)).seconds, 13.0);
}

TEST(CostModel, RanksBalancedLayoutsAndReportsInfeasible) {
  ClusterSpec c = toy_cluster(1, 2);
  c.matmul_flops = 1e9;
  c.intra_bandwidth = 1e12;
  Workload w = toy_workload(64, 2, 2, 8);
  w.mask = Mask::causal_mask();
  w.pass = PassKind::ForwardBackward;
  const Estimate contiguous = estimate(c, w, {StrategyKind::Burst, LayoutKind::Contiguous});
  const Estimate zigzag = estimate(c, w, {StrategyKind::Burst, LayoutKind::Zigzag});
  ASSERT_TRUE(contiguous.feasible && zigzag.feasible);
  EXPECT_GT(contiguous.balance, 1.4);  // 2 ranks, causal: rank 1 does 3/4 of the work
  EXPECT_LT(zigzag.balance, 1.05);
  EXPECT_LT(zigzag.seconds, contiguous.seconds);
  // FLOPs from the mask area: 64·65/2 = 2080 pairs · 4·8·2 = 133120 fwd, ×3.5 fwd+bwd = 465920.
  EXPECT_DOUBLE_EQ(zigzag.flops, 465920.0);
  // Ulysses cannot split 3 heads over 2 ranks; distflash cannot express a full mask.
  Workload odd = toy_workload(64, 3, 3, 8);
  EXPECT_FALSE(estimate(c, odd, {StrategyKind::Ulysses, LayoutKind::Contiguous}).feasible);
  Workload full = toy_workload(64, 2, 2, 8);
  const Estimate df = estimate(c, full, {StrategyKind::DistFlash, LayoutKind::Contiguous});
  EXPECT_FALSE(df.feasible);
  EXPECT_NE(df.reason.find("causal"), std::string::npos) << df.reason;
  // Memory capacity: 1 byte is never enough.
  c.memory_capacity = 1;
  const Estimate mem = estimate(c, w, {StrategyKind::Ring, LayoutKind::Zigzag});
  EXPECT_FALSE(mem.feasible);
  EXPECT_NE(mem.reason.find("capacity"), std::string::npos);
  // Ranking: feasible first, sorted by seconds.
  c.memory_capacity = 0;
  const std::vector<Estimate> ranked = rank_strategies(c, w);
  for (std::size_t i = 1; i < ranked.size(); ++i)
    if (ranked[i].feasible) {
      EXPECT_TRUE(ranked[i - 1].feasible);
      EXPECT_LE(ranked[i - 1].seconds, ranked[i].seconds);
    }
}

// The model's bytes per device must equal the plan the strategies execute (Plan::make, whose
// per-rank bytes the strategies' counters are tested against) — two independent derivations —
// and its schedules must have the plan's steps.
TEST(CostModel, BytesAndStepsMatchThePlanTheStrategiesExecute) {
  struct Setup {
    int nodes, per_node;
    std::int64_t H, H_kv;
  };
  for (const Setup& st : {Setup{1, 2, 4, 4}, Setup{1, 4, 4, 2}, Setup{2, 2, 4, 4}, Setup{1, 3, 6, 3}}) {
    ClusterSpec c = toy_cluster(st.nodes, st.per_node);
    const int P = c.devices();
    // Sliding window and documents on the contiguous layout leave blocks empty: the mask-aware
    // schedule's bytes (docs/strategies.md § Mask-aware rings).
    for (MaskType mt :
         {MaskType::Causal, MaskType::Full, MaskType::CausalDocument, MaskType::SlidingWindowCausal}) {
      Workload w = toy_workload(24 * P, st.H, st.H_kv, 8);
      w.mask = make_benchmark_mask(mt, w.S_global);
      w.pass = PassKind::ForwardBackward;
      std::vector<Candidate> cands = default_candidates(c);
      for (const Candidate& base : default_candidates(c))
        if (base.strategy == StrategyKind::Usp) {  // Burst-USP: burst's query-side ring backward
          cands.push_back(base);
          cands.back().usp_ring = UspRing::Burst;
        }
      for (const Candidate& cand : cands) {
        const Estimate e = estimate(c, w, cand);
        if (!e.feasible) continue;
        if (cand.strategy == StrategyKind::Usp) {
          EXPECT_EQ(e.backward_side, cand.usp_ring == UspRing::Burst ? "query" : "kv");
        }
        DistConfig cfg;
        cfg.strategy = cand.strategy;
        cfg.layout = cand.layout;
        cfg.usp_ring = cand.usp_ring;
        const ProblemShape shape{w.B, w.S_global, w.H, w.H_kv, w.D};
        const Plan plan = Plan::make(cfg, shape, w.mask, P, c.devices_per_node);
        auto max_of = [](const std::vector<std::int64_t>& v) {
          return v.empty() ? std::int64_t{0} : *std::max_element(v.begin(), v.end());
        };
        const std::string what = std::string(to_string(cand.strategy)) + "/" + to_string(cand.layout) +
                                 " P=" + std::to_string(P) + " " + to_string(mt);
        EXPECT_EQ(e.forward.bytes_per_device, max_of(plan.forward().bytes_sent)) << what;
        EXPECT_EQ(e.backward.bytes_per_device, max_of(plan.backward().bytes_sent)) << what;
        // The cost model times the steps the Plan lays out (plan_ring.h, plan_strategies.h), not a
        // copy of its own: for every strategy the same number of steps, and for the step-structured
        // passes (burst and ring, full and mask-aware; distflash) the same bytes on every rank.
        const bool ring_family = cand.strategy == StrategyKind::Burst || cand.strategy == StrategyKind::Ring;
        const std::vector<double> pairs =
            visible_pair_matrix(ResolvedMask(w.mask, w.S_global, w.S_global), plan.layout());
        for (bool backward : {false, true}) {
          const PassPlan& pp = backward ? plan.backward() : plan.forward();
          const PassEstimate& pe = backward ? e.backward : e.forward;
          std::size_t steps = 1;  // collectives around one local step
          if (ring_family)        // the plan's ring steps; its "final hop" is an end feed here
            steps = static_cast<std::size_t>(
                std::count_if(pp.steps.begin(), pp.steps.end(),
                              [](const PlanStep& s) { return s.payload != "final hop"; }));
          else if (cand.strategy == StrategyKind::DistFlash)
            steps = static_cast<std::size_t>(strategies::make_distflash_schedule(
                                                 ResolvedMask(w.mask, w.S_global, w.S_global), w.S_global, P)
                                                 .steps);
          else if (cand.strategy == StrategyKind::Usp)
            steps = static_cast<std::size_t>(P / e.ulysses_degree);  // the ring across the groups
          EXPECT_EQ(pe.steps.size(), steps) << what << (backward ? " bwd" : " fwd");
          if (!ring_family && cand.strategy != StrategyKind::DistFlash) continue;
          const cost::Context ctx{&c, &w, P};
          const bool query_side = backward && plan.backward_side() == BackwardSide::QuerySide;
          const cost::Schedule sched = ring_family ? cost::ring_schedule(ctx, pairs, P, backward, query_side,
                                                                         cand.double_ring, w.H, w.H_kv, 1)
                                                   : cost::distflash_schedule(ctx, pairs, backward);
          ASSERT_EQ(sched.ranks.size(), pp.bytes_sent.size()) << what;
          for (int g = 0; g < P; ++g)
            EXPECT_EQ(static_cast<std::int64_t>(sched.ranks[static_cast<std::size_t>(g)].bytes_sent),
                      pp.bytes_sent[static_cast<std::size_t>(g)])
                << what << (backward ? " bwd" : " fwd") << " rank " << g;
        }
        // bf16: burst and ring move Q, K, V, dO in 2 bytes and keep rows and partials fp32 (the
        // others move fp32 whatever the dtype, docs/strategies.md § Bytes per dtype).
        if (cand.strategy != StrategyKind::Burst && cand.strategy != StrategyKind::Ring) continue;
        Workload w16 = w;
        w16.bytes_per_element = 2;
        ProblemShape shape16 = shape;
        shape16.dtype = DType::BF16;
        const Estimate e16 = estimate(c, w16, cand);
        const Plan plan16 = Plan::make(cfg, shape16, w.mask, P, c.devices_per_node);
        EXPECT_EQ(e16.forward.bytes_per_device, max_of(plan16.forward().bytes_sent)) << what << " bf16";
        EXPECT_EQ(e16.backward.bytes_per_device, max_of(plan16.backward().bytes_sent)) << what << " bf16";
        EXPECT_EQ(2 * e16.forward.bytes_per_device, e.forward.bytes_per_device) << what;
        // bf16 write-ring partials (DistConfig::partials_dtype): the write payloads halve too.
        Workload w16p = w16;
        w16p.partial_bytes_per_element = 2;
        DistConfig cfg16p = cfg;
        cfg16p.partials_dtype = DType::BF16;
        const Estimate e16p = estimate(c, w16p, cand);
        const Plan plan16p = Plan::make(cfg16p, shape16, w.mask, P, c.devices_per_node);
        EXPECT_EQ(e16p.backward.bytes_per_device, max_of(plan16p.backward().bytes_sent))
            << what << " bf16 partials";
        EXPECT_EQ(e16p.forward.bytes_per_device, e16.forward.bytes_per_device) << what;
        EXPECT_LE(e16p.backward.bytes_per_device, e16.backward.bytes_per_device) << what;  // max over ranks
      }
    }
  }
}

}  // namespace
}  // namespace burst
