// Forward and the two backward circulations of the ring family (see ring_family.h).
#include "strategies/ring_family.h"

#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "strategies/backward_spans.h"
#include "strategies/step_params.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {

namespace {

/// One rank's block: its dimensions (S = S_local) and element counts of its Q (or O, dQ), its K
/// (or V, dK, dV) and one row vector (lse, delta).
struct LocalBlock {
  std::int64_t B, S, H, H_kv, D, q_numel, kv_numel, row_numel;
};

LocalBlock local_block(const Setup& setup) {
  const ProblemShape& s = setup.shape;
  const std::int64_t S = s.S_global / setup.P;
  return {s.B, S, s.H, s.H_kv, s.D, s.B * S * s.H * s.D, s.B * S * s.H_kv * s.D, s.B * s.H * S};
}

/// Runs one pass on the plan's schedule: the mask-aware one (only needed blocks, owner to reader;
/// ring_direct.cc) when the plan chose it, else the full ring. query_rows: the circulating block
/// holds queries (backward query side), so rank g needs block j when j's queries see g's keys.
/// split_own: the own block is computed in two halves (RingExecutor::run).
device::Buffer run_schedule(const Setup& setup, const RingExecutor& exec, const PassPlan& pass,
                            bool query_rows, device::Buffer own, std::int64_t write_floats,
                            const RingExecutor::StepFn& fn, RingRunStats& rs, bool split_own = false) {
  if (!pass.mask_aware) return exec.run(std::move(own), write_floats, fn, rs, split_own);
  const int P = setup.P;
  std::vector<std::vector<char>> need(static_cast<std::size_t>(P),
                                      std::vector<char>(static_cast<std::size_t>(P)));
  for (int g = 0; g < P; ++g)
    for (int j = 0; j < P; ++j)
      need[static_cast<std::size_t>(g)][static_cast<std::size_t>(j)] =
          (query_rows ? block_pairs(setup, j, g) : block_pairs(setup, g, j)) > 0;
  return exec.run_direct(std::move(own), write_floats, need, fn, rs, split_own);
}

}  // namespace

void ring_forward(const Setup& setup, const RingExecutor& exec, const TensorView& q, const TensorView& k,
                  const TensorView& v, const TensorView& out, const TensorView& lse, DistStats& stats) {
  const LocalBlock d = local_block(setup);
  const int g = setup.rank;
  const DType dt = k.dtype;  // K, V travel in their storage dtype (bf16/f16: half the bytes)
  device::BufferPool& pool = exec.pool();
  const device::Device& dev = exec.device();
  const WireLayout kv = wire::kv_block(dt, d.kv_numel);
  device::Buffer own = pool.get(kv.bytes());
  pack_field(dev, kv, wire::kK, k, own.data());
  pack_field(dev, kv, wire::kV, v, own.data());
  device::Buffer out_mem = pool.get(kF32 * d.q_numel), lse_mem = pool.get(kF32 * d.row_numel);
  const TensorView out_part = bshd_view(out_mem.f32(), d.B, d.S, d.H, d.D),
                   lse_part = rows_view(lse_mem.f32(), d.B, d.H, d.S);
  bool first = true;
  RingRunStats rs;
  std::vector<StepTimes> steps;
  if (setup.cfg.timeline) rs.steps = &steps;
  run_schedule(
      setup, exec, setup.plan->forward(), false, std::move(own), 0,
      [&](int, int j, const std::byte* read, float*, const std::function<void()>& progress, RowSlice) {
        if (block_pairs(setup, g, j) == 0) return;  // no visible pair: skip the block
        const TensorView kj = field_view(kv, wire::kK, read, {d.B, d.S, d.H_kv, d.D});
        const TensorView vj = field_view(kv, wire::kV, read, {d.B, d.S, d.H_kv, d.D});
        const kernels::KernelParams p =
            step_params(setup, rank_positions(setup, g).data(), rank_positions(setup, j).data(), &progress);
        if (first) {
          dev.step_forward(q, kj, vj, out, lse, p);
          first = false;
        } else {
          dev.step_forward(q, kj, vj, out_part, lse_part, p);
          dev.merge_forward(out, lse, out_part, lse_part);
        }
      },
      rs);
  if (first) {  // every block empty: rows see no key (out = 0, lse = −inf)
    dev.fill(out, 0.0f);
    dev.fill(lse, kNegInf);
  }
  pool.put(std::move(out_mem));
  pool.put(std::move(lse_mem));
  record_timeline(setup, "fwd", steps);
  stats.compute_seconds = rs.compute_seconds;
  stats.exposed_comm_seconds = rs.exposed_comm_seconds;
  stats.peak_buffer_bytes = rs.buffer_bytes + kF32 * (d.q_numel + d.row_numel);
  stats.visible_pairs = setup.plan->forward().visible_pairs[static_cast<std::size_t>(g)];
}

