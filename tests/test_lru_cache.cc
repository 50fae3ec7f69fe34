// LruCache (device/lru_cache.h) against a plain model: a vector of (key, value) pairs, most
// recent first, cut to the capacity after each insert. Random finds, inserts and new capacities
// over a small key space, starting at capacities 1..6; the evicted entries, every lookup and the
// size must match the model's; plus the hand cases: a refreshed entry survives, a replaced value
// evicts nothing and comes back itself, a smaller capacity evicts the least recent.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "burst/error.h"
#include "burst/splitmix64.h"
#include "device/lru_cache.h"

namespace burst::device {
namespace {

using Entry = std::pair<int, std::string>;

/// The model: entries most recent first.
struct Model {
  std::size_t capacity;
  std::vector<Entry> entries;
  const std::string* find(int key) {
    const auto it =
        std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.first == key; });
    if (it == entries.end()) return nullptr;
    std::rotate(entries.begin(), it, it + 1);
    return &entries.front().second;
  }
  std::vector<Entry> insert(int key, const std::string& value) {
    if (find(key) != nullptr) {  // the previous value comes back, displaced
      std::vector<Entry> displaced{entries.front()};
      entries.front().second = value;
      return displaced;
    }
    entries.insert(entries.begin(), {key, value});
    std::vector<Entry> evicted;
    while (entries.size() > capacity) {
      evicted.push_back(entries.back());
      entries.pop_back();
    }
    return evicted;
  }
};

TEST(LruCache, MatchesAPlainModelUnderRandomUse) {
  SplitMix64 rng(7);
  std::int64_t total_evicted = 0;
  for (std::size_t capacity = 1; capacity <= 6; ++capacity) {
    LruCache<int, std::string> cache(capacity);
    Model model{capacity, {}};
    for (int op = 0; op < 2000; ++op) {
      const int key = static_cast<int>(rng.uniform() * 10);
      if (rng.uniform() < 0.02) {  // a new capacity: both evict down to it
        const std::size_t cap = 1 + static_cast<std::size_t>(rng.uniform() * 6);
        model.capacity = cap;
        std::vector<Entry> want;
        while (model.entries.size() > cap) {
          want.push_back(model.entries.back());
          model.entries.pop_back();
        }
        ASSERT_EQ(cache.set_capacity(cap), want) << "capacity " << cap << " op " << op;
      } else if (rng.uniform() < 0.5) {
        const std::string* want = model.find(key);
        std::string* got = cache.find(key);
        ASSERT_EQ(got == nullptr, want == nullptr) << "capacity " << capacity << " op " << op;
        if (got != nullptr) { ASSERT_EQ(*got, *want); }
      } else {
        const std::string value = std::to_string(op);
        ASSERT_EQ(cache.insert(key, value), model.insert(key, value))
            << "capacity " << capacity << " op " << op;
      }
      ASSERT_EQ(cache.size(), model.entries.size());
      ASSERT_LE(cache.size(), model.capacity);
    }
    total_evicted += cache.evictions();
  }
  EXPECT_GT(total_evicted, 0);  // the random use did evict
}

TEST(LruCache, KeepsTheRecentlyUsedAndHandsBackTheEvicted) {
  LruCache<int, std::string> cache(2);
  EXPECT_TRUE(cache.insert(1, "a").empty());
  EXPECT_TRUE(cache.insert(2, "b").empty());
  ASSERT_NE(cache.find(1), nullptr);  // 1 is now the most recent
  const auto evicted = cache.insert(3, "c");
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], (Entry{2, "b"}));
  EXPECT_EQ(cache.find(2), nullptr);
  // A replaced value evicts nothing but comes back itself: its owner decides when it dies (a
  // cuDNN graph's kernels may still be queued), as for an evicted one.
  const auto displaced = cache.insert(1, "a2");
  ASSERT_EQ(displaced.size(), 1u);
  EXPECT_EQ(displaced[0], (Entry{1, "a"}));
  EXPECT_EQ(*cache.find(1), "a2");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 1);  // counts evictions for the capacity only

  // A smaller capacity evicts the least recent down to it: 1 ("a2") is more recent than 3.
  ASSERT_NE(cache.find(1), nullptr);
  const auto trimmed = cache.set_capacity(1);
  ASSERT_EQ(trimmed.size(), 1u);
  EXPECT_EQ(trimmed[0], (Entry{3, "c"}));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.evictions(), 2);
  EXPECT_THROW(cache.set_capacity(0), Error);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.find(1), nullptr);
  EXPECT_THROW((LruCache<int, int>(0)), Error);
}

}  // namespace
}  // namespace burst::device
