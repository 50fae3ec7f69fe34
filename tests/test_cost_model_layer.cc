// Tests of the cost model's whole-layer mode (src/cost_model_layer.cc): the linear-layer
// formulas against hand arithmetic (written out in the comments), TP's extra Megatron-SP traffic,
// the weight-gradient all-reduce of the sequence-parallel strategies, weights in memory, and
// ranking by layer time.
#include <gtest/gtest.h>

#include <algorithm>

#include "burst/cost_model.h"
#include "burst/error.h"
#include "cost_test_util.h"

namespace burst {
namespace {

// Two devices on one node; 4 flop/s; 8 bytes/s links, no latency.
ClusterSpec toy_pair() { return test::toy_cluster(1, 2); }

// S = 4, H = H_kv = 2, D = 1, h = 2, f = 2, fp32, full mask, forward.
// Weights: h·(H + 2H_kv)·D + H·D·h + 3·h·f = 2·6 + 4 + 12 = 28.
Workload toy_layer() {
  Workload w = test::toy_workload(4, 2, 2, 1);
  w.model_width = 2;
  w.ffn_width = 2;
  w.whole_layer = true;
  return w;
}

TEST(CostLayerFormulas, DefaultFfnWidthIsLlamas) {
  EXPECT_EQ(default_ffn_width(4096), 11008);  // ⌈8·4096/3⌉ = 10923 → next multiple of 256
  EXPECT_EQ(default_ffn_width(64), 256);      // ⌈512/3⌉ = 171 → 256
  EXPECT_EQ(default_ffn_width(768), 2048);    // 8·768/3 = 2048 exactly
}

TEST(CostLayerFormulas, LinearFlopsAndWeights) {
  // h=4, H=2, H_kv=1, D=2, f=8: 4·(2+2)·2 + 2·2·4 + 3·4·8 = 32 + 16 + 96 = 144 weights.
  EXPECT_DOUBLE_EQ(layer_weight_count(4, 2, 1, 2, 8), 144.0);
  // 10 tokens: forward 2·10·144 = 2880; backward 2× = 5760.
  EXPECT_DOUBLE_EQ(linear_flops(10, 4, 2, 1, 2, 8, false), 2880.0);
  EXPECT_DOUBLE_EQ(linear_flops(10, 4, 2, 1, 2, 8, true), 5760.0);
}

TEST(CostLayerFormulas, AllReduceIsTwoRingPasses) {
  ClusterSpec c = toy_pair();
  c.devices_per_node = 4;
  // P = 4, 32 bytes: 2·(P−1)·(32/4)/8 = 2·3·1 = 6 s; latency 0.5 s adds 2·3·0.5 = 3 s.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(c, 4, 32, false), 6.0);
  c.intra_latency = 0.5;
  EXPECT_DOUBLE_EQ(all_reduce_seconds(c, 4, 32, false), 9.0);
  EXPECT_EQ(all_reduce_seconds(c, 1, 32, false), 0.0);
}

TEST(CostLayer, TensorParallelPaysMegatronSpAroundTheMlp) {
  const ClusterSpec c = toy_pair();
  const Workload w = toy_layer();
  const Estimate tp = estimate(c, w, {StrategyKind::HeadParallel, LayoutKind::Contiguous});
  ASSERT_TRUE(tp.feasible) << tp.reason;
  // Each device: 2 tokens' worth of linear work: 2·2·28 = 112 flop at 4 flop/s = 28 s.
  EXPECT_DOUBLE_EQ(tp.layer.linear_flops, 112.0);
  EXPECT_DOUBLE_EQ(tp.layer.linear_seconds, 28.0);
  // MLP: all-gather + reduce-scatter of X [S/P = 2, h = 2] fp32 = 16 bytes: 2·(1·16/8) = 4 s,
  // 2·(P−1)·16 = 32 bytes.
  EXPECT_DOUBLE_EQ(tp.layer.comm_seconds, 4.0);
  EXPECT_EQ(tp.layer.comm_bytes, 32);
  EXPECT_EQ(tp.layer.bytes_per_device, tp.bytes_per_device + 32);
  EXPECT_DOUBLE_EQ(tp.layer.seconds, tp.seconds + 28.0 + 4.0);
  // Weights sharded: 28/2·4 bytes = 56.
  EXPECT_EQ(tp.layer.weight_bytes, 56);

  Workload no_layer = w;
  no_layer.whole_layer = false;
  const Estimate attn = estimate(c, no_layer, {StrategyKind::HeadParallel, LayoutKind::Contiguous});
  EXPECT_DOUBLE_EQ(attn.seconds, tp.seconds);  // the attention part is unchanged
  EXPECT_EQ(tp.memory_bytes, attn.memory_bytes + 56);
  EXPECT_EQ(attn.layer.seconds, 0.0);
}

TEST(CostLayer, SequenceParallelAllReducesWeightGradientsBeyondTheOverlap) {
  ClusterSpec c = toy_pair();
  Workload w = toy_layer();
  w.pass = PassKind::Forward;
  const Estimate fwd = estimate(c, w, {StrategyKind::Burst, LayoutKind::Zigzag});
  ASSERT_TRUE(fwd.feasible) << fwd.reason;
  EXPECT_EQ(fwd.layer.comm_seconds, 0.0);  // no gradients in a forward
  EXPECT_EQ(fwd.layer.comm_bytes, 0);
  EXPECT_EQ(fwd.layer.weight_bytes, 28 * 4);

  // Backward with fast compute: the all-reduce of 28·4 = 112 bytes, 2·(56/8) = 14 s, is
  // exposed except for the layer's backward compute.
  c.matmul_flops = 4e6;
  w.pass = PassKind::Backward;
  const Estimate bwd = estimate(c, w, {StrategyKind::Burst, LayoutKind::Zigzag});
  ASSERT_TRUE(bwd.feasible) << bwd.reason;
  const double overlap = bwd.backward.compute_seconds + 2 * 112.0 / 4e6;
  EXPECT_NEAR(bwd.layer.comm_seconds, 14.0 - overlap, 1e-12);
  EXPECT_GT(bwd.layer.comm_seconds, 13.9);
  EXPECT_EQ(bwd.layer.comm_bytes, 112);           // 2·(P−1)/P·112
  EXPECT_EQ(bwd.layer.weight_bytes, 2 * 28 * 4);  // weights and their gradients

  // Slow compute hides it entirely.
  c.matmul_flops = 4;
  const Estimate hidden = estimate(c, w, {StrategyKind::Burst, LayoutKind::Zigzag});
  EXPECT_EQ(hidden.layer.comm_seconds, 0.0);
  EXPECT_EQ(hidden.layer.comm_bytes, 112);
}

TEST(CostLayer, RankingUsesLayerTime) {
  ClusterSpec c = toy_pair();
  Workload w = toy_layer();
  w.S_global = 8;
  w.pass = PassKind::ForwardBackward;
  const std::vector<Estimate> ranked = rank_strategies(c, w);
  double last = 0;
  for (const Estimate& e : ranked) {
    if (!e.feasible) break;
    EXPECT_GE(e.layer.seconds, last) << to_string(e.candidate.strategy);
    EXPECT_GT(e.layer.linear_seconds, 0.0);
    last = e.layer.seconds;
  }
}

TEST(CostLayer, WholeLayerNeedsAModelWidth) {
  Workload w = toy_layer();
  w.model_width = 0;
  EXPECT_THROW(w.validate(), Error);
  w.model_width = 2;
  w.ffn_width = -1;
  EXPECT_THROW(w.validate(), Error);
  ClusterSpec c = toy_pair();
  c.linear_efficiency = 0;
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace burst
