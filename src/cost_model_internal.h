// src/cost_model_internal.h — the step simulator shared by cost_model.cc (formulas, simulator),
// cost_model_estimate.cc (feasibility, ranking) and cost_model_schedules.cc (one schedule builder
// per strategy). Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "burst/cost_model.h"

namespace burst::cost {

/// A message that must have arrived before a rank may start a step (or finish the pass):
/// sent by rank `src` when it started its step `step` (or finished it, for end feeds),
/// taking `seconds` on its link. src < 0: no message.
struct Feed {
  int src = -1;
  int step = 0;
  double seconds = 0;
  bool inter_node = false;
};

/// One rank's part of a pass: per step kernel seconds, the feed each step t ≥ 1 waits for,
/// feeds needed before the pass ends (posted when the sender FINISHED step `step`), and bytes.
struct RankSchedule {
  std::vector<double> compute;  ///< [T] kernel seconds
  std::vector<Feed> feed;       ///< [T] feed[t] gates the start of step t (feed[0] unused)
  std::vector<Feed> end_feeds;  ///< e.g. the final dQ / dKV hop, DistFlash partial returns
  /// Kernel seconds computed after the last step, beside the end feeds (the ring backward's
  /// second half of the own block, RingExecutor::run split_own); end feeds post before it.
  double tail = 0;
  double bytes_sent = 0;
};

/// A pass: blocking collectives before and after a dependency-driven step phase.
struct Schedule {
  double pre_seconds = 0;           ///< blocking collective before the first step (all ranks)
  double post_seconds = 0;          ///< blocking collective after the last step
  double collective_bytes = 0;      ///< bytes each rank sends in those collectives
  std::vector<RankSchedule> ranks;  ///< [P'] (P' may be a representative subgroup, e.g. USP ring)
  /// [P'] the inter-node link member i sends on (ClusterSpec::inter_link_of of its world rank;
  /// members with equal ids share one link); empty → each member its own.
  std::vector<int> inter_link;
  /// Ranks that share cores (ClusterSpec::compute_slots_per_node): member i runs on node
  /// node[i] and stands for ranks_per_member ranks there that compute when it does (usp's
  /// representative ring: the u rings at once; head parallel: one member for all). With
  /// compute_slots > 0 the members busy on a node share that many cores: each computes at
  /// min(1, slots / busy ranks) of its solo rate. Empty node or 0 slots: no sharing.
  std::vector<int> node;
  int ranks_per_member = 1;
  int compute_slots = 0;
  std::int64_t memory_bytes = 0;
};

/// Runs the recurrence
///   start[i][0] = pre;  start[i][t+1] = max(start[i][t] + c[i][t], arrival of feed[t+1])
///   end[i] = max(start[i][T−1] + c[i][T−1] + tail[i], arrival of each end feed)
/// where a message posted at post = start[src][s] (end feed: finish[src][s]) arrives at
/// max(post, when src's previous message on the same link arrived) + x: one sender's messages
/// on its intra-node link, and the messages of every sender on one inter-node link
/// (Schedule::inter_link), go out one after the other
/// and returns seconds = max_i end[i] + post, compute = max_i Σ_t c[i][t], exposed comm of the
/// critical rank, balance = max/mean Σ_t c, bytes = max_i bytes + collective bytes, step summaries.
PassEstimate simulate(const Schedule& schedule);

/// When one sender's messages on a link (intra-node: its own; inter-node: Schedule::inter_link)
/// arrive: each leaves at max(post, the link's previous arrival) and takes its seconds. Messages
/// must be sent in post order.
class LinkClock {
 public:
  explicit LinkClock(const Schedule& s) : s_(s), intra_free_(s.ranks.size(), 0.0) {}
  double send(int src, bool inter_node, double post, double seconds);

