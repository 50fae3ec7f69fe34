// Tests of the cost model: every formula against a hand computation (arithmetic in the
// comments), the step simulator on hand-made schedules, each strategy's schedule on tiny
// problems whose answer can be worked out on paper, and the mask-driven pair matrix against a
// brute-force count.
// This file: the formulas and the step simulator; tests/test_cost_model_schedules.cc (same
// binary): the strategies' schedules, the pair matrix and the model's ranking and bytes.
#include <gtest/gtest.h>

#include "burst/cost_model.h"
#include "burst/error.h"
#include "cost_model_internal.h"
#include "cost_test_util.h"

namespace burst {
namespace {

using test::toy_cluster;
using test::toy_workload;

TEST(CostFormulas, AttentionFlops) {
  // 4·D·H·B·pairs = 4·4·3·2·10 = 960; backward 2.5× = 2400.
  EXPECT_DOUBLE_EQ(attention_flops(10, 2, 3, 4, false), 960.0);
  EXPECT_DOUBLE_EQ(attention_flops(10, 2, 3, 4, true), 2400.0);
}

TEST(CostFormulas, KernelSeconds) {
  ClusterSpec c = toy_cluster(1, 1);
  c.matmul_flops = 1e12;
  c.attention_efficiency_forward = 0.5;
  c.attention_efficiency_backward = 0.25;
  c.kernel_call_seconds = 1e-6;
  // 1e-6 + 1e9 / (1e12·0.5) = 1e-6 + 2e-3; backward 1e-6 + 1e9 / 2.5e11 = 1e-6 + 4e-3.
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, false), 0.002001);
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, true), 0.004001);
  EXPECT_EQ(kernel_seconds(c, 0, false), 0.0);  // no call, no overhead
  c.kernel_call_seconds_backward = 3e-6;        // backward's own overhead: 3e-6 + 4e-3
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, true), 0.004003);
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, false), 0.002001);
}

TEST(CostFormulas, KernelSecondsWithBf16Operands) {
  ClusterSpec c = toy_cluster(1, 1);
  c.matmul_flops = 1e12;
  c.attention_efficiency_backward = 0.5;
  c.bf16_speedup_forward = 1.6;
  c.bf16_speedup_backward = 2.0;
  // forward 1e9 / 1e12 = 1e-3 in fp32, / 1.6e12 = 6.25e-4 with bf16 operands; backward 1e9 /
  // 5e11 = 2e-3, / 1e12 = 1e-3.
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, false, false), 1e-3);
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, false, true), 6.25e-4);
  EXPECT_DOUBLE_EQ(kernel_seconds(c, 1e9, true, true), 1e-3);
  EXPECT_DOUBLE_EQ(kernel_rate(c, true, false), 5e11);
  // The schedule charges the Workload's arithmetic: one rank, 4 pairs of D = 1 = 16 flop at
  // 4 flop/s = 4 s in fp32, 2.5 s at 1.6×; bytes depend only on bytes_per_element.
  ClusterSpec toy = toy_cluster(1, 1);
  toy.bf16_speedup_forward = 1.6;
  Workload w = toy_workload(2, 1, 1, 1);
  const Estimate e32 =
      estimate(toy, w, Candidate{StrategyKind::Ring, LayoutKind::Contiguous, 0, BackwardSide::Auto, true});
  w.bf16_arithmetic = true;
  const Estimate e16 =
      estimate(toy, w, Candidate{StrategyKind::Ring, LayoutKind::Contiguous, 0, BackwardSide::Auto, true});
  EXPECT_DOUBLE_EQ(e32.forward.compute_seconds, 4.0);
  EXPECT_DOUBLE_EQ(e16.forward.compute_seconds, 2.5);
  EXPECT_EQ(e16.bytes_per_device, e32.bytes_per_device);
  toy.bf16_speedup_backward = 0;
  EXPECT_THROW(toy.validate(), Error);
}

