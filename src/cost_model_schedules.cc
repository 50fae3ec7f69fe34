// Cost model: one schedule builder per strategy — which block each rank computes at each step,
// which payload feeds the next step over which link, and the memory each rank holds.
// Volumes: docs/algorithm.md §4.1–4.2 (ring family); DistFlashAttn (arXiv 2310.03294), all-gather
// (arXiv 2407.21783 §3.3), Ulysses (arXiv 2309.14509), USP (arXiv 2405.07719), TP (arXiv 2205.05198)
// as docs/strategies.md states them. Memory: docs/algorithm.md §4.5. Formulas: docs/cost_model.md.
#include <algorithm>
#include <cmath>
#include <utility>

#include "cost_model_internal.h"
#include "plan_ring.h"
#include "plan_strategies.h"

namespace burst::cost {

namespace {

constexpr double kAcc = Sizes::kRowBytes;  // fp32 accumulators / gradient payloads

double pair_at(const std::vector<double>& pairs, int P, int i, int j) {
  return pairs[static_cast<std::size_t>(i) * P + j];
}

/// Kernel seconds of one block of `pairs` visible pairs with H heads.
double block_seconds(const Context& ctx, double pairs, std::int64_t H, bool backward) {
  const Workload& w = *ctx.workload;
  return kernel_seconds(*ctx.cluster, attention_flops(pairs, w.B, H, w.D, backward), backward,
                        w.bf16_arithmetic);
}

/// RingExecutor::run's split_own: the own block (step 0, `pairs` visible pairs) as two kernel
/// calls over half its rows each, the second after the last step (RankSchedule::tail).
void split_own_block(const Context& ctx, RankSchedule& rs, double pairs, std::int64_t H) {
  if (pairs <= 0) return;  // an empty own block is skipped whole
  const double half = block_seconds(ctx, pairs / 2, H, true);
  rs.compute[0] = half;
  rs.tail = half;
}

/// The backward's delta pass, memory-bound: rowsum(dO ∘ O) reads 2·b_q·β, writes r fp32.
double delta_seconds(const Context& ctx, const Sizes& z) {
  return (2 * z.b_q * z.beta + z.r * kAcc) / ctx.cluster->memory_bandwidth;
}

/// Memory-bound copy of `bytes` (read once, written once) at the measured copy bandwidth: the
/// packing and unpacking of collective buffers (a layout change moves every byte through memory
/// twice; an all-to-all packs per destination and unpacks into the new layout).
double copy_seconds(const Context& ctx, double bytes) { return 2 * bytes / ctx.cluster->memory_bandwidth; }

/// Inputs and outputs every strategy holds per rank: forward q, k, v, out (β) + lse;
/// backward additionally dout, dq, dk, dv (β) and delta.
double io_bytes(const Sizes& z, bool backward) {
  const double fwd = (2 * z.b_q + 2 * z.b_kv) * z.beta + z.r * kAcc;
  return backward ? fwd + (2 * z.b_q + 2 * z.b_kv) * z.beta + z.r * kAcc : fwd;
}

std::int64_t to_bytes(double b) { return static_cast<std::int64_t>(std::llround(b)); }

/// Schedule::inter_link for members 0..P−1 at world ranks i·stride.
std::vector<int> inter_links(const ClusterSpec& c, int P, int stride) {
  std::vector<int> ids(static_cast<std::size_t>(P));
  for (int i = 0; i < P; ++i) ids[static_cast<std::size_t>(i)] = c.inter_link_of(i * stride);
  return ids;
}

/// Schedule's core sharing for members 0..P−1 at world ranks i·stride, each standing for
/// `ranks_per_member` ranks computing at once on its node.
void set_core_sharing(Schedule& s, const ClusterSpec& c, int P, int stride, int ranks_per_member) {
  s.compute_slots = c.compute_slots_per_node;
  s.ranks_per_member = ranks_per_member;
  s.node.resize(static_cast<std::size_t>(P));
  for (int i = 0; i < P; ++i) s.node[static_cast<std::size_t>(i)] = i * stride / c.devices_per_node;
}

/// Per-hop payloads of the ring family (docs/algorithm.md §4.1): forward K, V; backward read
/// (Q, dO, D, lse | K, V) and write (dQ | dK, dV), the write partials in γ bytes per value (fp32,
/// or bf16 with DistConfig::partials_dtype). {read, write} bytes.
std::pair<double, double> ring_payloads(const Sizes& z, bool backward, bool query_side) {
  if (backward && query_side) return {2 * z.b_q * z.beta + 2 * z.r * kAcc, z.b_q * z.gamma};
  return {2 * z.b_kv * z.beta, backward ? 2 * z.b_kv * z.gamma : 0.0};
}

}  // namespace

Schedule ring_schedule(const Context& ctx, const std::vector<double>& pairs, int P, bool backward,
                       bool query_side, bool double_ring, std::int64_t H, std::int64_t H_kv, int rank_stride,
                       bool split_own) {
  if (rank_stride == 1 && P > 1) {
    bool empty = false;
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < P; ++j) empty |= i != j && pair_at(pairs, P, i, j) == 0;
    if (empty)
      return direct_ring_schedule(ctx, pairs, P, backward, query_side, double_ring, H, H_kv, split_own);
  }
  const ClusterSpec& c = *ctx.cluster;
  const Workload& w = *ctx.workload;
  const Sizes z = sizes_for(w, H, H_kv, w.S_global / P);
  const auto [read, write] = ring_payloads(z, backward, query_side);
  // The steps Plan::make lays out: ring member i is world rank i·rank_stride (usp: the members
  // holding one head slice, one per Ulysses group of u = rank_stride), on the double ring when
  // asked for and the members span nodes — usp_ring_topology's rule, which at u = 1 is burst's
  // and ring's n × L (docs/algorithm.md §7; LoongTrain's double ring, arXiv 2406.18485 §4).
  const bool dbl = double_ring && c.nodes > 1 && P * rank_stride == c.devices();
  const strategies::RingTopology rt =
      strategies::usp_ring_topology(P * rank_stride, rank_stride, c.devices_per_node, dbl);
  const ring::Topology topo{rt.nodes, rt.ranks_per_node};
  Schedule s;
  s.ranks.resize(P);
  s.inter_link = inter_links(c, P, rank_stride);
  // The u rings of usp compute at once on the members' nodes (u ranks per member there, at most
  // the node's devices).
  set_core_sharing(s, c, P, rank_stride, std::min(rank_stride, c.devices_per_node));
  // With rank_stride u > 1 this ring stands for u rings running at once (usp: one per head
  // slice, on world ranks i·u + g); the members of the others that send on member i's inter-node
  // link at the same steps share it with i: its inter-node payloads take that many times longer.
  auto concurrent = [&](int member, bool inter_node) {
    if (!inter_node) return 1.0;
    int n = 0;
    for (int g = 0; g < rank_stride; ++g)
      n += c.inter_link_of(member * rank_stride + g) == c.inter_link_of(member * rank_stride) ? 1 : 0;
    return static_cast<double>(n);
  };
  for (int i = 0; i < P; ++i) {
    RankSchedule& rs = s.ranks[i];
    rs.compute.resize(P);
    rs.feed.resize(P);
    for (int t = 0; t < P; ++t) {
      const int j = ring::partition(topo, i, t);
      // Forward and KV-side backward: Q_i stays, block j's K/V visit. Query side: K_i stays.
      const double p = (backward && query_side) ? pair_at(pairs, P, j, i) : pair_at(pairs, P, i, j);
      rs.compute[t] = block_seconds(ctx, p, H, backward);
      if (t + 1 < P) {
        // Step t + 1's payload: from the left neighbour, or at a double ring's round boundary
        // the inter-node copy posted L steps earlier; the write partial follows from step 1 on.
        const ring::Source from = ring::source(topo, i, t + 1);
        Feed f;
        f.src = from.rank;
        f.step = from.posted_step;
        f.inter_node = crosses_nodes(c, f.src * rank_stride, i * rank_stride);
        f.seconds =
            link_seconds(c, (read + (t >= 1 ? write : 0)) * concurrent(f.src, f.inter_node), f.inter_node);
        rs.feed[t + 1] = f;
      }
    }
    if (backward && split_own && P > 1) split_own_block(ctx, rs, pair_at(pairs, P, i, i), H);
    if (backward) rs.compute[0] += delta_seconds(ctx, z);
    rs.bytes_sent = (P - 1) * read + (backward && P > 1 ? P * write : 0);
    if (backward && P > 1) {  // final hop: the accumulated dQ (dK, dV) goes home
      Feed f;
      f.src = ring::holder(topo, i, P - 1);  // the last step's holder of my block
      f.step = P - 1;
      f.inter_node = crosses_nodes(c, f.src * rank_stride, i * rank_stride);
      f.seconds = link_seconds(c, write * concurrent(f.src, f.inter_node), f.inter_node);
      rs.end_feeds.push_back(f);
    }
  }
  // Memory (docs/algorithm.md §4.5): forward K,V double buffer + fp32 out accumulator + m, l.
  double mem = io_bytes(z, backward);
  if (!backward) {
    mem += 4 * z.b_kv * z.beta + z.b_q * kAcc + 2 * z.r * kAcc;
  } else if (query_side) {  // read/write double buffers, step scratch, accumulators, D
    mem += 2 * read + 2 * write + (z.b_q + 2 * z.b_kv) * kAcc + (z.b_q + 2 * z.b_kv) * kAcc;
  } else {
    mem += 2 * read + 2 * write + z.b_q * kAcc + z.r * kAcc;
  }
  s.memory_bytes = to_bytes(mem);
  return s;
}

