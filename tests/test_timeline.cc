// The per-step timeline (DistConfig::timeline, burst/strategy.h) under mpiexec -n 1..4: burst,
// ring and allgather write one record per rank per plan step of every pass, with bytes sent
// equal to the plan's bytes of that step (exact), bytes received summing over ranks to the
// bytes sent at every step, non-negative times whose sum per rank stays within the pass's wall
// time, and results bitwise equal to a run without a timeline. No timed assertions.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "burst/comm.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "dist_test_util.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr std::int64_t kS = 96, kD = 16, kH = 2;

struct Outputs {
  Tensor out, lse, dq, dk, dv;
  DistStats fwd, bwd;
  PassPlan plan_fwd, plan_bwd;
};

/// Forward and backward of this rank's shards; `timeline` (may be null) records them.
Outputs run(const Communicator& world, DistConfig cfg, const Mask& mask, Timeline* timeline) {
  cfg.timeline = timeline;
  const ProblemShape shape{1, kS, kH, kH, kD};
  DistAttention attn(world, cfg, shape, mask);
  const SequenceLayout& layout = attn.plan().layout();
  const int g = world.rank();
  const Tensor q = test::shard_of(layout, g, test::random_tensor({1, kS, kH, kD}, 11));
  const Tensor k = test::shard_of(layout, g, test::random_tensor({1, kS, kH, kD}, 12));
  const Tensor v = test::shard_of(layout, g, test::random_tensor({1, kS, kH, kD}, 13));
  const Tensor dout = test::shard_of(layout, g, test::random_tensor({1, kS, kH, kD}, 14));
  Outputs o{Tensor(q.shape()),
            Tensor({1, kH, attn.local_length()}),
            Tensor(q.shape()),
            Tensor(k.shape()),
            Tensor(k.shape()),
            {},
            {},
            attn.plan().forward(),
            attn.plan().backward()};
  attn.forward(q.view(), k.view(), v.view(), o.out.view(), o.lse.view());
  o.fwd = attn.last_stats();
  attn.backward(dout.view(), q.view(), k.view(), v.view(), o.out.view(), o.lse.view(), o.dq.view(),
                o.dk.view(), o.dv.view());
  o.bwd = attn.last_stats();
  return o;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * sizeof(float)) == 0;
}

/// Checks one pass's records against its plan; `tag` names the case in failures.
void check_pass(const Communicator& world, const std::vector<StepRecord>& all, const char* pass,
                const PassPlan& plan, const DistStats& stats, const std::string& tag) {
  const int g = world.rank();
  std::vector<const StepRecord*> mine;
  for (const StepRecord& r : all)
    if (r.pass == pass) mine.push_back(&r);
  ASSERT_EQ(mine.size(), plan.steps.size()) << tag << " " << pass << ": one record per plan step";
  double sum = 0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const StepRecord& r = *mine[i];
    EXPECT_EQ(r.step, static_cast<int>(i)) << tag;
    EXPECT_EQ(r.rank, g) << tag;
    EXPECT_FALSE(r.whole_pass) << tag;
    EXPECT_EQ(r.bytes_sent, plan.steps[i].bytes_sent[static_cast<std::size_t>(g)])
        << tag << " " << pass << " step " << i << ": bytes sent vs the plan";
    EXPECT_GE(r.compute_seconds, 0.0) << tag;
    EXPECT_GE(r.compute_cpu_seconds, 0.0) << tag;
    EXPECT_GE(r.wait_seconds, 0.0) << tag;
    EXPECT_GE(r.copy_seconds, 0.0) << tag;
    EXPECT_GE(r.bytes_received, 0) << tag;
    sum += r.compute_seconds + r.wait_seconds + r.copy_seconds;
    // Every byte sent at a step is received at that step by some rank.
    EXPECT_EQ(world.all_reduce_sum(r.bytes_received), world.all_reduce_sum(r.bytes_sent))
        << tag << " " << pass << " step " << i << ": received vs sent over ranks";
  }
  EXPECT_LE(sum, stats.seconds) << tag << " " << pass << ": step times within the pass's wall time";
  std::int64_t total = 0;
  for (const StepRecord* r : mine) total += r->bytes_sent;
  EXPECT_EQ(total, stats.bytes_sent) << tag << " " << pass << ": records vs the byte counter";
}

TEST(Timeline, OneRecordPerRankPerStepWithThePlansBytes) {
  const Communicator world = Communicator::world();
  BenchmarkMaskConfig mc;
  mc.seed = 5;
  mc.num_documents = 5;
  // causal_document leaves blocks empty at P > 1: the mask-aware schedule (ring_direct.cc).
  const std::vector<std::pair<std::string, Mask>> masks = {
      {"causal", Mask::causal_mask()},
      {"full", Mask::full()},
      {"causal_document", make_benchmark_mask(MaskType::CausalDocument, kS, mc)}};
  for (StrategyKind strategy : {StrategyKind::Burst, StrategyKind::Ring, StrategyKind::AllGather})
    for (LayoutKind layout : {LayoutKind::Zigzag, LayoutKind::Contiguous})
      for (const auto& [mask_name, mask] : masks)
        for (bool overlap : {true, false}) {
          DistConfig cfg;
          cfg.strategy = strategy;
          cfg.layout = layout;
          cfg.overlap = overlap;
          cfg.num_threads = 1;
          const std::string tag = std::string(to_string(strategy)) + "/" + to_string(layout) + "/" +
                                  mask_name + (overlap ? "" : "/no-overlap") +
                                  " P=" + std::to_string(world.size());
          Timeline timeline;
          const Outputs with = run(world, cfg, mask, &timeline);
          const Outputs without = run(world, cfg, mask, nullptr);
          check_pass(world, timeline.records(), "fwd", with.plan_fwd, with.fwd, tag);
          check_pass(world, timeline.records(), "bwd", with.plan_bwd, with.bwd, tag);
          EXPECT_TRUE(bitwise_equal(with.out, without.out) && bitwise_equal(with.lse, without.lse) &&
                      bitwise_equal(with.dq, without.dq) && bitwise_equal(with.dk, without.dk) &&
                      bitwise_equal(with.dv, without.dv))
              << tag << ": results with and without a timeline differ";
        }
}

TEST(Timeline, StrategiesWithoutStepsRecordNothing) {
  // ulysses has no per-step executor: it records nothing (the bench writes a whole-pass record).
  const Communicator world = Communicator::world();
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ulysses;
  cfg.num_threads = 1;
  Timeline timeline;
  if (kH % world.size() != 0) GTEST_SKIP() << "ulysses needs H % P == 0";
  run(world, cfg, Mask::causal_mask(), &timeline);
  EXPECT_TRUE(timeline.records().empty());
}

}  // namespace
}  // namespace burst
