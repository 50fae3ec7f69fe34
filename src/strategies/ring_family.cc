// The ring passes of burst, ring and usp (see ring_family.h).
#include "strategies/ring_family.h"

#include <functional>

#include "burst/error.h"
#include "strategies/backward_spans.h"
#include "strategies/shaped_steps.h"
#include "strategies/step_log.h"
#include "strategies/step_params.h"
#include "strategies/step_tables.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {

namespace {

/// How a backward step's kernel work on n_q × n_kv rows is cut (backward_spans, or whole; on a
/// device that prefers shaped steps, cut further by shaped_spans).
std::vector<KernelSpan> spans(const RingBlocks& blocks, const std::int64_t* q_pos, std::int64_t n_q,
                              const std::int64_t* kv_pos, std::int64_t n_kv) {
  return backward_calls(*blocks.mask, blocks.split_backward, blocks.shaped, q_pos, n_q, kv_pos, n_kv);
}

/// One member's block: its dimensions and element counts of its Q (or O, dQ), its K (or V, dK,
/// dV) and one row vector (lse, delta).
struct LocalBlock {
  std::int64_t B, S, H, H_kv, D, q_numel, kv_numel, row_numel;
};

LocalBlock local_block(const TensorView& q, const TensorView& k) {
  const std::int64_t B = q.size(0), S = q.size(1), H = q.size(2), H_kv = k.size(2), D = q.size(3);
  return {B, S, H, H_kv, D, B * S * H * D, B * S * H_kv * D, B * H * S};
}

/// The kernel parameters of a step: queries at q_pos, keys at kv_pos, the hook when overlapping.
kernels::KernelParams params(const RingBlocks& blocks, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                             const std::function<void()>& progress) {
  kernels::KernelParams p = blocks.base;
  p.q_pos = blocks.tables ? blocks.tables->positions(q_pos) : q_pos;
  p.kv_pos = blocks.tables ? blocks.tables->positions(kv_pos) : kv_pos;
  p.host_q_pos = q_pos;  // their host twins: a GPU decides per step without reading the device's
  p.host_kv_pos = kv_pos;
  p.progress = blocks.overlap ? &progress : nullptr;
  return p;
}

/// Runs one pass: the mask-aware schedule (only needed blocks, owner to reader; ring_direct.cc)
/// when asked, else the full ring. query_rows: the circulating block holds queries (backward
/// query side), so member g needs block j when j's queries see g's keys. split_own: the own
/// block is computed in two halves (RingExecutor::run).
device::Buffer run_schedule(const RingExecutor& exec, const RingBlocks& blocks, bool mask_aware,
                            bool query_rows, device::Buffer own, std::int64_t write_floats,
                            const RingExecutor::StepFn& fn, RingRunStats& rs, bool split_own = false) {
  if (!mask_aware) return exec.run(std::move(own), write_floats, fn, rs, split_own);
  const int P = exec.ranks();
  std::vector<std::vector<char>> need(static_cast<std::size_t>(P),
                                      std::vector<char>(static_cast<std::size_t>(P)));
  for (int g = 0; g < P; ++g)
    for (int j = 0; j < P; ++j)
      need[static_cast<std::size_t>(g)][static_cast<std::size_t>(j)] =
          (query_rows ? blocks.visible(j, g) : blocks.visible(g, j)) > 0;
  return exec.run_direct(std::move(own), write_floats, need, fn, rs, split_own);
}

}  // namespace

RingRunStats ring_pass_forward(const RingExecutor& exec, const RingBlocks& blocks, bool mask_aware,
                               const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse, std::vector<StepTimes>* steps) {
  const LocalBlock d = local_block(q, k);
  const int g = exec.rank();
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
  rs.steps = steps;
  run_schedule(
      exec, blocks, mask_aware, false, std::move(own), 0,
      [&](int, int j, const std::byte* read, float*, const std::function<void()>& progress, RowSlice) {
        if (blocks.visible(g, j) == 0) return;  // no visible pair: skip the block
        const TensorView kj = field_view(kv, wire::kK, read, {d.B, d.S, d.H_kv, d.D});
        const TensorView vj = field_view(kv, wire::kV, read, {d.B, d.S, d.H_kv, d.D});
        const std::int64_t *q_pos = blocks.positions[static_cast<std::size_t>(g)],
                           *kv_pos = blocks.positions[static_cast<std::size_t>(j)];
        // One call, or one per query piece over the keys it sees (rows no piece covers: out 0,
        // lse −inf, what a call over them would write).
        const auto step = [&](const TensorView& o, const TensorView& l) {
          shaped_forward(dev, *blocks.mask, blocks.shaped, q_pos, kv_pos, q, kj, vj, o, l,
                         [&](std::int64_t q0, std::int64_t k0) {
                           return params(blocks, q_pos + q0, kv_pos + k0, progress);
                         });
        };
        if (first) {
          step(out, lse);
          first = false;
        } else {
          step(out_part, lse_part);
          dev.merge_forward(out, lse, out_part, lse_part);
        }
      },
      rs);
  if (first) fill_unseen(dev, out, lse, 0, d.S);  // every block empty
  pool.put(std::move(out_mem));
  pool.put(std::move(lse_mem));
  return rs;
}