Schedule direct_ring_schedule(const Context& ctx, const std::vector<double>& pairs, int P, bool backward,
                              bool query_side, bool double_ring, std::int64_t H, std::int64_t H_kv,
                              bool split_own) {
  const ClusterSpec& c = *ctx.cluster;
  const Workload& w = *ctx.workload;
  const Sizes z = sizes_for(w, H, H_kv, w.S_global / P);
  const auto [read, write] = ring_payloads(z, backward, query_side);
  const int L = c.devices_per_node;
  const bool dbl = double_ring && c.nodes > 1 && L > 1 && P == c.devices();
  const ring::Topology topo{dbl ? c.nodes : 1, dbl ? L : P};
  // pair(i, j): visible pairs rank i computes on with block j (query side: j's queries, i's keys).
  auto pair = [&](int i, int j) {
    return backward && query_side ? pair_at(pairs, P, j, i) : pair_at(pairs, P, i, j);
  };
  Schedule s;
  s.ranks.resize(P);
  s.inter_link = inter_links(c, P, 1);
  set_core_sharing(s, c, P, 1, 1);
  for (int i = 0; i < P; ++i) {
    RankSchedule& rs = s.ranks[i];
    rs.compute.assign(P, 0.0);
    rs.feed.resize(P);
    rs.compute[0] = block_seconds(ctx, pair(i, i), H, backward);
    if (backward && split_own && P > 1) split_own_block(ctx, rs, pair(i, i), H);
    if (backward) rs.compute[0] += delta_seconds(ctx, z);
  }
  std::vector<double> held(static_cast<std::size_t>(P), 0);  // write partials sent or received
  // The steps and routing Plan::make lays out (plan_ring.h), timed.
  ring::for_each_direct_step(
      topo, [&](int reader, int owner) { return pair(reader, owner) > 0; },
      [&](const ring::DirectStep& d) {
        RankSchedule& rs = s.ranks[d.g];
        if (d.serves) s.ranks[d.g].bytes_sent += read;  // my block to the rank holding it now
        if (!d.computes) return;
        const int j = d.block;
        rs.compute[d.t] = block_seconds(ctx, pair(d.g, j), H, backward);
        Feed f;  // the owner posts my copy when it starts step t − 1
        f.src = j;
        f.step = d.t - 1;
        f.inter_node = crosses_nodes(c, j, d.g);
        f.seconds = link_seconds(c, read, f.inter_node);
        rs.feed[d.t] = f;
        rs.bytes_sent += write;  // my partial of block j goes home
        held[static_cast<std::size_t>(d.g)] += 1;
        held[static_cast<std::size_t>(j)] += 1;
        if (write > 0) {
          Feed home;  // block j's owner waits for the partial after my step t
          home.src = d.g;
          home.step = d.t;
          home.inter_node = f.inter_node;
          home.seconds = link_seconds(c, write, f.inter_node);
          s.ranks[j].end_feeds.push_back(home);
        }
      });
  // Memory: as the ring plus a second read buffer and the send copy; every write partial held.
  double mem = io_bytes(z, backward) + 4 * read;
  double most = 0;
  for (double h : held) most = std::max(most, h);
  if (!backward)
    mem += z.b_q * kAcc + 2 * z.r * kAcc;
  else
    mem += (2 + most) * write + z.b_q * kAcc + z.r * kAcc;
  s.memory_bytes = to_bytes(mem);
  return s;
}

