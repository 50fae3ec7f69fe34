// KernelChooser (src/device/kernel_choice.h): the step kernel chosen by measured speed, with the
// timings injected — the fastest wins, ties go to the earlier candidate, refusals are skipped,
// every key is timed once and cached, a failed timing caches nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "device/kernel_choice.h"

namespace burst::device {
namespace {

/// Injected timings: candidate → ms (nullopt: refuses), counting the calls per candidate.
struct FakeTimer {
  std::map<int, std::optional<double>> ms;
  std::map<int, int> calls;
  KernelChooser::TimeFn fn() {
    return [this](int c) {
      ++calls[c];
      return ms.at(c);
    };
  }
};

TEST(KernelChoice, TheFastestCandidateWinsAndIsCachedPerKey) {
  KernelChooser chooser;
  FakeTimer t;
  t.ms = {{1, 2.0}, {2, 0.5}, {3, 1.0}};
  EXPECT_EQ(chooser.choose({7, 1}, {1, 2, 3}, 0, t.fn()), 2);
  EXPECT_EQ(t.calls[1] + t.calls[2] + t.calls[3], 3);
  // The same key again: the cached choice, nothing timed, whatever the timer would say now.
  t.ms = {{1, 0.1}, {2, 9.0}, {3, 9.0}};
  EXPECT_EQ(chooser.choose({7, 1}, {1, 2, 3}, 0, t.fn()), 2);
  EXPECT_EQ(t.calls[1] + t.calls[2] + t.calls[3], 3);
  // Another key is timed on its own.
  EXPECT_EQ(chooser.choose({7, 2}, {1, 2, 3}, 0, t.fn()), 1);
  EXPECT_EQ(chooser.size(), 2u);
  EXPECT_EQ(chooser.entries().size(), 2u);
  EXPECT_EQ(chooser.measured(), 2);
  const KernelChooser::Choice* c = chooser.find({7, 1});
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->measured);
  ASSERT_EQ(c->timings.size(), 3u);
  EXPECT_EQ(c->timings[1].first, 2);
  EXPECT_EQ(c->timings[1].second, 0.5);
  EXPECT_EQ(chooser.find({9}), nullptr);
  const std::map<int, std::int64_t> counts = chooser.chosen_counts();
  EXPECT_EQ(counts, (std::map<int, std::int64_t>{{1, 1}, {2, 1}}));
}

TEST(KernelChoice, ATieGoesToTheEarlierCandidate) {
  KernelChooser chooser;
  FakeTimer t;
  t.ms = {{4, 1.0}, {5, 1.0}, {6, 1.5}};
  EXPECT_EQ(chooser.choose({1}, {4, 5, 6}, 0, t.fn()), 4);
  EXPECT_EQ(chooser.choose({2}, {5, 4, 6}, 0, t.fn()), 5);
}

TEST(KernelChoice, RefusalsAreSkippedAndAllRefusedFallsBack) {
  KernelChooser chooser;
  FakeTimer t;
  t.ms = {{1, std::nullopt},
          {2, 3.0},
          {3, std::numeric_limits<double>::quiet_NaN()},
          {4, -1.0},
          {5, std::numeric_limits<double>::infinity()}};
  EXPECT_EQ(chooser.choose({1}, {1, 2, 3}, 0, t.fn()), 2);  // 1 refuses, 3 is not a time
  EXPECT_EQ(chooser.choose({2}, {1, 3, 4, 5}, 9, t.fn()), 9);
  const KernelChooser::Choice* c = chooser.find({2});
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->measured);
  for (const auto& [k, ms] : c->timings) EXPECT_FALSE(ms.has_value()) << k;
}

TEST(KernelChoice, OneCandidateOrNoneIsNotTimed) {
  KernelChooser chooser;
  FakeTimer t;
  t.ms = {{1, 1.0}};
  EXPECT_EQ(chooser.choose({1}, {1}, 0, t.fn()), 1);
  EXPECT_EQ(chooser.choose({2}, {}, 8, t.fn()), 8);
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(chooser.measured(), 0);
  ASSERT_NE(chooser.find({1}), nullptr);
  EXPECT_FALSE(chooser.find({1})->measured);
}

TEST(KernelChoice, AFailedTimingCachesNothing) {
  KernelChooser chooser;
  int calls = 0;
  const KernelChooser::TimeFn failing = [&](int c) -> std::optional<double> {
    ++calls;
    if (c == 2) throw std::runtime_error("launch failed");
    return 1.0;
  };
  EXPECT_THROW(chooser.choose({1}, {1, 2}, 0, failing), std::runtime_error);
  EXPECT_EQ(chooser.find({1}), nullptr);
  EXPECT_EQ(chooser.size(), 0u);
  FakeTimer t;
  t.ms = {{1, 2.0}, {2, 1.0}};
  EXPECT_EQ(chooser.choose({1}, {1, 2}, 0, t.fn()), 2);  // timed afresh
  EXPECT_EQ(calls, 2);
}

TEST(KernelChoice, MedianOf) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({3.0}), 3.0);
  EXPECT_EQ(median_of({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 3.0);
}

}  // namespace
}  // namespace burst::device