TEST(CostFormulas, KernelTimeFit) {
  // Exact data t = 1e-4 + f / 1e11 at four sizes: the fit recovers both numbers.
  std::vector<std::pair<double, double>> pts;
  for (double f : {1e8, 4e8, 1.6e9, 6.4e9}) pts.emplace_back(f, 1e-4 + f / 1e11);
  KernelFit fit = fit_kernel_time(pts);
  EXPECT_NEAR(fit.rate, 1e11, 1e11 * 1e-9);
  EXPECT_NEAR(fit.overhead, 1e-4, 1e-12);
  // Relative weighting: +10 % noise on the longest call moves the overhead far less than an
  // unweighted fit would (which would put the intercept below 0 here).
  pts.back().second *= 1.1;
  fit = fit_kernel_time(pts);
  EXPECT_GT(fit.overhead, 0.5e-4);
  EXPECT_LT(fit.overhead, 1.5e-4);
  // A negative intercept is clamped: t = f / 1e11 − 1e-5 → overhead 0, slope through the origin.
  pts = {{1e9, 1e-2 - 1e-5}, {2e9, 2e-2 - 1e-5}};
  fit = fit_kernel_time(pts);
  EXPECT_EQ(fit.overhead, 0.0);
  EXPECT_NEAR(fit.rate, 1e11, 1e9);
  // Time that does not grow with the work, too few points, non-positive values: refused.
  EXPECT_THROW(fit_kernel_time({{1e9, 2e-2}, {2e9, 1e-2}}), Error);
  EXPECT_THROW(fit_kernel_time({{1e9, 1e-2}}), Error);
  EXPECT_THROW(fit_kernel_time({{1e9, 1e-2}, {0, 1e-2}}), Error);
}

TEST(CostFormulas, LinkAndCollectives) {
  ClusterSpec c = toy_cluster(2, 2);
  c.intra_latency = 1e-6;
  c.intra_bandwidth = 1e9;
  c.inter_latency = 5e-6;
  c.inter_bandwidth = 1e8;
  // α + bytes/β: 1e-6 + 1e6/1e9 = 0.001001; inter 5e-6 + 1e6/1e8 = 0.010005.
  EXPECT_DOUBLE_EQ(link_seconds(c, 1e6, false), 0.001001);
  EXPECT_DOUBLE_EQ(link_seconds(c, 1e6, true), 0.010005);
  EXPECT_EQ(link_seconds(c, 0, true), 0.0);
  // Ring all-gather, P = 4: 3·(1e-6 + 1e-3) = 0.003003.
  EXPECT_NEAR(all_gather_seconds(c, 4, 1e6, false), 0.003003, 1e-15);
  EXPECT_EQ(all_gather_seconds(c, 1, 1e6, false), 0.0);
  // All-to-all, P = 4, 2 per node, 4e6 bytes: intra share 1/4·4e6 = 1e6 → 1·1e-6 + 1e-3;
  // inter share 2/4·4e6 = 2e6 → 2·5e-6 + 2e6/1e8 = 0.02001. Sum 0.021011.
  EXPECT_NEAR(all_to_all_seconds(c, 4, 2, 4e6), 0.021011, 1e-15);
}

TEST(CostFormulas, ValidationNamesTheField) {
  ClusterSpec c = toy_cluster(1, 1);
  c.matmul_flops = 0;
  try {
    c.validate();
    FAIL() << "expected Error";
  } catch (const Error& e) { EXPECT_NE(e.message().find("matmul_flops"), std::string::npos) << e.what(); }
  Workload w = toy_workload(8, 3, 2, 1);
  EXPECT_THROW(w.validate(), Error);  // H % H_kv ≠ 0
  EXPECT_EQ(pass_from_string("fwd_bwd"), PassKind::ForwardBackward);
  EXPECT_THROW(pass_from_string("sideways"), Error);
}

