// Cost model: formulas, the step simulator, feasibility and ranking. The per-strategy
// schedules live in cost_model_schedules.cc. Formulas and sources: docs/cost_model.md.
#include "burst/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "burst/error.h"
#include "cost_model_internal.h"
#include "kernels/tiling.h"

namespace burst {

namespace {

void check_positive(double value, const char* name) {
  BURST_CHECK(std::isfinite(value) && value > 0, InvalidArgument, "cluster field ", name,
              " must be finite and > 0, got ", value);
}
void check_non_negative(double value, const char* name) {
  BURST_CHECK(std::isfinite(value) && value >= 0, InvalidArgument, "cluster field ", name,
              " must be finite and >= 0, got ", value);
}

std::string gib(double bytes) {
  std::ostringstream os;
  os.precision(3);
  os << bytes / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

}  // namespace

void ClusterSpec::validate() const {
  BURST_CHECK(nodes >= 1 && devices_per_node >= 1, InvalidArgument, "cluster '", name, "': nodes=", nodes,
              " and devices_per_node=", devices_per_node, " must be >= 1");
  check_positive(matmul_flops, "matmul_flops");
  check_positive(attention_efficiency_forward, "attention_efficiency_forward");
  check_positive(attention_efficiency_backward, "attention_efficiency_backward");
  check_positive(bf16_speedup_forward, "bf16_speedup_forward");
  check_positive(bf16_speedup_backward, "bf16_speedup_backward");
  check_non_negative(kernel_call_seconds, "kernel_call_seconds");
  check_positive(linear_efficiency, "linear_efficiency");
  check_non_negative(partial_row_seconds, "partial_row_seconds");
  check_non_negative(partial_row_seconds_per_dim, "partial_row_seconds_per_dim");
  check_non_negative(partial_row_seconds_per_dim_backward, "partial_row_seconds_per_dim_backward");
  BURST_CHECK(std::isfinite(partial_row_seconds_backward), InvalidArgument,
              "cluster field partial_row_seconds_backward must be finite, got ",
              partial_row_seconds_backward);
  BURST_CHECK(std::isfinite(kernel_call_seconds_backward), InvalidArgument,
              "cluster field kernel_call_seconds_backward must be finite, got ",
              kernel_call_seconds_backward);
  check_positive(memory_bandwidth, "memory_bandwidth");
  check_non_negative(memory_capacity, "memory_capacity");
  if (devices_per_node > 1) check_positive(intra_bandwidth, "intra_bandwidth");
  check_non_negative(intra_latency, "intra_latency");
  if (nodes > 1) check_positive(inter_bandwidth, "inter_bandwidth");
  check_non_negative(inter_latency, "inter_latency");
  check_non_negative(inter_collective_bandwidth, "inter_collective_bandwidth");
  check_non_negative(inter_reduce_scatter_bandwidth, "inter_reduce_scatter_bandwidth");
  check_non_negative(intra_collective_bandwidth, "intra_collective_bandwidth");
  check_non_negative(intra_reduce_scatter_bandwidth, "intra_reduce_scatter_bandwidth");
  BURST_CHECK(compute_slots_per_node >= 0, InvalidArgument, "cluster '", name,
              "': compute_slots_per_node must be >= 0 (0: every device its own), got ",
              compute_slots_per_node);
  BURST_CHECK(inter_links_per_node >= 0, InvalidArgument, "cluster '", name,
              "': inter_links_per_node must be >= 0 (0: one link per device), got ", inter_links_per_node);
}

const char* to_string(PassKind pass) noexcept {
  switch (pass) {
    case PassKind::Forward: return "fwd";
    case PassKind::Backward: return "bwd";
    case PassKind::ForwardBackward: return "fwd_bwd";
  }
  return "?";
}

PassKind pass_from_string(const std::string& name) {
  if (name == "fwd" || name == "forward") return PassKind::Forward;
  if (name == "bwd" || name == "backward") return PassKind::Backward;
  if (name == "fwd_bwd" || name == "both") return PassKind::ForwardBackward;
  BURST_FAIL(InvalidArgument, "unknown pass '", name, "' (expected fwd, bwd or fwd_bwd)");
}

void Workload::validate() const {
  BURST_CHECK(layers >= 1 && B >= 1 && S_global >= 1 && H >= 1 && H_kv >= 1 && D >= 1, InvalidArgument,
              "workload sizes must be >= 1: layers=", layers, " B=", B, " S_global=", S_global, " H=", H,
              " H_kv=", H_kv, " D=", D);
  BURST_CHECK(H % H_kv == 0, InvalidArgument, "H=", H, " not divisible by H_kv=", H_kv);
  BURST_CHECK(model_width >= 0, InvalidArgument, "model_width=", model_width, " must be >= 0");
  BURST_CHECK(bytes_per_element == 2 || bytes_per_element == 4, InvalidArgument,
              "bytes_per_element=", bytes_per_element, " must be 2 or 4");
  BURST_CHECK(partial_bytes_per_element == 2 || partial_bytes_per_element == 4, InvalidArgument,
              "partial_bytes_per_element=", partial_bytes_per_element, " must be 2 or 4");
  BURST_CHECK(mask_length >= 0 && mask_length <= S_global, InvalidArgument, "mask_length=", mask_length,
              " must be in [0, S_global=", S_global, "]");
  BURST_CHECK(mask_length == 0 || S_global % mask_length == 0, InvalidArgument, "S_global=", S_global,
              " must be a multiple of mask_length=", mask_length);
  BURST_CHECK(!whole_layer || model_width > 0, InvalidArgument, "whole_layer needs model_width > 0, got ",
              model_width);
  BURST_CHECK(ffn_width >= 0, InvalidArgument, "ffn_width=", ffn_width, " must be >= 0");
}

std::int64_t Workload::resolved_ffn_width() const {
  return ffn_width > 0 ? ffn_width : default_ffn_width(model_width);
}

double attention_flops(double pairs, std::int64_t B, std::int64_t H, std::int64_t D, bool backward) {
  const double forward =
      4.0 * static_cast<double>(D) * static_cast<double>(H) * static_cast<double>(B) * pairs;
  return backward ? 2.5 * forward : forward;
}

double kernel_rate(const ClusterSpec& c, bool backward, bool bf16) {
  const double eff = backward ? c.attention_efficiency_backward : c.attention_efficiency_forward;
  const double speedup = !bf16 ? 1.0 : backward ? c.bf16_speedup_backward : c.bf16_speedup_forward;
  return c.matmul_flops * eff * speedup;
}

double kernel_seconds(const ClusterSpec& c, double flops, bool backward, bool bf16) {
  if (flops <= 0) return 0;
  return c.call_overhead(backward) + flops / kernel_rate(c, backward, bf16);
}

KernelFit fit_kernel_time(const std::vector<std::pair<double, double>>& flops_seconds) {
  BURST_CHECK(flops_seconds.size() >= 2, InvalidArgument, "fit_kernel_time needs >= 2 points, got ",
              flops_seconds.size());
  double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
  for (const auto& [f, t] : flops_seconds) {
    BURST_CHECK(f > 0 && t > 0 && std::isfinite(f) && std::isfinite(t), InvalidArgument,
                "fit_kernel_time: point (", f, " flop, ", t, " s) must be positive and finite");
    const double w = 1.0 / (t * t);
    s0 += w;
    s1 += w * f;
    s2 += w * f * f;
    t0 += w * t;
    t1 += w * f * t;
  }
  const double det = s0 * s2 - s1 * s1;
  double a = det > 0 ? (t0 * s2 - s1 * t1) / det : 0.0;      // intercept: seconds per call
  double b = det > 0 ? (s0 * t1 - s1 * t0) / det : t1 / s2;  // slope: seconds per flop
  if (a < 0) {
    a = 0;
    b = t1 / s2;
  }
  BURST_CHECK(b > 0, InvalidArgument,
              "fit_kernel_time: kernel time does not grow with the FLOPs "
              "(slope ",
              b, " s/flop); machine too noisy, rerun");
  return {1.0 / b, a};
}

double link_seconds(const ClusterSpec& c, double bytes, bool inter_node) {
  if (bytes <= 0) return 0;
  return inter_node ? c.inter_latency + bytes / c.inter_bandwidth
                    : c.intra_latency + bytes / c.intra_bandwidth;
}

namespace {

/// all_gather_seconds / reduce_scatter_seconds with the blocks at `intra_bandwidth` within a
/// node and `inter_bandwidth` across nodes.
double gather_volume_seconds(const ClusterSpec& c, int P, double block_bytes, bool inter_node,
                             double intra_bandwidth, double inter_bandwidth) {
  if (P <= 1 || block_bytes <= 0) return 0;
  if (!inter_node) return (P - 1) * (c.intra_latency + block_bytes / intra_bandwidth);
  // Across nodes: the ring's P − 1 blocks on the slowest link, or — devices sharing an inter-node
  // link all gathering at once — each device's P − L remote blocks, k of them through one link
  // (L = the group's devices on a node); at the collectives' inter-node bandwidth.
  const int k = c.devices_per_inter_link();
  const int L = std::min(P, c.devices_per_node);
  const double blocks = std::max<double>(P - 1, k == 1 ? 0.0 : static_cast<double>(P - L) * k);
  return (P - 1) * c.inter_latency + blocks * block_bytes / inter_bandwidth;
}

}  // namespace

double all_gather_seconds(const ClusterSpec& c, int P, double block_bytes, bool inter_node) {
  return gather_volume_seconds(c, P, block_bytes, inter_node, c.collective_intra_bandwidth(),
                               c.collective_inter_bandwidth());
}

double reduce_scatter_seconds(const ClusterSpec& c, int P, double block_bytes, bool inter_node) {
  return gather_volume_seconds(c, P, block_bytes, inter_node, c.reduce_scatter_intra_bandwidth(),
                               c.reduce_scatter_inter_bandwidth());
}

double all_to_all_seconds(const ClusterSpec& c, int P, int group_per_node, double bytes) {
  if (P <= 1 || bytes <= 0) return 0;
  const int local = std::clamp(group_per_node, 1, P);
  const double intra_share = static_cast<double>(local - 1) / P * bytes;
  const double inter_share = static_cast<double>(P - local) / P * bytes;
  double t = 0;
  if (local > 1) t += (local - 1) * c.intra_latency + intra_share / c.intra_bandwidth;
  // Every device of a node exchanges at once: the k sharing an inter-node link send in turn.
  if (P > local)
    t += (P - local) * c.inter_latency +
         inter_share * c.devices_per_inter_link() / c.collective_inter_bandwidth();
  return t;
}

namespace {

/// Pairs a tiled kernel computes for query positions q × key positions k (both increasing),
/// tiled as the kernels tile them (kernels/tiling.h); adds the rows of the Partial tiles to
/// *partial_rows.
double tiled_pairs(const ResolvedMask& mask, const std::vector<std::int64_t>& q,
                   const std::vector<std::int64_t>& k, std::int64_t tq, std::int64_t tk,
                   double* partial_rows) {
  double total = 0;
  const auto nq = static_cast<std::int64_t>(q.size()), nk = static_cast<std::int64_t>(k.size());
  const std::vector<std::int64_t> qs = kernels::tiled::tile_starts(q.data(), nq, static_cast<int>(tq));
  const std::vector<std::int64_t> ks = kernels::tiled::tile_starts(k.data(), nk, static_cast<int>(tk));
  for (std::size_t qi = 0; qi + 1 < qs.size(); ++qi) {
    const std::int64_t a = qs[qi], a_end = qs[qi + 1];
    for (std::size_t ki = 0; ki + 1 < ks.size(); ++ki) {
      const std::int64_t b = ks[ki], b_end = ks[ki + 1];
      const TileClass cls = mask.classify(q[a], q[a_end - 1], k[b], k[b_end - 1]);
      if (cls != TileClass::Empty) total += static_cast<double>((a_end - a) * (b_end - b));
      if (cls == TileClass::Partial) *partial_rows += static_cast<double>(a_end - a);
    }
  }
  return total;
}

}  // namespace

std::vector<double> visible_pair_matrix(const ResolvedMask& mask, const SequenceLayout& layout, double scale,
                                        std::int64_t tile_q, std::int64_t tile_kv,
                                        std::vector<double>* partial_rows) {
  const int P = layout.P;
  std::vector<double> pairs(static_cast<std::size_t>(P) * P, 0.0);
  if (partial_rows != nullptr) partial_rows->assign(pairs.size(), 0.0);
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < P; ++j) {
      const auto& q = layout.positions[static_cast<std::size_t>(i)];
      const auto& k = layout.positions[static_cast<std::size_t>(j)];
      double rows = 0;
      const double n = (tile_q > 0 && tile_kv > 0) ? tiled_pairs(mask, q, k, tile_q, tile_kv, &rows)
                                                   : static_cast<double>(mask.visible_pairs(q, k));
      if (partial_rows != nullptr) (*partial_rows)[static_cast<std::size_t>(i) * P + j] = rows;
      pairs[static_cast<std::size_t>(i) * P + j] = scale * n;
    }
  return pairs;
}

namespace cost {

bool crosses_nodes(const ClusterSpec& c, int a, int b) {
  return a / c.devices_per_node != b / c.devices_per_node;
}

Sizes sizes_for(const Workload& w, std::int64_t H, std::int64_t H_kv, std::int64_t s) {
  Sizes z;
  const double bs = static_cast<double>(w.B) * static_cast<double>(s);
  z.b_q = bs * static_cast<double>(H * w.D);
  z.b_kv = bs * static_cast<double>(H_kv * w.D);
  z.r = bs * static_cast<double>(H);
  z.beta = w.bytes_per_element;
  z.gamma = w.partial_bytes_per_element;
  return z;
}

double LinkClock::send(int src, bool inter_node, double post, double seconds) {
  double* free = nullptr;
  if (!inter_node) {
    free = &intra_free_[static_cast<std::size_t>(src)];
  } else {
    const int id =
        s_.inter_link.size() == s_.ranks.size() ? s_.inter_link[static_cast<std::size_t>(src)] : src;
    for (auto& [link, at] : inter_free_)
      if (link == id) free = &at;
    if (free == nullptr) free = &inter_free_.emplace_back(id, 0.0).second;
  }
  *free = std::max(post, *free) + seconds;
  return *free;
}

std::vector<std::vector<Post>> posts_by_step(const Schedule& s) {
  const std::size_t T = s.ranks.empty() ? 0 : s.ranks[0].compute.size();
  std::vector<std::vector<Post>> posts(T);
  for (std::size_t i = 0; i < s.ranks.size(); ++i) {
    const RankSchedule& rs = s.ranks[i];
    for (std::size_t u = 1; u < T; ++u) {
      const Feed& f = rs.feed[u];
      if (f.src >= 0 && f.step >= 0 && static_cast<std::size_t>(f.step) < u)
        posts[static_cast<std::size_t>(f.step)].push_back({f.src, false, f.inter_node, f.seconds, i, u});
    }
    for (std::size_t e = 0; e < rs.end_feeds.size(); ++e) {
      const Feed& f = rs.end_feeds[e];
      if (f.src >= 0 && f.step >= 0 && static_cast<std::size_t>(f.step) < T)
        posts[static_cast<std::size_t>(f.step)].push_back({f.src, true, f.inter_node, f.seconds, i, e});
    }
  }
  return posts;
}

bool shares_cores(const Schedule& s) {
  if (s.compute_slots <= 0 || s.node.size() != s.ranks.size()) return false;
  std::map<int, int> ranks;
  for (int n : s.node) ranks[n] += s.ranks_per_member;
  for (const auto& [n, r] : ranks)
    if (r > s.compute_slots) return true;
  return false;
}

PassEstimate simulate(const Schedule& sch) {
  PassEstimate out;
  const std::size_t P = sch.ranks.size();
  if (P == 0) return out;
  const std::size_t T = sch.ranks[0].compute.size();
  // start[i][t] / fin[i][t]: when rank i begins / ends step t.
  std::vector<std::vector<double>> start(P, std::vector<double>(T + 1, sch.pre_seconds));
  std::vector<std::vector<double>> fin(P, std::vector<double>(T, sch.pre_seconds));
  std::vector<std::vector<double>> feed_arrival(P, std::vector<double>(T + 1, 0.0));
  std::vector<std::vector<double>> end_arrival(P);
  for (std::size_t i = 0; i < P; ++i) end_arrival[i].assign(sch.ranks[i].end_feeds.size(), 0.0);
  const std::vector<std::vector<Post>> posts = posts_by_step(sch);
  const bool shared = shares_cores(sch);
  std::vector<double> tail_end(P, sch.pre_seconds);
  if (shared) {
    simulate_shared_cores(sch, posts, start, fin, feed_arrival, end_arrival, tail_end);
  } else {
    auto finish = [&](std::size_t i, std::size_t t) { return start[i][t] + sch.ranks[i].compute[t]; };
    // One sender's messages on one link go out one after the other (LinkClock). Messages posted
    // at step t (a step feed when the sender starts step t, an end feed when it finishes it) are
    // all known once every rank's start of step t is, so step t's batch is scheduled, in post
    // order, before any step t + 1 starts.
    LinkClock links(sch);
    std::vector<std::pair<double, const Post*>> batch;  // (post time, message)
    auto send_batch = [&](std::size_t t) {              // every message posted at step t, in post order
      batch.clear();
      for (const Post& m : posts[t]) {
        const auto src = static_cast<std::size_t>(m.src);
        batch.emplace_back(m.end_feed ? finish(src, t) : start[src][t], &m);
      }
      std::stable_sort(batch.begin(), batch.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [post, m] : batch)
        (m->end_feed ? end_arrival : feed_arrival)[m->to][m->slot] =
            links.send(m->src, m->inter_node, post, m->seconds);
    };
    for (std::size_t t = 0; t < T; ++t) {
      send_batch(t);
      for (std::size_t i = 0; i < P; ++i) fin[i][t] = finish(i, t);
      if (t + 1 >= T) break;
      for (std::size_t i = 0; i < P; ++i) {
        const cost::Feed& f = sch.ranks[i].feed[t + 1];
        double ready = finish(i, t);
        if (f.src >= 0) ready = std::max(ready, feed_arrival[i][t + 1]);
        start[i][t + 1] = ready;
      }
    }
  }
  std::vector<double> end(P), busy(P);
  double worst_end = 0, max_busy = 0, sum_busy = 0;
  std::size_t critical = 0;
  for (std::size_t i = 0; i < P; ++i) {
    end[i] = shared ? tail_end[i] : (T ? fin[i][T - 1] : sch.pre_seconds) + sch.ranks[i].tail;
    for (std::size_t e = 0; e < sch.ranks[i].end_feeds.size(); ++e)
      if (sch.ranks[i].end_feeds[e].src >= 0) end[i] = std::max(end[i], end_arrival[i][e]);
    // Kernel wall time: the solo seconds, stretched where ranks share cores.
    busy[i] =
        std::accumulate(sch.ranks[i].compute.begin(), sch.ranks[i].compute.end(), 0.0) + sch.ranks[i].tail;
    if (shared) {
      busy[i] = tail_end[i] - (T ? fin[i][T - 1] : sch.pre_seconds);
      for (std::size_t t = 0; t < T; ++t) busy[i] += fin[i][t] - start[i][t];
    }
    if (end[i] > worst_end) {
      worst_end = end[i];
      critical = i;
    }
    max_busy = std::max(max_busy, busy[i]);
    sum_busy += busy[i];
  }
  out.seconds = worst_end + sch.post_seconds;
  out.compute_seconds = max_busy;
  out.exposed_comm_seconds = std::max(0.0, out.seconds - busy[critical]);
  out.balance = sum_busy > 0 ? max_busy / (sum_busy / static_cast<double>(P)) : 1.0;
  double max_bytes = 0;
  for (const auto& r : sch.ranks) max_bytes = std::max(max_bytes, r.bytes_sent);
  out.bytes_per_device = static_cast<std::int64_t>(std::llround(max_bytes + sch.collective_bytes));
  out.memory_bytes = sch.memory_bytes;
  for (std::size_t t = 0; t < T; ++t) {
    StepEstimate st;
    double sum = 0;
    for (std::size_t i = 0; i < P; ++i) {
      st.compute_max = std::max(st.compute_max, sch.ranks[i].compute[t]);
      sum += sch.ranks[i].compute[t];
      if (t + 1 < T) {
        const cost::Feed& f = sch.ranks[i].feed[t + 1];
        if (f.seconds > st.transfer) {
          st.transfer = f.seconds;
          st.inter_node = f.inter_node;
        }
      }
    }
    st.compute_mean = sum / static_cast<double>(P);
    out.steps.push_back(st);
  }
  return out;
}

}  // namespace cost

namespace {

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
