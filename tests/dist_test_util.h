// tests/dist_test_util.h — helpers shared by the distributed tests: cut a rank's shard out of
// global reference tensors, following a SequenceLayout.
#pragma once

#include <cstdint>

#include "burst/plan.h"
#include "burst/tensor.h"

namespace burst::test {

/// BSHD [B,S_global,H,D] → this rank's [B,S_local,H,D] (rows follow the layout's positions).
inline Tensor shard_of(const SequenceLayout& layout, int rank, const Tensor& global) {
  const auto& s = global.shape();
  Tensor local({s[0], static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(rank)].size()), s[2], s[3]});
  shard(layout, rank, global.view(), local.view());
  return local;
}

/// lse [B,H,S_global] → this rank's rows [B,H,S_local].
inline Tensor rows_of(const SequenceLayout& layout, int rank, const Tensor& global) {
  const auto& s = global.shape();
  const auto& pos = layout.positions[static_cast<std::size_t>(rank)];
  const auto n = static_cast<std::int64_t>(pos.size());
  Tensor local({s[0], s[1], n});
  for (std::int64_t bh = 0; bh < s[0] * s[1]; ++bh)
    for (std::int64_t i = 0; i < n; ++i) local.data()[bh * n + i] = global.data()[bh * s[2] + pos[static_cast<std::size_t>(i)]];
  return local;
}

}  // namespace burst::test
