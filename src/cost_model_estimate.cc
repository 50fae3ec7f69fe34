// Cost model: feasibility and ranking. estimate() scores one candidate (its schedule from
// cost_model_schedules.cc, simulated by cost_model.cc), rank_strategies() every default one.
// Formulas and sources: docs/cost_model.md.
#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "burst/cost_model.h"
#include "cost_model_internal.h"

namespace burst {

namespace {

std::string gib(double bytes) {
  std::ostringstream os;
  os.precision(3);
  os << bytes / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

/// Largest divisor of P that divides H_kv (the DistConfig default for usp).
int default_ulysses_degree(int P, std::int64_t H_kv) {
  for (int u = P; u >= 1; --u)
    if (P % u == 0 && H_kv % u == 0) return u;
  return 1;
}

/// KV heads after replication for head-parallel splitting over `g` ranks, or 0 when impossible.
std::int64_t kv_heads_for_split(std::int64_t H, std::int64_t H_kv, int g) {
  if (H % g != 0) return 0;
  if (H_kv % g == 0) return H_kv;
  if (g % H_kv == 0) return g;  // replicate each KV head g/H_kv times
  return 0;
}

std::int64_t layout_divisor(LayoutKind kind, int P) { return kind == LayoutKind::Zigzag ? 2LL * P : P; }

/// Visible-pair matrix of `kind` over P ranks at the workload's mask resolution. With
/// group > 1 (USP) the members are groups of `group` consecutive ranks of the P-rank layout,
/// holding the union of their tokens (src/strategies/usp.cc), so the matrix is (P/group)².
/// Work is in pairs: the per-element masking of Partial tiles (partial_row_seconds) is added
/// as the pairs that cost the same kernel time, rows·t_row·rate·eff / (4·D·(2.5 if backward)).
std::vector<double> pair_matrix(const ClusterSpec& c, const Workload& w, LayoutKind kind, int P,
                                int group = 1, bool backward = false) {
  const std::int64_t len = w.mask_length > 0 ? w.mask_length : w.S_global;
  // Tiles shrink with the mask resolution so that they cover the same share of the sequence.
  // A 1-row tile is the exact count: take the fast visible_pairs path (0) for it.
  auto tile = [&](int t) {
    const std::int64_t scaled = static_cast<std::int64_t>(t) * len / w.S_global;
    return scaled >= 2 ? scaled : std::int64_t{0};
  };
  const ResolvedMask resolved(w.mask, len, len);
  const double ratio = static_cast<double>(w.S_global) / static_cast<double>(len);
  SequenceLayout layout = make_layout(kind, P, len, w.mask);
  if (group > 1) {
    SequenceLayout merged = layout;
    merged.P = P / group;
    merged.positions.assign(static_cast<std::size_t>(merged.P), {});
    for (int r = 0; r < P; ++r) {
      auto& dst = merged.positions[static_cast<std::size_t>(r / group)];
      dst.insert(dst.end(), layout.positions[static_cast<std::size_t>(r)].begin(),
                 layout.positions[static_cast<std::size_t>(r)].end());
    }
    for (auto& p : merged.positions) std::sort(p.begin(), p.end());
    layout = std::move(merged);
  }
  std::vector<double> rows;
  const auto [tile_q, tile_kv] = c.kernel_tile(backward);  // each pass counts its own kernel's tiles
  std::vector<double> pairs =
      visible_pair_matrix(resolved, layout, ratio * ratio, tile(tile_q), tile(tile_kv), &rows);
  const double t_row = c.partial_row_cost(backward, w.D);
  if (t_row > 0) {
    // Seconds → equivalent pairs at the rate this call's pairs are charged at (masking itself is
    // fp32 work, so with bf16 arithmetic one row is worth more pairs).
    const double per_row = t_row * kernel_rate(c, backward, w.bf16_arithmetic) /
                           (4.0 * static_cast<double>(w.D) * (backward ? 2.5 : 1.0));
    for (std::size_t i = 0; i < pairs.size(); ++i) pairs[i] += rows[i] * ratio * per_row;
  }
  return pairs;
}

/// Empty when feasible, else the reason.
std::string infeasibility(const ClusterSpec& c, const Workload& w, const Candidate& cand, int u) {
  const int P = c.devices();
  const std::int64_t len = w.mask_length > 0 ? w.mask_length : w.S_global;
  std::ostringstream why;
  auto divisible = [&](std::int64_t div) {
    if (w.S_global % div != 0 || len % div != 0)
      why << "S_global=" << w.S_global << " (mask resolution " << len << ") not divisible by " << div
          << " as layout " << to_string(cand.layout) << " needs";
  };
  switch (cand.strategy) {
    case StrategyKind::Burst:
    case StrategyKind::Ring:
    case StrategyKind::AllGather: divisible(layout_divisor(cand.layout, P)); break;
    case StrategyKind::DistFlash:
      if (cand.layout != LayoutKind::Contiguous) {
        why << "distflash uses the contiguous layout";
      } else {
        divisible(P);
        if (why.str().empty()) {
          // Its helping schedule computes only blocks with the kv chunk at or before the q chunk.
          const std::vector<double> pairs = pair_matrix(c, w, LayoutKind::Contiguous, P);
          for (int i = 0; i < P && why.str().empty(); ++i)
            for (int j = i + 1; j < P; ++j)
              if (pairs[static_cast<std::size_t>(i) * P + j] > 0) {
                why << "distflash's schedule covers causal-like masks only (q chunk " << i
                    << " sees kv chunk " << j << ")";
                break;
              }
        }
      }
      break;
    case StrategyKind::Ulysses:
    case StrategyKind::HeadParallel:
      if (kv_heads_for_split(w.H, w.H_kv, P) == 0)
        why << "H=" << w.H << ", H_kv=" << w.H_kv << " cannot be split over P=" << P << " ranks";
      else
        divisible(P);
      break;
    case StrategyKind::Usp:
      if (P % u != 0 || kv_heads_for_split(w.H, w.H_kv, u) == 0)
        why << "ulysses_degree=" << u << " must divide P=" << P << " and the heads H=" << w.H
            << ", H_kv=" << w.H_kv;
      else
        divisible(layout_divisor(cand.layout, P));
      break;
  }
  return why.str();
}

PassEstimate score_pass(const ClusterSpec& c, const Workload& w, const Candidate& cand, int u, bool backward,
                        bool query_side) {
  const int P = c.devices();
  cost::Context ctx{&c, &w, P};
  const bool use_double = cand.double_ring && c.nodes > 1 && c.devices_per_node > 1;
  switch (cand.strategy) {
    case StrategyKind::Burst:
    case StrategyKind::Ring:
      return cost::simulate(cost::ring_schedule(ctx, pair_matrix(c, w, cand.layout, P, 1, backward), P,
                                                backward, query_side, use_double, w.H, w.H_kv, 1, true));
    case StrategyKind::AllGather:
      return cost::simulate(
          cost::allgather_schedule(ctx, pair_matrix(c, w, cand.layout, P, 1, backward), backward));
    case StrategyKind::DistFlash:
      return cost::simulate(
          cost::distflash_schedule(ctx, pair_matrix(c, w, cand.layout, P, 1, backward), backward));
    case StrategyKind::Ulysses:
    case StrategyKind::HeadParallel: {
      const std::vector<double> one = pair_matrix(c, w, LayoutKind::Contiguous, 1, 1, backward);
      return cost::simulate(cost::head_parallel_schedule(ctx, one[0], backward,
                                                         cand.strategy == StrategyKind::HeadParallel,
                                                         kv_heads_for_split(w.H, w.H_kv, P), w.S_global / P));
    }
    case StrategyKind::Usp: {
      // Ring of R = P/u members (strided by u) over H/u heads; Ulysses a2a inside groups of u.
      // usp's ring partials travel in fp32 (DistConfig::partials_dtype is burst and ring only).
      Workload wu = w;
      wu.partial_bytes_per_element = 4;
      ctx.workload = &wu;
      const int R = P / u;
      const std::int64_t kv_u = kv_heads_for_split(w.H, w.H_kv, u);
      cost::Schedule ring = cost::ring_schedule(ctx, pair_matrix(c, w, cand.layout, P, u, backward), R,
                                                backward, query_side, cand.double_ring, w.H / u, kv_u / u, u);
      // The u-way all-to-all of a Ulysses group (consecutive ranks), no attention compute.
      const cost::Context uctx{&c, &w, u};
      const cost::Schedule ua = cost::head_parallel_schedule(uctx, 0, backward, false, kv_u, w.S_global / P);
      ring.pre_seconds += ua.pre_seconds;
      ring.post_seconds += ua.post_seconds;
      ring.collective_bytes += ua.collective_bytes;
      ring.memory_bytes += ua.memory_bytes;
      return cost::simulate(ring);
    }
  }
  return {};
}

/// Per-step payload bytes of the two backward directions (docs/algorithm.md §4.1, §4.4).
bool prefer_query_side(const Workload& w, BackwardSide side) {
  if (side == BackwardSide::QuerySide) return true;
  if (side == BackwardSide::KvSide) return false;
  const double beta = w.bytes_per_element;
  const double hq = static_cast<double>(w.H), hkv = static_cast<double>(w.H_kv);
  const double d = static_cast<double>(w.D);
  const double gamma = w.partial_bytes_per_element;  // the write partials' wire bytes
  const double query = hq * (2 * d * beta + d * gamma + 2 * cost::Sizes::kRowBytes);  // Q, dO, dQ + D, lse
  const double kv = hkv * (2 * d * beta + 2 * d * gamma);                             // K, V, dK, dV
  return query < kv;
}

}  // namespace

Estimate estimate(const ClusterSpec& cluster, const Workload& workload, const Candidate& candidate) {
  cluster.validate();
  workload.validate();
  Estimate e;
  e.candidate = candidate;
  const int P = cluster.devices();
  const int u = candidate.strategy == StrategyKind::Usp
                    ? (candidate.ulysses_degree > 0 ? candidate.ulysses_degree
                                                    : default_ulysses_degree(P, workload.H_kv))
                    : 0;
  e.ulysses_degree = u;
  e.reason = infeasibility(cluster, workload, candidate, u);
  if (!e.reason.empty()) {
    e.feasible = false;
    return e;
  }
  const bool ring_family = candidate.strategy == StrategyKind::Burst ||
                           candidate.strategy == StrategyKind::Ring ||
                           candidate.strategy == StrategyKind::Usp;
  // ring: RingAttention's K,V-side backward; usp: its ring's (Burst-USP: burst's query side,
  // always — src/strategies/usp.cc); burst: the side the GQA rule (or the caller) picks.
  const bool query_side = candidate.strategy == StrategyKind::Ring ? false
                          : candidate.strategy == StrategyKind::Usp
                              ? candidate.usp_ring == UspRing::Burst
                              : prefer_query_side(workload, candidate.backward_side);
  const bool want_fwd = workload.pass != PassKind::Backward;
  const bool want_bwd = workload.pass != PassKind::Forward;
  if (want_fwd) e.forward = score_pass(cluster, workload, candidate, u, false, query_side);
  if (want_bwd) {
    e.backward = score_pass(cluster, workload, candidate, u, true, query_side);
    if (ring_family) e.backward_side = query_side ? "query" : "kv";
  }
  const PassEstimate* passes[2] = {want_fwd ? &e.forward : nullptr, want_bwd ? &e.backward : nullptr};
  double busy_sum = 0, busy_mean_sum = 0;
  for (const PassEstimate* p : passes) {
    if (!p) continue;
    e.seconds += p->seconds;
    e.compute_seconds += p->compute_seconds;
    e.exposed_comm_seconds += p->exposed_comm_seconds;
    e.bytes_per_device += p->bytes_per_device;
    e.memory_bytes = std::max(e.memory_bytes, p->memory_bytes);
    busy_sum += p->compute_seconds;
    busy_mean_sum += p->balance > 0 ? p->compute_seconds / p->balance : 0;
  }
  e.balance = busy_mean_sum > 0 ? busy_sum / busy_mean_sum : 1.0;
  const std::int64_t len = workload.mask_length > 0 ? workload.mask_length : workload.S_global;
  const double ratio = static_cast<double>(workload.S_global) / static_cast<double>(len);
  const double area =
      static_cast<double>(ResolvedMask(workload.mask, len, len).visible_pairs()) * ratio * ratio;
  if (want_fwd) e.flops += attention_flops(area, workload.B, workload.H, workload.D, false);
  if (want_bwd) e.flops += attention_flops(area, workload.B, workload.H, workload.D, true);
  if (workload.whole_layer) cost::add_layer_terms(cluster, workload, e);
  if (cluster.memory_capacity > 0 && static_cast<double>(e.memory_bytes) > cluster.memory_capacity) {
    e.feasible = false;
    e.reason = "needs " + gib(static_cast<double>(e.memory_bytes)) + " per device > capacity " +
               gib(cluster.memory_capacity);
  }
  return e;
}

std::vector<Candidate> default_candidates(const ClusterSpec& cluster) {
  (void)cluster;
  std::vector<Candidate> out;
  const LayoutKind ring_layouts[] = {LayoutKind::Contiguous, LayoutKind::Zigzag, LayoutKind::Striped};
  for (StrategyKind s : {StrategyKind::Burst, StrategyKind::Ring})
    for (LayoutKind l : ring_layouts) out.push_back({s, l, 0, BackwardSide::Auto, true});
  out.push_back({StrategyKind::AllGather, LayoutKind::Zigzag, 0, BackwardSide::Auto, true});
  out.push_back({StrategyKind::AllGather, LayoutKind::Contiguous, 0, BackwardSide::Auto, true});
  out.push_back({StrategyKind::DistFlash, LayoutKind::Contiguous, 0, BackwardSide::Auto, true});
  out.push_back({StrategyKind::Ulysses, LayoutKind::Contiguous, 0, BackwardSide::Auto, true});
  out.push_back({StrategyKind::Usp, LayoutKind::Zigzag, 0, BackwardSide::Auto, true});
  out.push_back({StrategyKind::HeadParallel, LayoutKind::Contiguous, 0, BackwardSide::Auto, true});
  return out;
}

std::vector<Estimate> rank_strategies(const ClusterSpec& cluster, const Workload& workload) {
  std::vector<Estimate> all;
  for (const Candidate& c : default_candidates(cluster)) all.push_back(estimate(cluster, workload, c));
  std::stable_partition(all.begin(), all.end(), [](const Estimate& e) { return e.feasible; });
  const auto feasible_end =
      std::find_if(all.begin(), all.end(), [](const Estimate& e) { return !e.feasible; });
  const bool layer = workload.whole_layer;
  std::stable_sort(all.begin(), feasible_end, [layer](const Estimate& a, const Estimate& b) {
    return layer ? a.layer.seconds < b.layer.seconds : a.seconds < b.seconds;
  });
  return all;
}

}  // namespace burst