TEST(CostSimulator, HandMadeSchedule) {
  cost::Schedule s;
  s.pre_seconds = 0.1;
  s.post_seconds = 0.2;
  s.ranks.resize(2);
  s.ranks[0].compute = {1, 2};
  s.ranks[1].compute = {3, 1};
  s.ranks[0].feed = {cost::Feed{}, cost::Feed{1, 0, 0.5, false}};
  s.ranks[1].feed = {cost::Feed{}, cost::Feed{0, 0, 4.0, true}};
  s.ranks[0].bytes_sent = 10;
  s.ranks[1].bytes_sent = 30;
  s.collective_bytes = 5;
  // start r0,1 = max(0.1 + 1, 0.1 + 0.5) = 1.1; start r1,1 = max(0.1 + 3, 0.1 + 4) = 4.1.
  // end r0 = 3.1, end r1 = 5.1 → 5.1 + 0.2 = 5.3. Critical rank 1 is busy 4 → exposed 1.3.
  PassEstimate p = cost::simulate(s);
  EXPECT_DOUBLE_EQ(p.seconds, 5.3);
  EXPECT_DOUBLE_EQ(p.compute_seconds, 4.0);
  EXPECT_NEAR(p.exposed_comm_seconds, 1.3, 1e-12);
  EXPECT_DOUBLE_EQ(p.balance, 4.0 / 3.5);
  EXPECT_EQ(p.bytes_per_device, 35);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(p.steps[0].compute_max, 3.0);
  EXPECT_DOUBLE_EQ(p.steps[0].compute_mean, 2.0);
  EXPECT_DOUBLE_EQ(p.steps[0].transfer, 4.0);
  EXPECT_TRUE(p.steps[0].inter_node);
  // An end feed from rank 1's finish of step 1 (5.1) taking 1 s delays rank 0 to 6.1 → 6.3;
  // rank 0 (busy 3) becomes critical: exposed 3.3.
  s.ranks[0].end_feeds.push_back(cost::Feed{1, 1, 1.0, false});
  p = cost::simulate(s);
  EXPECT_DOUBLE_EQ(p.seconds, 6.3);
  EXPECT_NEAR(p.exposed_comm_seconds, 3.3, 1e-12);
}

// One sender's messages on one link go out one after the other: rank 0 posts a 3 s inter-node
// message at each of its steps 0 and 1 (compute 0.5 s), to ranks 1 and 2. Overlapping, the
// second would arrive at 0.5 + 3 = 3.5; serialised it leaves when the first arrives (3) and
// arrives at 6. A message on rank 0's intra-node link is not held up by the inter-node ones.
TEST(CostSimulator, OneSendersMessagesOnALinkAreSerialised) {
  cost::Schedule s;
  s.ranks.resize(3);
  for (auto& r : s.ranks) {
    r.compute = {0.5, 0.5, 0.5};
    r.feed.assign(3, cost::Feed{});
  }
  s.ranks[1].feed[1] = cost::Feed{0, 0, 3.0, true};
  s.ranks[2].feed[2] = cost::Feed{0, 1, 3.0, true};
  PassEstimate p = cost::simulate(s);
  // rank 1: starts step 1 at 3, ends 4; rank 2: starts step 2 at 6, ends 6.5.
  EXPECT_DOUBLE_EQ(p.seconds, 6.5);
  EXPECT_DOUBLE_EQ(p.exposed_comm_seconds, 6.5 - 1.5);
  // The same second message on the intra-node link overlaps the first: 0.5 + 3 + 0.5.
  s.ranks[2].feed[2].inter_node = false;
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 4.0);
  // An end feed queues behind the step feed on the same link: rank 0 finishes step 2 at 1.5 and
  // sends 1 s to rank 1, after the second 3 s message (arrival 6) → 7.
  s.ranks[2].feed[2].inter_node = true;
  s.ranks[1].end_feeds.push_back(cost::Feed{0, 2, 1.0, true});
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 7.0);
}