 private:
  const Schedule& s_;
  std::vector<double> intra_free_;
  std::vector<std::pair<int, double>> inter_free_;  // (link id, free at)
};

/// One message of a schedule: rank `to`'s feed[slot] (posted when `src` starts the feed's step)
/// or, with end_feed, its end_feeds[slot] (posted when `src` finishes it).
struct Post {
  int src = -1;
  bool end_feed = false;
  bool inter_node = false;
  double seconds = 0;
  std::size_t to = 0, slot = 0;
};
/// Every message of `s` by the step at which it is posted [T], each step's in receiver order (rank,
/// its step feeds, then its end feeds): the order in which a step's ties go out on a link.
std::vector<std::vector<Post>> posts_by_step(const Schedule& s);

/// The step phase when ranks share cores (Schedule::compute_slots): an event simulation in which
/// the members computing on a node share its slots. Fills start / finish [P][T] and the arrival
/// of every step feed [P][T] and end feed, and when each rank's tail ends [P] (its last step's
/// finish when it has none). src/cost_model_shared_cores.cc.
void simulate_shared_cores(const Schedule& s, const std::vector<std::vector<Post>>& posts,
                           std::vector<std::vector<double>>& start, std::vector<std::vector<double>>& finish,
                           std::vector<std::vector<double>>& feed_arrival,
                           std::vector<std::vector<double>>& end_arrival, std::vector<double>& tail_end);
/// Whether some node of `s` has more computing ranks than compute slots.
bool shares_cores(const Schedule& s);

/// Shapes shared by the builders (elements; see docs/algorithm.md §1): b_q = B·H·s·D, b_kv =
/// B·H_kv·s·D, r = B·H·s for s = S/P local tokens.
struct Sizes {
  double b_q = 0, b_kv = 0, r = 0;
  double beta = 4;                        ///< bytes per tensor element
  double gamma = 4;                       ///< bytes per value of a ring write partial (dQ | dK, dV)
  static constexpr double kRowBytes = 4;  ///< lse / delta / fp32 accumulators
};
Sizes sizes_for(const Workload& w, std::int64_t H, std::int64_t H_kv, std::int64_t s);

/// Inputs the builders need besides the workload.
struct Context {
  const ClusterSpec* cluster = nullptr;
  const Workload* workload = nullptr;
  int P = 1;
};

/// Per-strategy builders. `pairs` is the P×P visible-pair matrix of the candidate's layout
/// (USP: R×R of its ring layout). `backward` selects the pass. Each throws nothing; the caller
/// has already checked feasibility.
/// split_own (burst and ring, as ring_family.cc runs them): a backward computes half of its own
/// block at step 0 and the other half as RankSchedule::tail, beside the last partials' trip home.
Schedule ring_schedule(const Context& ctx, const std::vector<double>& pairs, int P, bool backward,
                       bool query_side, bool double_ring, std::int64_t H, std::int64_t H_kv, int rank_stride,
                       bool split_own = false);
/// The mask-aware schedule of burst and ring (docs/strategies.md § Mask-aware rings), used by
/// ring_schedule when some off-diagonal block of `pairs` is empty (and rank_stride = 1, as the
/// library does for burst and ring with DistConfig::mask_aware): rank i's step t + 1 waits for
/// block part(i, t + 1)'s read payload only when it computes on it, sent by the owner when that
/// starts its step t; every computed partial goes home after its step (end feeds); bytes
/// out(i)·read + in(i)·write.
Schedule direct_ring_schedule(const Context& ctx, const std::vector<double>& pairs, int P, bool backward,
                              bool query_side, bool double_ring, std::int64_t H, std::int64_t H_kv,
                              bool split_own = false);
Schedule allgather_schedule(const Context& ctx, const std::vector<double>& pairs, bool backward);
/// ctx.P is the head-parallel group size; S_local the tokens each member holds.
Schedule head_parallel_schedule(const Context& ctx, double total_pairs, bool backward, bool tp,
                                std::int64_t H_kv_eff, std::int64_t S_local);
Schedule distflash_schedule(const Context& ctx, const std::vector<double>& pairs, bool backward);

/// Whole-layer mode: fills e.layer (linear FLOPs and seconds, non-attention traffic, weights)
/// and adds `layers` × the layer's weights to e.memory_bytes. src/cost_model_layer.cc.
void add_layer_terms(const ClusterSpec& c, const Workload& w, Estimate& e);

/// Whether inter-node: global ranks a and b on different nodes of the cluster.
bool crosses_nodes(const ClusterSpec& c, int a, int b);

}  // namespace burst::cost