Schedule allgather_schedule(const Context& ctx, const std::vector<double>& pairs, bool backward) {
  const ClusterSpec& c = *ctx.cluster;
  const Workload& w = *ctx.workload;
  const int P = ctx.P;
  const Sizes z = sizes_for(w, w.H, w.H_kv, w.S_global / P);
  const bool inter = c.nodes > 1;
  const double kv_block = 2 * z.b_kv * z.beta;
  Schedule s;
  // Forward: the gathered K, V (rank order) are reordered into position order (one copy of P
  // blocks) for one kernel call. Backward: K, V gathered again; one kernel call per non-empty
  // rank block, writing its dK, dV (fp32) into the reduce-scatter's send buffer (no copies).
  s.pre_seconds =
      all_gather_seconds(c, P, kv_block, inter) + (backward ? 0.0 : copy_seconds(ctx, P * kv_block));
  s.collective_bytes = (P - 1) * kv_block;
  if (backward) {
    const double dkv_block = 2 * z.b_kv * kAcc;
    s.post_seconds = reduce_scatter_seconds(c, P, dkv_block, inter);
    s.collective_bytes += (P - 1) * dkv_block;
  }
  s.ranks.resize(P);
  set_core_sharing(s, c, P, 1, 1);
  for (int i = 0; i < P; ++i) {
    double seconds = 0, row = 0;
    for (int j = 0; j < P; ++j) {
      const double pairs_ij = pair_at(pairs, P, i, j);
      row += pairs_ij;
      if (backward && pairs_ij > 0) seconds += block_seconds(ctx, pairs_ij, w.H, true);
    }
    s.ranks[i].compute = {backward ? seconds + delta_seconds(ctx, z) : block_seconds(ctx, row, w.H, false)};
    s.ranks[i].feed = {Feed{}};
  }
  double mem = io_bytes(z, backward) + P * kv_block;  // the gathered K, V
  if (backward) mem += P * 2 * z.b_kv * kAcc;         // dK, dV of every rank block
  s.memory_bytes = to_bytes(mem);
  return s;
}