void ring_backward(const Setup& setup, const RingExecutor& exec, BackwardSide side, const TensorView& dout,
                   const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                   const TensorView& lse, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                   DistStats& stats) {
  const LocalBlock d = local_block(setup);
  const int g = setup.rank;
  device::BufferPool& pool = exec.pool();
  const device::Device& dev = exec.device();
  device::Buffer delta_mem = pool.get(kF32 * d.row_numel);
  const TensorView delta = rows_view(delta_mem.f32(), d.B, d.H, d.S);
  dev.attention_delta(dout, out, delta);
  RingRunStats rs;
  std::vector<StepTimes> steps;
  if (setup.cfg.timeline) rs.steps = &steps;
  const DType dt = q.dtype;  // Q, dO, K, V travel in their storage dtype; delta, lse, partials fp32
  if (side == BackwardSide::QuerySide) {
    // Read payload: Q, dO, delta, lse of the block's owner; write: that block's dQ partial.
    const WireLayout qb = wire::query_block(dt, d.q_numel, d.row_numel);
    device::Buffer own = pool.get(qb.bytes());
    pack_field(dev, qb, wire::kQ, q, own.data());
    pack_field(dev, qb, wire::kDout, dout, own.data());
    pack_field(dev, qb, wire::kDelta, delta, own.data());
    pack_field(dev, qb, wire::kLse, lse, own.data());
    dev.fill(dk, 0.0f);
    dev.fill(dv, 0.0f);
    device::Buffer dq_home = run_schedule(
        setup, exec, setup.plan->backward(), true, std::move(own), d.q_numel,
        [&](int, int j, const std::byte* read, float* write, const std::function<void()>& progress,
            RowSlice slice) {
          if (block_pairs(setup, j, g) == 0) return;
          const std::int64_t r0 = slice.begin(d.S), r1 = slice.end(d.S);  // the block's query rows
          const std::int64_t* q_pos = rank_positions(setup, j).data();
          const std::int64_t* kv_pos = rank_positions(setup, g).data();
          // One call per key chunk, on the query rows that see it (backward_spans).
          for (const KernelSpan& sp : backward_spans(*setup.resolved, q_pos + r0, r1 - r0, kv_pos, d.S)) {
            const std::int64_t a = r0 + sp.q0, e = r0 + sp.q1;
            const TensorView qj = narrow(field_view(qb, wire::kQ, read, {d.B, d.S, d.H, d.D}), 1, a, e);
            const TensorView doj = narrow(field_view(qb, wire::kDout, read, {d.B, d.S, d.H, d.D}), 1, a, e);
            const TensorView deltaj = narrow(field_view(qb, wire::kDelta, read, {d.B, d.H, d.S}), 2, a, e);
            const TensorView lsej = narrow(field_view(qb, wire::kLse, read, {d.B, d.H, d.S}), 2, a, e);
            const kernels::KernelParams p = step_params(setup, q_pos + a, kv_pos + sp.k0, &progress);
            dev.step_backward(doj, qj, narrow(k, 1, sp.k0, sp.k1), narrow(v, 1, sp.k0, sp.k1), lsej, deltaj,
                              narrow(bshd_view(write, d.B, d.S, d.H, d.D), 1, a, e),
                              narrow(dk, 1, sp.k0, sp.k1), narrow(dv, 1, sp.k0, sp.k1), p, true);
          }
        },
        rs, true);
    unpack_into(dev, dq_home.f32(), dq);
    pool.put(std::move(dq_home));
    stats.backward_side = "query";
  } else {
    // Read payload: K, V of the block's owner; write: that block's dK, dV partials.
    const WireLayout kv = wire::kv_block(dt, d.kv_numel);
    device::Buffer own = pool.get(kv.bytes());
    pack_field(dev, kv, wire::kK, k, own.data());
    pack_field(dev, kv, wire::kV, v, own.data());
    dev.fill(dq, 0.0f);
    device::Buffer dkv_home = run_schedule(
        setup, exec, setup.plan->backward(), false, std::move(own), 2 * d.kv_numel,
        [&](int, int j, const std::byte* read, float* write, const std::function<void()>& progress,
            RowSlice slice) {
          if (block_pairs(setup, g, j) == 0) return;
          const std::int64_t r0 = slice.begin(d.S), r1 = slice.end(d.S);  // the block's key rows
          const std::int64_t* q_pos = rank_positions(setup, g).data();
          const std::int64_t* kv_pos = rank_positions(setup, j).data();
          // One call per key chunk, on the query rows that see it (backward_spans).
          for (const KernelSpan& sp : backward_spans(*setup.resolved, q_pos, d.S, kv_pos + r0, r1 - r0)) {
            const std::int64_t a = r0 + sp.k0, e = r0 + sp.k1;
            const TensorView kj = narrow(field_view(kv, wire::kK, read, {d.B, d.S, d.H_kv, d.D}), 1, a, e);
            const TensorView vj = narrow(field_view(kv, wire::kV, read, {d.B, d.S, d.H_kv, d.D}), 1, a, e);
            const kernels::KernelParams p = step_params(setup, q_pos + sp.q0, kv_pos + a, &progress);
            dev.step_backward(narrow(dout, 1, sp.q0, sp.q1), narrow(q, 1, sp.q0, sp.q1), kj, vj,
                              narrow(lse, 2, sp.q0, sp.q1), narrow(delta, 2, sp.q0, sp.q1),
                              narrow(dq, 1, sp.q0, sp.q1),
                              narrow(bshd_view(write, d.B, d.S, d.H_kv, d.D), 1, a, e),
                              narrow(bshd_view(write + d.kv_numel, d.B, d.S, d.H_kv, d.D), 1, a, e), p, true);
          }
        },
        rs, true);
    unpack_into(dev, dkv_home.f32(), dk);
    unpack_into(dev, dkv_home.f32() + d.kv_numel, dv);
    pool.put(std::move(dkv_home));
    stats.backward_side = "kv";
  }
  pool.put(std::move(delta_mem));
  record_timeline(setup, "bwd", steps);
  stats.compute_seconds = rs.compute_seconds;
  stats.exposed_comm_seconds = rs.exposed_comm_seconds;
  stats.peak_buffer_bytes = rs.buffer_bytes + kF32 * d.row_numel;
  stats.visible_pairs = setup.plan->backward().visible_pairs[static_cast<std::size_t>(g)];
}

namespace {

class RingFamilyStrategy final : public Strategy {
 public:
  RingFamilyStrategy(const Setup& setup, bool kv_side_backward)
      : setup_(setup),
        exec_(setup.comm, *setup.device, setup.plan->nodes(), setup.plan->ranks_per_node(), setup.cfg.overlap,
              setup.cfg.partials_dtype),
        kv_side_backward_(kv_side_backward) {}

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    ring_forward(setup_, exec_, q, k, v, out, lse, stats);
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    const BackwardSide side = kv_side_backward_ ? BackwardSide::KvSide : setup_.plan->backward_side();
    ring_backward(setup_, exec_, side, dout, q, k, v, out, lse, dq, dk, dv, stats);
  }

 private:
  Setup setup_;
  RingExecutor exec_;
  bool kv_side_backward_;
};

}  // namespace

std::unique_ptr<Strategy> make_ring_family(const Setup& setup, bool kv_side_backward) {
  return std::make_unique<RingFamilyStrategy>(setup, kv_side_backward);
}

}  // namespace burst::strategies
