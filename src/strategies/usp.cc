// USP — Unified Sequence Parallelism (Fang & Zhao, arXiv 2405.07719; yunchang
// `hybrid/attn_layer.py`): P = u·r ranks as r Ulysses groups of u consecutive ranks
// (use_ulysses_low: the all-to-all stays on the closest ranks). Inside a group a
// seq→heads all-to-all gives every member the group's u·S_local tokens for H/u heads; the r
// members holding the same heads (one per group) then run a K,V ring over their groups'
// sequences (RingAttention forward; K,V + dK,dV ring backward); heads→seq returns the result.
// u = P is Ulysses, u = 1 is the KV ring. When the ring's members span nodes it runs on the
// topology-aware double ring (DistConfig::double_ring, the default; false keeps it flat), as
// ring and burst do. DistConfig::usp_ring = Burst is BurstEngine's hybrid (arXiv 2509.19836):
// the same all-to-alls with burst's ring across the groups (query-side backward).
// docs/strategies.md §usp.
#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "strategies/ring_skeleton.h"
#include "strategies/step_params.h"
#include "strategies/ulysses.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {
namespace {

/// Positions of the ranks [g·u, (g+1)·u) of the layout: one vector per member.
std::vector<std::vector<std::int64_t>> member_positions(const SequenceLayout& layout, int u, int g) {
  std::vector<std::vector<std::int64_t>> out;
  for (int m = 0; m < u; ++m) out.push_back(layout.positions[static_cast<std::size_t>(g * u + m)]);
  return out;
}

void add_times(PassTimes* times, const RingRunStats& rs) {
  if (!times) return;
  times->compute_seconds += rs.compute_seconds;
  times->comm_seconds += rs.exposed_comm_seconds;
}

/// The ring across the r groups on the gathered head-parallel tensors (contiguous), run by the
/// ring family's RingExecutor (double-buffered; ring member i holds group i's sequence).
/// Forward: the K,V ring with the online-softmax merge. Backward, `query_side` false (usp's
/// RingAttention): K,V circulate with their dK,dV write accumulator following them home.
/// `query_side` true (Burst-USP, BurstEngine arXiv 2509.19836; docs/strategies.md §usp):
/// burst's query-side backward (docs/algorithm.md §3) — Q, dO, delta, lse of a group circulate
/// while K, V, dK, dV stay, the group's dQ partial following. Either runs on the topology-aware
/// double ring when the members span nodes and DistConfig::double_ring (usp_ring_topology;
/// for the K,V ring LoongTrain's double-ring attention, arXiv 2406.18485 §4), else on a flat
/// ring. Blocks with no visible pair are skipped (the payload still moves).
class GroupRingAttention final : public GroupAttention {
 public:
  GroupRingAttention(const Communicator& ring, const device::Device& dev, RingTopology topo, bool overlap,
                     bool query_side, std::vector<std::vector<std::int64_t>> groups, const ResolvedMask& mask,
                     kernels::KernelParams base)
      : exec_(ring, dev, topo.nodes, topo.ranks_per_node, overlap),
        me_(ring.rank()),
        query_side_(query_side),
        groups_(std::move(groups)),
        base_(std::move(base)),
        overlap_(overlap) {
    const std::size_t r = groups_.size();
    pairs_.assign(r, std::vector<std::int64_t>(r));
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = 0; j < r; ++j) pairs_[i][j] = mask.visible_pairs(groups_[i], groups_[j]);
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, PassTimes* times) const override {
    device::BufferPool& pool = exec_.pool();
    const device::Device& dev = exec_.device();
    const DType dt = k.dtype;  // K, V travel in their storage dtype (bf16/f16: half the bytes)
    const WireLayout kv = wire::kv_block(dt, k.numel());
    device::Buffer own = pool.get(kv.bytes());
    pack_field(dev, kv, wire::kK, k, own.data());
    pack_field(dev, kv, wire::kV, v, own.data());
    device::Buffer out_mem = pool.get(kF32 * out.numel()), lse_mem = pool.get(kF32 * lse.numel());
    const TensorView part_out = make_view(out_mem.f32(), shape_of(out)),
                     part_lse = make_view(lse_mem.f32(), shape_of(lse));
    bool first = true;
    RingRunStats rs;
    exec_.run(
        std::move(own), 0,
        [&](int, int j, const std::byte* read, float*, const std::function<void()>& progress, RowSlice) {
          if (visible(me_, j) == 0) return;
          const TensorView kj = field_view(kv, wire::kK, read, shape_of(k)),
                           vj = field_view(kv, wire::kV, read, shape_of(v));
          if (first) {
            dev.step_forward(q, kj, vj, out, lse, params(me_, j, progress));
            first = false;
          } else {
            dev.step_forward(q, kj, vj, part_out, part_lse, params(me_, j, progress));
            dev.merge_forward(out, lse, part_out, part_lse);
          }
        },
        rs);
    if (first) {  // every block empty: rows see no key (out = 0, lse = −inf)
      dev.fill(out, 0.0f);
      dev.fill(lse, kNegInf);
    }
    pool.put(std::move(out_mem));
    pool.put(std::move(lse_mem));
    add_times(times, rs);
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, PassTimes* times) const override {
    device::BufferPool& pool = exec_.pool();
    const device::Device& dev = exec_.device();
    RingRunStats rs;
    if (query_side_) {
      // Read payload: Q, dO (storage dtype, one packed pair), delta, lse (fp32); write: dQ.
      const WireLayout qb = wire::query_block(q.dtype, q.numel(), lse.numel());
      dev.fill(dk, 0.0f);
      dev.fill(dv, 0.0f);
      device::Buffer own = pool.get(qb.bytes());
      pack_field(dev, qb, wire::kQ, q, own.data());
      pack_field(dev, qb, wire::kDout, dout, own.data());
      pack_field(dev, qb, wire::kDelta, delta, own.data());
      pack_field(dev, qb, wire::kLse, lse, own.data());
      device::Buffer dq_home = exec_.run(
          std::move(own), dq.numel(),
          [&](int, int j, const std::byte* read, float* write, const std::function<void()>& progress,
              RowSlice) {
            if (visible(j, me_) == 0) return;
            dev.step_backward(field_view(qb, wire::kDout, read, shape_of(dout)),
                              field_view(qb, wire::kQ, read, shape_of(q)), k, v,
                              field_view(qb, wire::kLse, read, shape_of(lse)),
                              field_view(qb, wire::kDelta, read, shape_of(delta)),
                              make_view(write, shape_of(dq)), dk, dv, params(j, me_, progress), true);
          },
          rs);
      unpack_into(dev, dq_home.f32(), dq);
      pool.put(std::move(dq_home));
    } else {
      // Read payload: K, V (storage dtype, one packed pair); write: dK, dV (fp32).
      const std::int64_t n = k.numel();
      const WireLayout kv = wire::kv_block(k.dtype, n);
      dev.fill(dq, 0.0f);
      device::Buffer own = pool.get(kv.bytes());
      pack_field(dev, kv, wire::kK, k, own.data());
      pack_field(dev, kv, wire::kV, v, own.data());
      device::Buffer dkv = exec_.run(
          std::move(own), 2 * n,
          [&](int, int j, const std::byte* read, float* write, const std::function<void()>& progress,
              RowSlice) {
            if (visible(me_, j) == 0) return;
            dev.step_backward(dout, q, field_view(kv, wire::kK, read, shape_of(k)),
                              field_view(kv, wire::kV, read, shape_of(v)), lse, delta, dq,
                              make_view(write, shape_of(dk)), make_view(write + n, shape_of(dv)),
                              params(me_, j, progress), true);
          },
          rs);
      unpack_into(dev, dkv.f32(), dk);
      unpack_into(dev, dkv.f32() + n, dv);
      pool.put(std::move(dkv));
    }
    add_times(times, rs);
  }