Schedule head_parallel_schedule(const Context& ctx, double total_pairs, bool backward, bool tp,
                                std::int64_t H_kv_eff, std::int64_t S_local) {
  const ClusterSpec& c = *ctx.cluster;
  const Workload& w = *ctx.workload;
  const int P = ctx.P;                                    // the head-parallel group (USP: u)
  const Sizes z = sizes_for(w, w.H, w.H_kv, S_local);     // sequence-sharded tensors
  const Sizes ze = sizes_for(w, w.H, H_kv_eff, S_local);  // with replicated KV heads
  const int group_per_node = std::min(P, c.devices_per_node);
  const bool inter = P > c.devices_per_node;
  Schedule s;
  double staging = 0;
  if (tp && w.model_width > 0) {
    // Megatron SP: all-gather X [S/P, h] before QKV, reduce-scatter after the out projection
    // (backward mirrored). Not overlapped with attention.
    const double h = static_cast<double>(w.model_width);
    const double block = static_cast<double>(w.B) * static_cast<double>(w.S_global / P) * h * z.beta;
    s.pre_seconds = all_gather_seconds(c, P, block, inter);
    s.post_seconds = reduce_scatter_seconds(c, P, block, inter);
    s.collective_bytes = 2.0 * (P - 1) * block;
    staging = P * block;  // the gathered [S, h] input
  } else if (tp) {
    // Attention-only head parallelism on sequence-sharded inputs (src/strategies/headpar.cc):
    // forward all-gathers Q, K, V and reduce-scatters (O, lse); backward all-gathers
    // Q, dO, K, V, lse, delta and reduce-scatters dQ, dK, dV (fp32).
    // Every rank gathers the compact K, V (H_kv heads) and picks its heads locally.
    const double gather =
        backward ? (2 * z.b_q + 2 * z.b_kv) * z.beta + 2 * z.r * kAcc : (z.b_q + 2 * z.b_kv) * z.beta;
    const double scatter = backward ? (z.b_q + 2 * z.b_kv) * kAcc : (z.b_q + z.r) * kAcc;
    // Copies: the local block packed, this rank's heads of the P gathered blocks unpacked into
    // the head layout (one block's worth); this rank's heads written into the full-width
    // reduce-scatter buffer (zeroed once, kept across calls), the own block copied out.
    s.pre_seconds = all_gather_seconds(c, P, gather, inter) + copy_seconds(ctx, 2 * gather);
    s.post_seconds = reduce_scatter_seconds(c, P, scatter, inter) + copy_seconds(ctx, 2 * scatter);
    s.collective_bytes = (P - 1) * (gather + scatter);
    staging = P * std::max(gather, scatter);
  } else {
    // Ulysses (src/strategies/ulysses.cc), DeepSpeed's exchanges: forward a2a(Q, K, V) then
    // a2a(O, lse); backward from the saved head-sharded context a2a(dO) then a2a(dQ, dK, dV).
    // Q, K, V, dO travel in the storage dtype (beta), O, lse and the gradients in fp32.
    const double first = backward ? ze.b_q * z.beta : (ze.b_q + 2 * ze.b_kv) * z.beta;
    const double second = backward ? (ze.b_q + 2 * ze.b_kv) * kAcc : ze.b_q * kAcc + ze.r * kAcc;
    // Each exchange packs per destination and unpacks into the new layout: two copies.
    s.pre_seconds = all_to_all_seconds(c, P, group_per_node, first) + copy_seconds(ctx, 2 * first);
    s.post_seconds = all_to_all_seconds(c, P, group_per_node, second) + copy_seconds(ctx, 2 * second);
    s.collective_bytes = static_cast<double>(P - 1) / P * (first + second);
    staging = std::max(first, second);
  }
  if (P == 1) {  // one rank: the kernel runs on the caller's tensors, nothing packed or sent
    s.pre_seconds = s.post_seconds = s.collective_bytes = 0;
    staging = 0;
  }
  s.ranks.resize(1);  // every rank does the same: all S tokens for H/P heads
  set_core_sharing(s, c, 1, 1, std::min(P, c.devices_per_node));
  s.ranks[0].compute = {block_seconds(ctx, total_pairs, w.H / P, backward) +
                        (backward && total_pairs > 0 ? delta_seconds(ctx, z) : 0.0)};
  s.ranks[0].feed = {Feed{}};
  // Head layout holds the same element counts as the sequence layout (S·H/P = s·H), twice
  // (ulysses' backward: the saved context plus dO, dQ, dK, dV on the heads).
  s.memory_bytes = to_bytes(io_bytes(z, backward) + io_bytes(ze, backward) + staging);
  return s;
}