RingRunStats ring_pass_backward(const RingExecutor& exec, const RingBlocks& blocks, bool mask_aware,
                                BackwardSide side, const TensorView& dout, const TensorView& q,
                                const TensorView& k, const TensorView& v, const TensorView& lse,
                                const TensorView& delta, const TensorView& dq, const TensorView& dk,
                                const TensorView& dv, std::vector<StepTimes>* steps, const TensorView* out) {
  const LocalBlock d = local_block(q, k);
  const int g = exec.rank();
  device::BufferPool& pool = exec.pool();
  const device::Device& dev = exec.device();
  RingRunStats rs;
  rs.steps = steps;
  const DType dt = q.dtype;  // Q, dO, K, V travel in their storage dtype; delta, lse, partials fp32
  const auto pos = [&](int block) { return blocks.positions[static_cast<std::size_t>(block)]; };
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
        exec, blocks, mask_aware, true, std::move(own), d.q_numel,
        [&](int, int j, const std::byte* read, float* write, const std::function<void()>& progress,
            RowSlice slice) {
          if (blocks.visible(j, g) == 0) return;
          const std::int64_t r0 = slice.begin(d.S), r1 = slice.end(d.S);  // the block's query rows
          const std::int64_t *q_pos = pos(j), *kv_pos = pos(g);
          // One call per key chunk, on the query rows that see it (spans).
          for (const KernelSpan& sp : spans(blocks, q_pos + r0, r1 - r0, kv_pos, d.S)) {
            const std::int64_t a = r0 + sp.q0, e = r0 + sp.q1;
            const TensorView qj = narrow(field_view(qb, wire::kQ, read, {d.B, d.S, d.H, d.D}), 1, a, e);
            const TensorView doj = narrow(field_view(qb, wire::kDout, read, {d.B, d.S, d.H, d.D}), 1, a, e);
            const TensorView deltaj = narrow(field_view(qb, wire::kDelta, read, {d.B, d.H, d.S}), 2, a, e);
            const TensorView lsej = narrow(field_view(qb, wire::kLse, read, {d.B, d.H, d.S}), 2, a, e);
            dev.step_backward(doj, qj, narrow(k, 1, sp.k0, sp.k1), narrow(v, 1, sp.k0, sp.k1), lsej, deltaj,
                              narrow(bshd_view(write, d.B, d.S, d.H, d.D), 1, a, e),
                              narrow(dk, 1, sp.k0, sp.k1), narrow(dv, 1, sp.k0, sp.k1),
                              params(blocks, q_pos + a, kv_pos + sp.k0, progress), true);
          }
        },
        rs, blocks.split_backward);
    unpack_into(dev, dq_home.f32(), dq);
    pool.put(std::move(dq_home));
  } else {
    // Read payload: K, V of the block's owner; write: that block's dK, dV partials.
    const WireLayout kv = wire::kv_block(dt, d.kv_numel);
    device::Buffer own = pool.get(kv.bytes());
    pack_field(dev, kv, wire::kK, k, own.data());
    pack_field(dev, kv, wire::kV, v, own.data());
    dev.fill(dq, 0.0f);
    device::Buffer dkv_home = run_schedule(
        exec, blocks, mask_aware, false, std::move(own), 2 * d.kv_numel,
        [&](int, int j, const std::byte* read, float* write, const std::function<void()>& progress,
            RowSlice slice) {
          if (blocks.visible(g, j) == 0) return;
          const std::int64_t r0 = slice.begin(d.S), r1 = slice.end(d.S);  // the block's key rows
          const std::int64_t *q_pos = pos(g), *kv_pos = pos(j);
          // One call per key chunk, on the query rows that see it (spans).
          for (const KernelSpan& sp : spans(blocks, q_pos, d.S, kv_pos + r0, r1 - r0)) {
            const std::int64_t a = r0 + sp.k0, e = r0 + sp.k1;
            const TensorView out_rows = out != nullptr ? narrow(*out, 1, sp.q0, sp.q1) : TensorView{};
            const TensorView kj = narrow(field_view(kv, wire::kK, read, {d.B, d.S, d.H_kv, d.D}), 1, a, e);
            const TensorView vj = narrow(field_view(kv, wire::kV, read, {d.B, d.S, d.H_kv, d.D}), 1, a, e);
            dev.step_backward(narrow(dout, 1, sp.q0, sp.q1), narrow(q, 1, sp.q0, sp.q1), kj, vj,
                              narrow(lse, 2, sp.q0, sp.q1), narrow(delta, 2, sp.q0, sp.q1),
                              narrow(dq, 1, sp.q0, sp.q1),
                              narrow(bshd_view(write, d.B, d.S, d.H_kv, d.D), 1, a, e),
                              narrow(bshd_view(write + d.kv_numel, d.B, d.S, d.H_kv, d.D), 1, a, e),
                              params(blocks, q_pos + sp.q0, kv_pos + a, progress), true,
                              out != nullptr ? &out_rows : nullptr);
          }
        },
        rs, blocks.split_backward);
    unpack_into(dev, dkv_home.f32(), dk);
    unpack_into(dev, dkv_home.f32() + d.kv_numel, dv);
    pool.put(std::move(dkv_home));
  }
  return rs;
}

