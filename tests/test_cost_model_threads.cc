// Ranks × threads in the cost model (cost_model.h: kernel_thread_efficiency, cluster_for_split,
// rank_thread_splits): pure, no timing. The item counts follow the kernels' parallel loops; the
// recommendation must be the split whose scored estimate is fastest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "burst/cost_model.h"
#include "burst/error.h"
#include "cost_test_util.h"

namespace burst {
namespace {

Workload causal_workload(std::int64_t S, std::int64_t H, std::int64_t H_kv, std::int64_t D) {
  Workload w = test::toy_workload(S, H, H_kv, D);
  w.mask = Mask::causal_mask();
  w.pass = PassKind::ForwardBackward;
  return w;
}

TEST(CostThreads, KernelItemsDealtToThreads) {
  ClusterSpec c = test::toy_cluster(1, 1);
  const Workload w = causal_workload(32768, 8, 8, 64);
  // Forward: B·H·⌈(S/P)/96⌉ q tiles; P = 2: 8·171 = 1368 items.
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 2, 1, false), 1.0);
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 2, 8, false), 1368.0 / (8 * 171));
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 1, 16, false), 8.0 * 342 / (16 * 171));
  // The spec's forward tile replaces the default.
  c.kernel_tile_q = 128;
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 2, 16, false), 1.0);  // 8·128 = 1024 items
  // Backward: B·H_kv = 8 (b, kv-head) items, each in kv chunks of at most 1024 rows (and at least
  // 32 items): P = 8, 4096 rows = 43 kv tiles of 96 → 4 chunks of 11 tiles: 32 items.
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 8, 16, true), 1.0);
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 8, 3, true), 32.0 / 33.0);
  // P = 1: 32 chunks wanted, but their partial dQ (64 MiB each) caps them at 8: 342 kv tiles in
  // chunks of 43 → 8 chunks, 64 items.
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 1, 16, true), 1.0);
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 1, 3, true), 64.0 / 66.0);
  // Few kv rows per rank: 64 rows = one kv tile, no chunking: 8 items for 16 threads.
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 512, 16, true), 0.5);
  // Two KV heads, P = 8: 16 chunks wanted, but none shorter than 1024 rows: 4 chunks, 8 items.
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, causal_workload(32768, 8, 2, 64), 8, 16, true), 0.5);
  // P = 16: 2048 rows, 2 chunks of 1024: 16 items; P = 32: 1024 rows, not cut: 8 items.
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 16, 16, true), 1.0);
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 32, 16, true), 0.5);
  // A measured scaling lowers it where it is below the item count's share, never raises it.
  c.thread_scaling_backward = {1.0, 0.9, 0.9, 0.8};
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 8, 4, true), 0.8);
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 512, 2, true), 0.9);
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 8, 16, true), 1.0);  // no entry for 16 threads
  EXPECT_DOUBLE_EQ(kernel_thread_efficiency(c, w, 512, 3, true), std::min(8.0 / 9.0, 0.9));
}

TEST(CostThreads, SplitClusterScalesKernelRatesOnly) {
  ClusterSpec c = test::toy_cluster(1, 16);
  c.partial_row_seconds = 1e-6;
  c.partial_row_seconds_backward = 2e-6;
  const Workload w = causal_workload(32768, 8, 8, 64);
  const ClusterSpec s = cluster_for_split(c, w, 1, 16);
  EXPECT_EQ(s.devices(), 1);
  EXPECT_EQ(s.compute_slots_per_node, 0);
  EXPECT_DOUBLE_EQ(kernel_rate(s, true, false), kernel_rate(c, true, false) * 16);  // 64 items
  EXPECT_DOUBLE_EQ(kernel_rate(s, false, false),
                   kernel_rate(c, false, false) * 16 * kernel_thread_efficiency(c, w, 1, 16, false));
  EXPECT_DOUBLE_EQ(s.partial_row_cost(true, 64), 2e-6 / 16);
  EXPECT_DOUBLE_EQ(s.intra_bandwidth, c.intra_bandwidth);
  EXPECT_DOUBLE_EQ(s.memory_bandwidth, c.memory_bandwidth);
  EXPECT_THROW(cluster_for_split(c, w, 0, 16), Error);
}

/// The recommendation (front) is the fastest scored split, every split's seconds is its best
/// candidate's estimate on cluster_for_split, and the splits are the divisors of the cores.
void expect_consistent(const ClusterSpec& per_core, const Workload& w, int cores,
                       const std::vector<RankThreadSplit>& splits) {
  ASSERT_FALSE(splits.empty());
  int divisors = 0;
  for (int r = 1; r <= cores; ++r) divisors += cores % r == 0;
  EXPECT_EQ(static_cast<int>(splits.size()), divisors);
  for (const RankThreadSplit& s : splits) {
    EXPECT_EQ(s.ranks_per_node * s.threads, cores);
    EXPECT_LE(splits.front().seconds, s.seconds);
    const ClusterSpec c = cluster_for_split(per_core, w, s.ranks_per_node, s.threads);
    double best = std::numeric_limits<double>::infinity();
    for (const Estimate& e : rank_strategies(c, w))
      if (e.feasible) best = std::min(best, e.seconds);
    EXPECT_DOUBLE_EQ(s.seconds, best) << s.ranks_per_node << " x " << s.threads;
    if (s.best.feasible) { EXPECT_DOUBLE_EQ(estimate(c, w, s.best.candidate).seconds, s.seconds); }
  }
}

TEST(CostThreads, SlowLinksRecommendOneRankOfAllCores) {
  ClusterSpec c = test::toy_cluster(1, 16);
  c.intra_bandwidth = 1e-3;  // any message costs more than the whole computation
  c.inter_bandwidth = 1e-3;
  Workload w = causal_workload(64, 4, 4, 4);
  const auto splits = rank_thread_splits(c, w, 16);
  expect_consistent(c, w, 16, splits);
  EXPECT_EQ(splits.front().ranks_per_node, 1);  // nothing moves at P = 1
}

TEST(CostThreads, FewKernelItemsRecommendRanksOverThreads) {
  ClusterSpec c = test::toy_cluster(1, 16);
  c.intra_bandwidth = 1e30;  // free links: only the kernels' thread efficiency matters
  c.inter_bandwidth = 1e30;
  Workload w = causal_workload(64, 1, 1, 4);  // backward: 8 items at most; forward: one q tile
  const auto splits = rank_thread_splits(c, w, 16);
  expect_consistent(c, w, 16, splits);
  EXPECT_GT(splits.front().ranks_per_node, 1);
  const auto one = std::find_if(splits.begin(), splits.end(),
                                [](const RankThreadSplit& s) { return s.ranks_per_node == 1; });
  ASSERT_NE(one, splits.end());
  EXPECT_GT(one->seconds, splits.front().seconds);
  // A candidate list restricts the scoring to it.
  const std::vector<Candidate> burst = {
      {StrategyKind::Burst, LayoutKind::Zigzag, 0, BackwardSide::Auto, true}};
  for (const RankThreadSplit& s : rank_thread_splits(c, w, 16, burst))
    if (s.best.feasible) { EXPECT_EQ(s.best.candidate.strategy, StrategyKind::Burst); }
}

}  // namespace
}  // namespace burst