// RankSchedule::tail (the ring backward's second half of the own block): computed after the last
// step, beside the end feeds, which are posted at the last step's finish, not after the tail.
TEST(CostSimulator, TailRunsBesideTheEndFeeds) {
  cost::Schedule s;
  s.ranks.resize(2);
  for (int i = 0; i < 2; ++i) {
    s.ranks[i].compute = {2.0};
    s.ranks[i].feed.assign(1, cost::Feed{});
    s.ranks[i].end_feeds = {cost::Feed{1 - i, 0, 3.0, false}};  // the other's partial, 3 s
  }
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 5.0);  // 2 + 3: nothing hides the trip
  for (auto& r : s.ranks) r.tail = 2.0;
  PassEstimate p = cost::simulate(s);
  EXPECT_DOUBLE_EQ(p.seconds, 5.0);  // the tail hides 2 of the 3 s
  EXPECT_DOUBLE_EQ(p.compute_seconds, 4.0);
  for (auto& r : s.ranks) r.tail = 4.0;
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 6.0);  // longer than the trip: 2 + 4
  // One slot for both: steps at 1/2 end at 4, the partials arrive at 7, the tails (4 s of work
  // each, shared) end at 12.
  s.node = {0, 0};
  s.compute_slots = 1;
  EXPECT_NEAR(cost::simulate(s).seconds, 12.0, 1e-12);
  for (auto& r : s.ranks) r.tail = 1.0;  // tails end at 6, the partials at 7
  EXPECT_NEAR(cost::simulate(s).seconds, 7.0, 1e-12);
}

// A rank whose tail has ended gives its share of the slots back: rank 0 (step 1 s, tail 1 s) and
// rank 1 (step 4 s) on one slot run at 1/2 until rank 0's tail ends at 4; rank 1, 2 s of work
// left, then runs alone and ends at 6 (the slot's total work), not at 8.
TEST(CostSimulator, FinishedTailLendsItsSlot) {
  cost::Schedule s;
  s.ranks.resize(2);
  s.ranks[0].compute = {1.0};
  s.ranks[0].tail = 1.0;
  s.ranks[1].compute = {4.0};
  for (auto& r : s.ranks) r.feed.assign(1, cost::Feed{});
  s.node = {0, 0};
  s.compute_slots = 1;
  const PassEstimate p = cost::simulate(s);
  EXPECT_NEAR(p.seconds, 6.0, 1e-12);
  EXPECT_NEAR(p.compute_seconds, 6.0, 1e-12);  // rank 1's kernel wall time, 2 s of it shared
}

// Ranks sharing cores (processor sharing): two ranks on a node with one compute slot run at half
// speed while both compute, and a rank that waits lends the slot to the other.
TEST(CostSimulator, RanksSharingACoreComputeAtTheirShare) {
  cost::Schedule s;
  s.ranks.resize(2);
  s.ranks[0].compute = {1.0, 1.0};
  s.ranks[1].compute = {0.5, 1.0};
  for (auto& r : s.ranks) r.feed.assign(2, cost::Feed{});
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 2.0);  // no sharing: rank 0 alone 1 + 1
  s.node = {0, 0};
  s.compute_slots = 1;
  // Both at 1/2 until rank 1's 0.5 s step ends at 1; rank 0 then has 0.5 left of step 0 but
  // shares with rank 1's second step again: both at 1/2 — rank 0 ends step 0 at 2, rank 1 its
  // step 1 (1 s of work, 0.5 done by 2) at 3 with rank 0's step 1 (at 1/2 until 3: 0.5 done,
  // then alone) ending at 3.5. Total work 3.5 s on one slot.
  PassEstimate p = cost::simulate(s);
  EXPECT_NEAR(p.seconds, 3.5, 1e-12);
  EXPECT_NEAR(p.compute_seconds, 3.5, 1e-12);  // rank 0's kernel wall time, stretched
  // Rank 1's step 1 waits for a 3 s message from rank 0 posted at its step 0 (intra-node): rank 0
  // computes at 1/2 until rank 1's step 0 ends at 1, then alone: step 0 ends at 1.5, step 1 at
  // 2.5; rank 1 starts step 1 at 3 alone and ends at 4.
  s.ranks[1].feed[1] = cost::Feed{0, 0, 3.0, false};
  EXPECT_NEAR(cost::simulate(s).seconds, 4.0, 1e-12);
  // Two slots: no sharing, the step recurrence's answer: max(2, 3 + 1).
  s.compute_slots = 2;
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 4.0);
  s.ranks[1].feed[1] = cost::Feed{};
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 2.0);
}

