// Tests of burst/plan.h (serial, pure): every layout is a bijection with increasing positions
// for every rank and P; zigzag / striped / contiguous match their definitions; the balanced
// layout evens per-rank visible work; shard/unshard round-trip; ring plans visit every
// partition once per rank and their byte totals equal the closed forms of docs/algorithm.md §4.2;
// the Auto backward side follows the byte rule of §4.4.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "test_util.h"
#include "wire_layout.h"

namespace burst {
namespace {

const std::vector<LayoutKind> kLayouts = {LayoutKind::Contiguous, LayoutKind::Zigzag, LayoutKind::Striped,
                                          LayoutKind::Balanced};

std::vector<Mask> masks(std::int64_t S) {
  BenchmarkMaskConfig c;
  c.num_documents = 5;
  c.block = 8;
  return {Mask::full(), Mask::causal_mask(), make_benchmark_mask(MaskType::CausalDocument, S, c),
          make_benchmark_mask(MaskType::SlidingWindowCausal, S, c),
          make_benchmark_mask(MaskType::QkSparse, S, c)};
}

TEST(Layout, BijectiveForEveryRankAndP) {
  for (int P = 1; P <= 8; ++P)
    for (LayoutKind kind : kLayouts)
      for (std::int64_t S : {2LL * P, 8LL * P, 24LL * P}) {
        for (const Mask& m : masks(S)) {
          const SequenceLayout l = make_layout(kind, P, S, m);
          EXPECT_NO_THROW(check_layout(l)) << to_string(kind) << " P=" << P << " S=" << S;
          for (const auto& pos : l.positions) EXPECT_EQ(static_cast<std::int64_t>(pos.size()), S / P);
        }
      }
}

TEST(Layout, MatchesDefinitions) {
  const int P = 3;
  const std::int64_t S = 24;
  const SequenceLayout z = make_layout(LayoutKind::Zigzag, P, S);
  // 2P = 6 chunks of 4: rank r holds chunks r and 5 − r.
  EXPECT_EQ(z.positions[0], (std::vector<std::int64_t>{0, 1, 2, 3, 20, 21, 22, 23}));
  EXPECT_EQ(z.positions[2], (std::vector<std::int64_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  const SequenceLayout s = make_layout(LayoutKind::Striped, P, S);
  for (int r = 0; r < P; ++r)
    for (std::int64_t t : s.positions[static_cast<std::size_t>(r)]) EXPECT_EQ(t % P, r);
  const SequenceLayout c = make_layout(LayoutKind::Contiguous, P, S);
  EXPECT_EQ(c.positions[1].front(), 8);
  EXPECT_EQ(c.positions[1].back(), 15);
}

TEST(Layout, RejectsIndivisibleLengths) {
  EXPECT_THROW(make_layout(LayoutKind::Zigzag, 3, 9), Error);  // needs 2P = 6
  EXPECT_THROW(make_layout(LayoutKind::Striped, 4, 10), Error);
  EXPECT_THROW(make_layout(LayoutKind::Contiguous, 0, 8), Error);
  EXPECT_THROW(layout_from_string("diagonal"), Error);
}

TEST(Layout, PaddedLengthIsTheNextMultiple) {
  for (int P : {1, 2, 3, 4, 7})
    for (std::int64_t S : {1, 5, 999, 1000, 1001, 1024}) {
      for (LayoutKind k :
           {LayoutKind::Contiguous, LayoutKind::Zigzag, LayoutKind::Striped, LayoutKind::Balanced}) {
        const std::int64_t m = (k == LayoutKind::Zigzag) ? 2 * P : P;
        const std::int64_t n = padded_length(k, P, S);
        EXPECT_TRUE(n % m == 0 && n >= S && n < S + m)
            << to_string(k) << " P=" << P << " S=" << S << " -> " << n;
        EXPECT_NO_THROW(make_layout(k, P, n, Mask::causal_mask()));
      }
    }
  EXPECT_THROW(padded_length(LayoutKind::Zigzag, 0, 10), Error);
}

TEST(Layout, MaskWithoutPaddingHidesPaddingAndKeepsTheRest) {
  const std::int64_t S = 10, S_pad = 12;
  for (const Mask& m :
       {Mask::causal_mask(), Mask::full(), Mask::sliding_window(2, 1), Mask::sliding_window(3, -1, true),
        make_benchmark_mask(MaskType::CausalDocument, S)}) {
    const ResolvedMask real(m, S, S), padded(mask_without_padding(m, S), S_pad, S_pad);
    for (std::int64_t i = 0; i < S_pad; ++i)
      for (std::int64_t j = 0; j < S_pad; ++j)
        EXPECT_EQ(padded.visible(i, j), i < S && j < S && real.visible(i, j))
            << m.describe() << " " << i << "," << j;
  }
}

TEST(Layout, ExplicitLayoutIsCheckedAndKept) {
  const std::vector<std::vector<std::int64_t>> ok{{0, 3, 4}, {1, 2, 5}};
  EXPECT_EQ(make_explicit_layout(LayoutKind::Contiguous, 2, 6, ok).positions, ok);
  EXPECT_THROW(make_explicit_layout(LayoutKind::Contiguous, 2, 6, {{0, 3, 4}, {1, 2}}), Error);     // unequal
  EXPECT_THROW(make_explicit_layout(LayoutKind::Contiguous, 2, 6, {{0, 3, 4}, {1, 2, 4}}), Error);  // twice
  EXPECT_THROW(make_explicit_layout(LayoutKind::Contiguous, 2, 6, {{0, 4, 3}, {1, 2, 5}}), Error);  // order
  EXPECT_THROW(make_explicit_layout(LayoutKind::Contiguous, 3, 6, ok), Error);                      // P
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ring;
  cfg.positions = ok;
  const Plan plan = Plan::make(cfg, ProblemShape{1, 6, 2, 2, 8}, Mask::causal_mask(), 2, 2);
  EXPECT_EQ(plan.layout().positions, ok);
}

TEST(Layout, BalancedEvensVisibleWork) {
  for (int P : {2, 3, 4, 8}) {
    const std::int64_t S = 64LL * P;
    for (const Mask& m : masks(S)) {
      const ResolvedMask rm(m, S, S);
      const auto work = [&](LayoutKind k) {
        const auto w = layout_work(make_layout(k, P, S, m), rm);
        const double mx = static_cast<double>(*std::max_element(w.begin(), w.end()));
        const double mean = static_cast<double>(std::accumulate(w.begin(), w.end(), std::int64_t{0})) / P;
        return mean > 0 ? mx / mean : 1.0;
      };
      const double balanced = work(LayoutKind::Balanced), contiguous = work(LayoutKind::Contiguous);
      EXPECT_LE(balanced, contiguous + 1e-12) << m.describe() << " P=" << P;
      // 4 chunks per rank, greedy by decreasing work: max ≤ mean + the largest chunk; for the
      // causal triangle that is within 1.15 of the mean.
      if (m.causal) { EXPECT_LE(balanced, 1.15) << "P=" << P; }
    }
  }
}

TEST(Layout, ShardUnshardRoundTrip) {
  for (LayoutKind kind : kLayouts) {
    const SequenceLayout l = make_layout(kind, 4, 32, Mask::causal_mask());
    const Tensor g = test::random_tensor({2, 32, 3, 5}, 11);
    Tensor back({2, 32, 3, 5});
    for (int r = 0; r < 4; ++r) {
      Tensor local({2, 8, 3, 5});
      shard(l, r, g.view(), local.view());
      for (std::int64_t b = 0; b < 2; ++b)  // row i of the shard is global position pos[i]
        for (std::size_t i = 0; i < 8; ++i)
          EXPECT_EQ(local.data()[((b * 8 + static_cast<std::int64_t>(i)) * 3) * 5],
                    g.data()[((b * 32 + l.positions[static_cast<std::size_t>(r)][i]) * 3) * 5]);
      unshard(l, r, local.view(), back.view());
    }
    EXPECT_EQ(back.vec(), g.vec()) << to_string(kind);
  }
}

// Message layouts: each field at the first offset after the previous one that is a multiple of
// its element size, the message rounded to its largest element; nothing else is padded.
TEST(WireLayout, OffsetsAlignToElementSizeAndSizeToLargest) {
  const WireLayout odd{{"q", DType::BF16, 3}, {"lse", DType::F32, 2}, {"h", DType::F16, 1}};
  EXPECT_EQ(odd[0].offset, 0);
  EXPECT_EQ(odd[1].offset, 8);  // 6 bytes of bf16, then the next multiple of 4
  EXPECT_EQ(odd[2].offset, 16);
  EXPECT_EQ(odd.bytes(), 20);                                  // 18 rounded to 4
  EXPECT_EQ(wire::kv_block(DType::BF16, 5).bytes(), 20);       // 16-bit only: exact, odd counts too
  EXPECT_EQ(wire::partial(DType::BF16, 7).bytes(), 14);        // was padded to 16 on a float wire
  EXPECT_EQ(wire::query_block(DType::F16, 3, 2).bytes(), 28);  // Q, dO: 12 B; delta at 12, lse at 20
  EXPECT_EQ(wire::query_block(DType::F16, 3, 2)[wire::kDelta].offset, 12);
  EXPECT_EQ(wire::query_block(DType::F32, 3, 2).bytes(), 4 * (6 + 4));
  EXPECT_EQ(WireLayout{}.bytes(), 0);
  EXPECT_THROW(WireLayout({{"x", DType::F32, -1}}), Error);
}

TEST(Plan, RingStepsVisitEveryPartitionOnce) {
  for (int P : {1, 2, 3, 4, 6})
    for (int L = 1; L <= P; ++L) {
      if (P % L != 0) continue;
      DistConfig cfg;
      cfg.strategy = StrategyKind::Burst;
      const Plan plan = Plan::make(cfg, {1, 12LL * P, 2, 2, 4}, Mask::causal_mask(), P, L);
      for (int g = 0; g < P; ++g) {
        std::set<int> seen;
        for (int t = 0; t < P; ++t)
          seen.insert(
              plan.forward().steps[static_cast<std::size_t>(t)].partition[static_cast<std::size_t>(g)]);
        EXPECT_EQ(static_cast<int>(seen.size()), P) << "P=" << P << " L=" << L << " rank " << g;
        EXPECT_EQ(plan.forward().steps[0].partition[static_cast<std::size_t>(g)], g);
      }
    }
}

TEST(Plan, BytesEqualClosedForms) {
  const ProblemShape shape{2, 48, 4, 2, 8};
  for (int P : {1, 2, 3, 4})
    for (int L : {1, P}) {
      const std::int64_t s = shape.S_global / P, b_q = 2 * s * 4 * 8, b_kv = 2 * s * 2 * 8, r = 2 * 4 * s;
      for (BackwardSide side : {BackwardSide::QuerySide, BackwardSide::KvSide}) {
        DistConfig cfg;
        cfg.strategy = StrategyKind::Burst;
        cfg.backward_side = side;
        const Plan plan = Plan::make(cfg, shape, Mask::full(), P, L);
        for (int g = 0; g < P; ++g) {
          EXPECT_EQ(plan.forward().bytes_sent[static_cast<std::size_t>(g)], 4 * (P - 1) * 2 * b_kv);
          // A flat inter ring (L = 1) skips round 0's home hop: the block is the rank's own.
          const std::int64_t home_saving = (L == 1 && P > 1) ? 1 : 0;
          const std::int64_t want = side == BackwardSide::QuerySide
                                        ? 4 * ((P - 1) * (2 * b_q + 2 * r) + (P - home_saving) * b_q)
                                        : 4 * ((P - 1) * 2 * b_kv + (P - home_saving) * 2 * b_kv);
          EXPECT_EQ(plan.backward().bytes_sent[static_cast<std::size_t>(g)], P > 1 ? want : 0)
              << "P=" << P << " L=" << L;
        }
      }
    }
}

TEST(Plan, AutoSideFollowsTheByteRule) {
  // MHA: query side cheaper ((3d + 2)/(4d) < 1); GQA g = 4: KV side (docs/algorithm.md §4.4).
  EXPECT_EQ(choose_backward_side({1, 64, 8, 8, 64}, 4), BackwardSide::QuerySide);
  EXPECT_EQ(choose_backward_side({1, 64, 8, 2, 64}, 4), BackwardSide::KvSide);
  const ProblemShape mha{1, 32768, 8, 8, 64};
  const double ratio = static_cast<double>(ring_backward_bytes(BackwardSide::QuerySide, mha, 2)) /
                       static_cast<double>(ring_backward_bytes(BackwardSide::KvSide, mha, 2));
  EXPECT_LE(ratio, 0.76);  // the target at P = 2, H = H_kv
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ring;
  EXPECT_EQ(Plan::make(cfg, mha, Mask::causal_mask(), 2, 2).backward_side(), BackwardSide::KvSide);
}

TEST(Plan, BalanceOfZigzagCausalIsNearOne) {
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ring;
  cfg.layout = LayoutKind::Zigzag;
  const Plan z = Plan::make(cfg, {1, 256, 1, 1, 4}, Mask::causal_mask(), 4, 4);
  EXPECT_LE(z.forward().balance(), 1.01);
  cfg.layout = LayoutKind::Contiguous;
  const Plan c = Plan::make(cfg, {1, 256, 1, 1, 4}, Mask::causal_mask(), 4, 4);
  EXPECT_GT(c.forward().balance(), 1.5);  // the last rank does ~7/4 of the mean
  EXPECT_NE(z.table().find("zigzag"), std::string::npos);
}

}  // namespace
}  // namespace burst
