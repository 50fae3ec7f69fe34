// src/kernels/tiling.h — where the tiled kernels start their tiles (internal). Shared with the
// cost model (src/cost_model.cc), which counts the tiles the kernels compute.
#pragma once

#include <cstdint>
#include <vector>

namespace burst::kernels::tiled {

/// Row starts of the tiles over n rows with increasing global positions pos: tiles of b rows,
/// except that no tile spans a jump of more than b positions while such jumps are few (one, or
/// one per four tiles). A rank's zigzag block is two chunks far apart: a tile across the seam
/// has a position hull covering the gap, which the mask classifies Partial against nearly every
/// tile of the other side (docs/design.md § Tiles follow the position runs). Many jumps
/// (striped at P > b) keep plain tiles. Any tiling gives the same result: classification is on
/// each tile's hull (conservative), and Partial tiles mask per element.
inline std::vector<std::int64_t> tile_starts(const std::int64_t* pos, std::int64_t n, int b) {
  std::vector<std::int64_t> cuts;
  for (std::int64_t i = 1; pos != nullptr && i < n; ++i) {
    if (pos[i] - pos[i - 1] <= b) continue;
    cuts.push_back(i);
    if (static_cast<std::int64_t>(cuts.size()) > 1 + n / (4 * static_cast<std::int64_t>(b))) {
      cuts.clear();
      break;
    }
  }
  cuts.push_back(n);
  std::vector<std::int64_t> starts;
  std::int64_t begin = 0;
  for (const std::int64_t end : cuts) {
    for (std::int64_t i = begin; i < end; i += b) starts.push_back(i);
    begin = end;
  }
  starts.push_back(n);
  return starts;
}

}  // namespace burst::kernels::tiled
