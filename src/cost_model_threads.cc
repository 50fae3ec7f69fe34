// Ranks × threads on a node's cores (cost_model.h): the per-core spec scaled to ranks of several
// kernel threads, each split scored by the model, the splits ranked.
#include <algorithm>
#include <limits>

#include "burst/cost_model.h"
#include "burst/error.h"

namespace burst {

namespace {

// The kernels' defaults (src/kernels/attention_tiled*.cc): q-tile rows of the forward; the
// backward's kv-tile rows, the items it always makes and the items it wants where chunks stay
// at least kBackwardChunkRows long (cutting each (b, kv-head) into kv chunks), the most kv rows
// of a chunk (the same 1024), and the cap on the chunks' partial dQ buffers.
constexpr std::int64_t kForwardTileQ = 96, kBackwardTileKv = 96, kBackwardMinItems = 8,
                       kBackwardWantedItems = 32, kBackwardChunkRows = 1024,
                       kBackwardPartialBytesCap = std::int64_t{512} << 20;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

double kernel_thread_efficiency(const ClusterSpec& per_core, const Workload& w, int P, int threads,
                                bool backward) {
  if (threads <= 1) return 1.0;
  std::int64_t items = 0;
  const std::int64_t rows = std::max<std::int64_t>(1, w.S_global / std::max(P, 1));
  if (backward) {
    const std::int64_t base = w.B * w.H_kv, kv_tiles = ceil_div(rows, kBackwardTileKv);
    const std::int64_t long_chunks = std::max<std::int64_t>(1, rows / kBackwardChunkRows);
    std::int64_t wanted =
        std::min(kv_tiles, std::max({ceil_div(kBackwardMinItems, base),
                                     std::min(ceil_div(kBackwardWantedItems, base), long_chunks),
                                     ceil_div(rows, kBackwardChunkRows)}));
    const std::int64_t partial_bytes = w.B * w.H * rows * w.D * 4;  // one chunk's partial dQ
    while (wanted > 1 && wanted * partial_bytes > kBackwardPartialBytesCap) --wanted;
    const std::int64_t per_chunk = ceil_div(kv_tiles, std::max<std::int64_t>(1, wanted));
    items = base * ceil_div(kv_tiles, per_chunk);
  } else {
    const std::int64_t tile = per_core.kernel_tile_q > 0 ? per_core.kernel_tile_q : kForwardTileQ;
    items = w.B * w.H * ceil_div(rows, tile);
  }
  const std::int64_t T = threads;
  const double dealt = static_cast<double>(items) / static_cast<double>(T * ceil_div(items, T));
  const std::vector<double>& measured =
      backward ? per_core.thread_scaling_backward : per_core.thread_scaling_forward;
  if (static_cast<std::int64_t>(measured.size()) >= T && measured[static_cast<std::size_t>(T - 1)] > 0)
    return std::min(dealt, measured[static_cast<std::size_t>(T - 1)]);
  return dealt;
}

ClusterSpec cluster_for_split(const ClusterSpec& per_core, const Workload& w, int ranks_per_node,
                              int threads) {
  BURST_CHECK(ranks_per_node >= 1 && threads >= 1, InvalidArgument, "ranks x threads ", ranks_per_node, " x ",
              threads, ": both must be >= 1");
  ClusterSpec c = per_core;
  const int P = per_core.nodes * ranks_per_node;
  const double ef = kernel_thread_efficiency(per_core, w, P, threads, false);
  const double eb = kernel_thread_efficiency(per_core, w, P, threads, true);
  c.devices_per_node = ranks_per_node;
  c.compute_slots_per_node = 0;
  c.attention_efficiency_forward *= threads * ef;
  c.attention_efficiency_backward *= threads * eb;
  c.linear_efficiency *= threads;
  c.partial_row_seconds /= threads * ef;
  c.partial_row_seconds_per_dim /= threads * ef;
  if (c.partial_row_seconds_backward >= 0) c.partial_row_seconds_backward /= threads * eb;
  c.partial_row_seconds_per_dim_backward /= threads * eb;
  c.name = per_core.name + " (" + std::to_string(ranks_per_node) + " ranks x " + std::to_string(threads) +
           " threads per node)";
  return c;
}

std::vector<RankThreadSplit> rank_thread_splits(const ClusterSpec& per_core, const Workload& w,
                                                int cores_per_node,
                                                const std::vector<Candidate>& candidates) {
  BURST_CHECK(cores_per_node >= 1, InvalidArgument, "cores per node must be >= 1, got ", cores_per_node);
  std::vector<RankThreadSplit> out;
  for (int ranks = cores_per_node; ranks >= 1; --ranks) {
    if (cores_per_node % ranks != 0) continue;
    RankThreadSplit s;
    s.ranks_per_node = ranks;
    s.threads = cores_per_node / ranks;
    s.cluster = cluster_for_split(per_core, w, ranks, s.threads);
    const int P = s.cluster.devices();
    s.efficiency_forward = kernel_thread_efficiency(per_core, w, P, s.threads, false);
    s.efficiency_backward = kernel_thread_efficiency(per_core, w, P, s.threads, true);
    std::vector<Estimate> scored;
    if (candidates.empty()) {
      scored = rank_strategies(s.cluster, w);
    } else {
      for (const Candidate& c : candidates) scored.push_back(estimate(s.cluster, w, c));
    }
    s.seconds = std::numeric_limits<double>::infinity();
    s.best.feasible = false;
    s.best.reason = "no candidate is feasible";
    for (const Estimate& e : scored) {
      const double t = w.whole_layer ? e.layer.seconds : e.seconds;
      if (e.feasible && t < s.seconds) {
        s.seconds = t;
        s.best = e;
      }
    }
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const RankThreadSplit& a, const RankThreadSplit& b) { return a.seconds < b.seconds; });
  return out;
}

}  // namespace burst