// Two senders on one shared inter-node link (a node with one NIC) go out in turn; on links of
// their own they overlap. Ranks 0 and 1 each post a 2 s message at step 0, to ranks 2 and 3.
TEST(CostSimulator, SendersSharingAnInterNodeLinkTakeTurns) {
  cost::Schedule s;
  s.ranks.resize(4);
  for (auto& r : s.ranks) {
    r.compute = {0.5, 0.5};
    r.feed.assign(2, cost::Feed{});
  }
  s.ranks[2].feed[1] = cost::Feed{0, 0, 2.0, true};
  s.ranks[3].feed[1] = cost::Feed{1, 0, 2.0, true};
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 2.5);  // own links: both arrive at 2
  ClusterSpec c;
  c.nodes = 2;
  c.devices_per_node = 2;
  c.inter_links_per_node = 1;
  for (int r = 0; r < 4; ++r) s.inter_link.push_back(c.inter_link_of(r));
  EXPECT_EQ(s.inter_link[0], s.inter_link[1]);
  EXPECT_NE(s.inter_link[1], s.inter_link[2]);
  EXPECT_DOUBLE_EQ(cost::simulate(s).seconds, 4.5);  // the second arrives at 4
  EXPECT_EQ(c.devices_per_inter_link(), 2);
  c.inter_links_per_node = 0;  // one per device: every device its own id
  EXPECT_EQ(c.inter_link_of(1), 1);
  EXPECT_EQ(c.devices_per_inter_link(), 1);
  // Collectives across nodes: the all-to-all's inter share and the all-gather's remote blocks
  // pass k = 2 devices through one link.
  c.inter_bandwidth = 1;
  c.intra_bandwidth = 1e9;
  EXPECT_NEAR(all_to_all_seconds(c, 4, 2, 8.0), 4.0, 1e-8);    // inter share (4 − 2)/4 · 8
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, true), 3.0);  // ring 3·1 ≥ (4 − 2)·1·1
  c.inter_links_per_node = 1;
  EXPECT_NEAR(all_to_all_seconds(c, 4, 2, 8.0), 8.0, 1e-8);
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, true), 4.0);  // (4 − 2)·2·1
  // Collectives across nodes at their own calibrated bandwidth (half the point-to-point one):
  // the inter-node parts take twice as long, the intra-node part of the all-to-all does not.
  c.inter_collective_bandwidth = 0.5;
  EXPECT_NEAR(all_to_all_seconds(c, 4, 2, 8.0), 16.0, 1e-8);
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, true), 8.0);
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, false), 3.0 / 1e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(c, 4, 1.0, true), 8.0);  // falls back to the collectives'
  c.inter_reduce_scatter_bandwidth = 0.25;  // a reduce-scatter's own: the all-gather unchanged
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(c, 4, 1.0, true), 16.0);
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, true), 8.0);
  // Inside a node at the node's own collective bandwidths; the inter-node charges stay.
  c.intra_collective_bandwidth = 0.5e9;
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, false), 3.0 / 0.5e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(c, 4, 1.0, false), 3.0 / 0.5e9);  // falls back to it
  c.intra_reduce_scatter_bandwidth = 0.25e9;
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(c, 4, 1.0, false), 3.0 / 0.25e9);
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, false), 3.0 / 0.5e9);
  EXPECT_DOUBLE_EQ(all_gather_seconds(c, 4, 1.0, true), 8.0);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(c, 4, 1.0, true), 16.0);
}

}  // namespace
}  // namespace burst
