// Cost model: the formulas and the step simulator. Feasibility and ranking (estimate,
// rank_strategies): cost_model_estimate.cc; the per-strategy schedules: cost_model_schedules.cc.
// Formulas and sources: docs/cost_model.md.
#include "burst/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

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

}  // namespace burst