 private:
  std::int64_t visible(int q_group, int kv_group) const {
    return pairs_[static_cast<std::size_t>(q_group)][static_cast<std::size_t>(kv_group)];
  }
  kernels::KernelParams params(int q_group, int kv_group, const std::function<void()>& progress) const {
    kernels::KernelParams p = base_;
    p.q_pos = groups_[static_cast<std::size_t>(q_group)].data();
    p.kv_pos = groups_[static_cast<std::size_t>(kv_group)].data();
    if (overlap_) p.progress = &progress;
    return p;
  }

  RingExecutor exec_;
  int me_;
  bool query_side_;
  std::vector<std::vector<std::int64_t>> groups_;
  std::vector<std::vector<std::int64_t>>
      pairs_;  ///< visible pairs of group i's queries against group j's keys
  kernels::KernelParams base_;
  bool overlap_ = false;  ///< kernel calls poll the ring's transfers (DistConfig::overlap)
};

class UspStrategy final : public UlyssesFamilyBase {
 public:
  UspStrategy(const Setup& setup, int u)
      : UlyssesFamilyBase(setup, "usp"),
        layout_(setup.plan->layout()),
        groups_(groups(layout_, u)),
        ulysses_(setup.comm.split_channel(setup.rank / u, setup.rank % u)),
        ex_(*setup.device, member_positions(layout_, u, setup.rank / u),
            make_head_split(setup.shape.H, setup.shape.H_kv, u, "usp")),
        ring_(make_ring(setup, u, groups_)) {}

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    forward_in(ulysses_, ex_, *ring_, q, k, v, out, lse, stats);
  }
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    backward_in(ulysses_, ex_, *ring_, dout, q, k, v, out, lse, dq, dk, dv, stats);
  }

 private:
  static std::vector<std::vector<std::int64_t>> groups(const SequenceLayout& layout, int u) {
    return usp_ring_groups(layout, u);
  }
  static kernels::KernelParams ring_params(const Setup& setup) {
    return step_params(setup, nullptr, nullptr, nullptr);  // positions and hook set per call
  }
  /// The ring over the groups: members hold the same heads, ring rank = group index. Collective.
  static std::unique_ptr<GroupRingAttention> make_ring(const Setup& setup, int u,
                                                       const std::vector<std::vector<std::int64_t>>& groups) {
    const Communicator ring = setup.comm.split_channel(setup.rank % u, setup.rank / u);
    const bool burst = setup.cfg.usp_ring == UspRing::Burst;
    const RingTopology topo =
        usp_ring_topology(setup.P, u, setup.plan->ranks_per_node(), setup.cfg.double_ring);
    return std::make_unique<GroupRingAttention>(ring, *setup.device, topo, setup.cfg.overlap, burst, groups,
                                                *setup.resolved, ring_params(setup));
  }
  SequenceLayout layout_;
  std::vector<std::vector<std::int64_t>> groups_;
  Communicator ulysses_;
  UlyssesExchange ex_;
  std::unique_ptr<GroupRingAttention> ring_;
};

}  // namespace