namespace {

/// burst and ring: the ring over the P ranks, block j = rank j's tokens in the plan's layout.
class RingFamilyStrategy final : public Strategy {
 public:
  RingFamilyStrategy(const Setup& setup, bool kv_side_backward)
      : setup_(setup),
        exec_(setup.comm, *setup.device, setup.plan->nodes(), setup.plan->ranks_per_node(), setup.cfg.overlap,
              setup.cfg.partials_dtype),
        kv_side_backward_(kv_side_backward) {
    for (int j = 0; j < setup.P; ++j) {
      blocks_.positions.push_back(rank_positions(setup, j).data());
      std::vector<std::int64_t> row;
      for (int i = 0; i < setup.P; ++i) row.push_back(block_pairs(setup, j, i));
      blocks_.pairs.push_back(std::move(row));
    }
    blocks_.mask = setup.resolved.get();
    blocks_.base = step_params(setup, nullptr, nullptr, nullptr);
    blocks_.tables = setup.tables ? &setup.tables->position_twins() : nullptr;
    blocks_.overlap = setup.cfg.overlap;
    blocks_.shaped = setup.device->prefers_shaped_steps();
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    const PassPlan& pass = setup_.plan->forward();
    std::vector<StepTimes> steps;
    const RingRunStats rs = ring_pass_forward(exec_, blocks_, pass.mask_aware, q, k, v, out, lse,
                                              setup_.cfg.timeline ? &steps : nullptr);
    record_timeline(setup_, "fwd", steps);
    const LocalBlock d = local_block(q, k);
    fill_stats(stats, {rs.compute_seconds, rs.exposed_comm_seconds}, pass.visible_pairs[rank()],
               rs.buffer_bytes + kF32 * (d.q_numel + d.row_numel));
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    const BackwardSide side = kv_side_backward_ ? BackwardSide::KvSide : setup_.plan->backward_side();
    const PassPlan& pass = setup_.plan->backward();
    const LocalBlock d = local_block(q, k);
    device::Buffer delta_mem = exec_.pool().get(kF32 * d.row_numel);
    const TensorView delta = rows_view(delta_mem.f32(), d.B, d.H, d.S);
    exec_.device().attention_delta(dout, out, delta);
    std::vector<StepTimes> steps;
    const RingRunStats rs =
        ring_pass_backward(exec_, blocks_, pass.mask_aware, side, dout, q, k, v, lse, delta, dq, dk, dv,
                           setup_.cfg.timeline ? &steps : nullptr, &out);
    exec_.pool().put(std::move(delta_mem));
    record_timeline(setup_, "bwd", steps);
    fill_stats(stats, {rs.compute_seconds, rs.exposed_comm_seconds}, pass.visible_pairs[rank()],
               rs.buffer_bytes + kF32 * d.row_numel);
    stats.backward_side = side == BackwardSide::QuerySide ? "query" : "kv";
  }

 private:
  std::size_t rank() const { return static_cast<std::size_t>(setup_.rank); }

  Setup setup_;
  RingExecutor exec_;
  RingBlocks blocks_;
  bool kv_side_backward_;
};

}  // namespace

std::unique_ptr<Strategy> make_ring_family(const Setup& setup, bool kv_side_backward) {
  return std::make_unique<RingFamilyStrategy>(setup, kv_side_backward);
}

}  // namespace burst::strategies