Schedule distflash_schedule(const Context& ctx, const std::vector<double>& pairs, bool backward) {
  const ClusterSpec& c = *ctx.cluster;
  const Workload& w = *ctx.workload;
  const int P = ctx.P;
  const Sizes z = sizes_for(w, w.H, w.H_kv, w.S_global / P);
  // DistFlashAttn's schedule as the strategy runs it (plan_strategies.h): blocks without a visible
  // pair are neither computed nor shipped.
  const strategies::DistFlashSchedule sched =
      strategies::make_distflash_schedule(P, [&](int q, int kv) { return pair_at(pairs, P, q, kv) > 0; });
  const int T = sched.steps;
  const double kv_in = 2 * z.b_kv * z.beta;
  const double q_in = backward ? 2 * z.b_q * z.beta + 2 * z.r * kAcc : z.b_q * z.beta;
  const double q_ret = backward ? z.b_q * kAcc : z.b_q * kAcc + z.r * kAcc;  // dQ | (O, lse)
  const double kv_ret = 2 * z.b_kv * kAcc;                                   // dK, dV partial
  Schedule s;
  s.ranks.resize(P);
  s.inter_link = inter_links(c, P, 1);
  set_core_sharing(s, c, P, 1, 1);
  for (auto& rs : s.ranks) {
    rs.compute.assign(T, 0.0);
    rs.feed.assign(T, Feed{});
  }
  auto send = [&](int src, int dst, double bytes, Feed& slot, int step) {
    slot.src = src;
    slot.step = step;
    slot.inter_node = crosses_nodes(c, src, dst);
    slot.seconds = link_seconds(c, bytes, slot.inter_node);
    s.ranks[src].bytes_sent += bytes;
  };
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < P; ++r) {
      RankSchedule& rs = s.ranks[r];
      const strategies::FlashBlock& local =
          sched.local[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
      const strategies::FlashBlock& help =
          sched.help[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
      if (local.valid()) {  // my queries against kv chunk r − t, its K, V prefetched one step ahead
        rs.compute[t] = block_seconds(ctx, pair_at(pairs, P, r, local.kv), w.H, backward);
        if (t >= 1) send(local.kv, r, kv_in, rs.feed[t], t - 1);
        if (t >= 1 && backward) {  // dK, dV partial back to the kv owner
          Feed f;
          send(r, local.kv, kv_ret, f, t);
          s.ranks[local.kv].end_feeds.push_back(f);
        }
      } else if (help.valid()) {  // a late rank's queries against my K, V; the partial goes back
        rs.compute[t] = block_seconds(ctx, pair_at(pairs, P, help.q, r), w.H, backward);
        send(help.q, r, q_in, rs.feed[t], t - 1);
        Feed f;
        send(r, help.q, q_ret, f, t);
        s.ranks[help.q].end_feeds.push_back(f);
      }
    }
  }
  if (backward)
    for (auto& rs : s.ranks) rs.compute[0] += delta_seconds(ctx, z);
  // Local Q, K, V, O plus two peer buffers each for Q, K, V, O and the row statistics.
  double mem = io_bytes(z, backward) + 2 * (2 * z.b_q + 2 * z.b_kv) * z.beta + 4 * z.r * kAcc;
  if (backward) mem += 2 * (z.b_q + 2 * z.b_kv) * kAcc;  // partial dQ / dK, dV buffers
  s.memory_bytes = to_bytes(mem);
  return s;
}

}  // namespace burst::cost