void validate_usp(const DistConfig& cfg, const ProblemShape& shape, const ResolvedMask& mask, int P) {
  BURST_CHECK(cfg.ulysses_degree >= 0, InvalidArgument, "usp: ulysses_degree=", cfg.ulysses_degree,
              " must be ≥ 0 (0 picks the largest divisor of P dividing H_kv)");
  const int u = resolve_ulysses_degree(cfg.ulysses_degree, P, shape.H_kv);
  BURST_CHECK(P % u == 0, InvalidArgument, "usp: ulysses_degree=", u, " does not divide the ", P,
              " ranks (P = ulysses_degree · ring_degree)");
  // Every layout and every mask: the ring kernels see global positions of both sides. The ring
  // (RingExecutor) circulates equal-sized payloads, so the groups must hold equal token counts.
  make_head_split(shape.H, shape.H_kv, u, "usp");
  const SequenceLayout layout = make_layout(cfg.layout, P, shape.S_global, mask);
  for (int r = 1; r < P; ++r)
    BURST_CHECK(layout.positions[static_cast<std::size_t>(r)].size() == layout.positions[0].size(),
                Unsupported, "usp: its ring needs equal shards, but layout ", to_string(cfg.layout),
                " gives rank ", r, " ", layout.positions[static_cast<std::size_t>(r)].size(),
                " tokens and rank 0 ", layout.positions[0].size());
}

std::unique_ptr<Strategy> make_usp(const Setup& setup) {
  return std::make_unique<UspStrategy>(
      setup, resolve_ulysses_degree(setup.cfg.ulysses_degree, setup.P, setup.shape.H_kv));
}

}  // namespace burst::strategies
