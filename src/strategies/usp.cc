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
#include "strategies/ring_family.h"
#include "strategies/ring_skeleton.h"
#include "strategies/step_params.h"
#include "strategies/step_tables.h"
#include "strategies/ulysses.h"

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

/// The ring across the r groups on the gathered head-parallel tensors (contiguous): the ring
/// family's passes (ring_family.h) with ring member i holding group i's sequence for the
/// member's heads. Forward: the K,V ring with the online-softmax merge. Backward, `query_side`
/// false (usp's RingAttention): K,V circulate with their dK,dV write accumulator following them
/// home. `query_side` true (Burst-USP, BurstEngine arXiv 2509.19836; docs/strategies.md §usp):
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
        query_side_(query_side),
        groups_(std::move(groups)),
        twins_(dev, tables_of(groups_)) {
    for (const auto& gi : groups_) {
      blocks_.positions.push_back(gi.data());
      std::vector<std::int64_t> row;
      for (const auto& gj : groups_) row.push_back(mask.visible_pairs(gi, gj));
      blocks_.pairs.push_back(std::move(row));
    }
    blocks_.mask = &mask;  // DistAttention keeps it alive (Setup::resolved)
    blocks_.base = std::move(base);
    blocks_.tables = &twins_;  // the groups' positions uploaded once (a GPU), read by every step
    blocks_.overlap = overlap;
    blocks_.split_backward = false;
    // On a device that prefers whole-shaped steps (a GPU: cuDNN takes bands only) the forward's
    // blocks are cut as the ring family's are and the backward's by shaped_spans from the whole
    // block (a group block between groups is no band whole).
    blocks_.shaped = dev.prefers_shaped_steps();
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, PassTimes* times) const override {
    add_times(times, ring_pass_forward(exec_, blocks_, false, q, k, v, out, lse, nullptr));
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, PassTimes* times) const override {
    const BackwardSide side = query_side_ ? BackwardSide::QuerySide : BackwardSide::KvSide;
    add_times(times, ring_pass_backward(exec_, blocks_, false, side, dout, q, k, v, lse, delta, dq, dk, dv,
                                        nullptr));
  }

 private:
  RingExecutor exec_;
  bool query_side_;
  std::vector<std::vector<std::int64_t>> groups_;  ///< group i's global positions (blocks_ points here)
  TableTwins twins_;                               ///< their device twins (step_tables.h)
  RingBlocks blocks_;
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
