// src/device/lru_cache.h — a map that keeps its most recently used entries (internal).
//
// Owns: LruCache<Key, Value>, at most `capacity` entries; a lookup makes its entry the most
// recent; an insert beyond the capacity evicts the least recent entries and hands them back to
// the caller, which decides when they may die (a cuDNN graph's kernels can still be queued on a
// stream: device/cuda/attention_cudnn.cc synchronises before it drops evicted graphs). Plain host
// code, tested everywhere (tests/test_lru_cache.cc).
// Does not: lock (one owner at a time), or bound memory by bytes (entries are counted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <utility>
#include <vector>

#include "burst/error.h"

namespace burst::device {

template <typename Key, typename Value>
class LruCache {
 public:
  /// Throws: Error(InvalidArgument) for capacity 0.
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {
    BURST_CHECK(capacity > 0, InvalidArgument, "LruCache: capacity must be > 0");
  }

  /// The value of `key`, now the most recent entry; nullptr when absent. The pointer is valid
  /// until the next insert or clear.
  Value* find(const Key& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);  // most recent first
    return &it->second->second;
  }

  /// Inserts (or replaces) key's value as the most recent entry; returns what it displaced: the
  /// entries evicted to stay within the capacity, least recent first, or, when the key was
  /// there, its previous value (the caller decides when either may die, as for any eviction).
  std::vector<std::pair<Key, Value>> insert(const Key& key, Value value) {
    if (Value* v = find(key)) {
      std::vector<std::pair<Key, Value>> displaced;
      displaced.emplace_back(key, std::exchange(*v, std::move(value)));
      return displaced;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    return trim();
  }

  /// A new capacity (> 0); returns the entries evicted to fit it, least recent first.
  /// Throws: Error(InvalidArgument) for 0.
  std::vector<std::pair<Key, Value>> set_capacity(std::size_t capacity) {
    BURST_CHECK(capacity > 0, InvalidArgument, "LruCache: capacity must be > 0");
    capacity_ = capacity;
    return trim();
  }

  void clear() {
    index_.clear();
    order_.clear();
  }
  std::size_t size() const noexcept { return order_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }
  /// Entries evicted for the capacity since construction (replaced values not counted).
  std::int64_t evictions() const noexcept { return evictions_; }

 private:
  std::vector<std::pair<Key, Value>> trim() {
    std::vector<std::pair<Key, Value>> evicted;
    while (order_.size() > capacity_) {
      auto last = std::prev(order_.end());
      index_.erase(last->first);
      evicted.push_back(std::move(*last));
      order_.erase(last);
    }
    evictions_ += static_cast<std::int64_t>(evicted.size());
    return evicted;
  }

  using Order = std::list<std::pair<Key, Value>>;  // most recent first
  std::size_t capacity_;
  Order order_;
  std::map<Key, typename Order::iterator> index_;
  std::int64_t evictions_ = 0;
};

}  // namespace burst::device
