// DistFlashAttn (arXiv 2310.03294): the load-balanced causal schedule and its execution,
// forward and backward. Schedule and byte formulas are pure (distflash.h); execution posts
// the next step's inputs before computing the current step (double buffering, as the paper's
// side-stream prefetch) and merges partial results in step order (deterministic).
#include "strategies/distflash.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "strategies/planned_strategy.h"
#include "strategies/pooled_tensor.h"
#include "strategies/step_log.h"
#include "strategies/step_params.h"
#include "strategies/step_tables.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {

namespace {

const FlashBlock& at(const std::vector<std::vector<FlashBlock>>& m, int t, int r) {
  return m[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
}

enum Kind : int { kKv = 0, kQuery = 1, kPartial = 2, kGrad = 3 };
int tag(int step, Kind kind) { return step * 4 + kind; }

/// dst += contiguous src of dst's shape (BSHD).
void add_bshd(const device::Device& dev, const TensorView& dst, const float* src) {
  dev.add(make_view(src, shape_of(dst)), dst);
}

/// One chunk of c tokens: its dimensions and element counts (Q or O, K or V, a row vector).
struct ChunkDims {
  std::int64_t B, c, H, H_kv, D;
  std::int64_t q() const { return B * c * H * D; }
  std::int64_t kv() const { return B * c * H_kv * D; }
  std::int64_t row() const { return B * H * c; }
  std::vector<std::int64_t> q_shape() const { return {B, c, H, D}; }
  std::vector<std::int64_t> kv_shape() const { return {B, c, H_kv, D}; }
  std::vector<std::int64_t> row_shape() const { return {B, H, c}; }
};

ChunkDims chunk_dims(const TensorView& q, const TensorView& k) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3)};
}

/// The kernel parameters of block (q chunk, kv chunk): positions (0 .. P·c − 1) at the chunks.
kernels::KernelParams block_params(const kernels::KernelParams& base, const std::int64_t* positions,
                                   const ChunkDims& d, const FlashBlock& blk) {
  kernels::KernelParams p = base;
  p.q_pos = positions + blk.q * d.c;
  p.kv_pos = positions + blk.kv * d.c;
  // base's host mirrors, when set, are `positions` in host memory (distflash.h).
  if (base.host_q_pos != nullptr) p.host_q_pos = base.host_q_pos + blk.q * d.c;
  if (base.host_kv_pos != nullptr) p.host_kv_pos = base.host_kv_pos + blk.kv * d.c;
  return p;
}

TensorView bshd(float* data, const ChunkDims& d, std::int64_t heads) {
  return make_view(data, {d.B, d.c, heads, d.D});
}

/// One of this rank's chunks as a message: packed in device memory, staged out when first sent
/// (a chunk no rank needs is never copied out) and sent again from its wire to every later rank
/// that needs it. recycle() hands both buffers back once every send completed.
class Payload {
 public:
  Payload(Stager& st, const WireLayout& layout, std::initializer_list<TensorView> fields)
      : st_(&st), block_(st.pool().get(layout.bytes())) {
    std::size_t i = 0;
    for (const TensorView& t : fields) pack_field(st.device(), layout, i++, t, block_.data());
  }
  Payload() = default;
  std::int64_t bytes() const { return staged_ ? static_cast<std::int64_t>(m_.wire.size()) : block_.size(); }
  /// The wire bytes (staged out on the first call).
  const ByteBuffer& wire() {
    if (!staged_) {
      m_ = st_->out(std::move(block_));
      staged_ = true;
    }
    return m_.wire;
  }
  void recycle() {
    if (!st_) return;
    if (staged_) st_->recycle(std::move(m_));
    st_->pool().put(std::move(block_));
  }

 private:
  Stager* st_ = nullptr;
  device::Buffer block_;
  Message m_;
  bool staged_ = false;
};

/// A received message's bytes in device memory: staged in (a no-op on a host-memory device).
struct Inbox {
  Stager& st;
  Message m;
  Inbox(Stager& s, ByteBuffer wire) : st(s), m(s.in(std::move(wire))) {}
  ~Inbox() { st.recycle(std::move(m)); }
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;
  const std::byte* data() { return st.device_ready(m); }
  const float* f32() { return static_cast<const float*>(static_cast<const void*>(data())); }
};

/// Returns the wire buffers of completed sends to the wire pool (the set is empty afterwards).
void recycle_sends(Stager& st, RequestSet& sends) {
  for (std::size_t i = 0; i < sends.size(); ++i) st.wire_pool().put_host(sends.take(i));
  sends = RequestSet{};
}

/// Posts the inputs of step t: what this rank receives (into `inbox`, index returned) and what
/// it sends to the ranks that need its chunk. `kv_payload` / `q_payload` are this rank's packed
/// chunks (wire::kv_block, and wire::query_only or wire::query_block).
struct StepInputs {
  RequestSet set;
  int kv_index = -1, q_index = -1;
};

void post_inputs(Stager& st, const Communicator& comm, const DistFlashSchedule& s, int t, Payload& kv_payload,
                 Payload& q_payload, StepInputs& in, RequestSet& sends) {
  const auto wire = [&](const Payload& like) { return st.wire_pool().get_host(like.bytes()); };
  const int me = comm.rank();
  if (t >= s.steps) return;
  const FlashBlock& lb = at(s.local, t, me);
  if (lb.valid()) {
    in.kv_index = static_cast<int>(in.set.add(comm.irecv(wire(kv_payload), lb.kv, tag(t, kKv))));
  }
  const FlashBlock& hb = at(s.help, t, me);
  if (hb.valid()) {
    in.q_index = static_cast<int>(in.set.add(comm.irecv(wire(q_payload), hb.q, tag(t, kQuery))));
  }
  for (int r = 0; r < s.P; ++r) {
    if (at(s.local, t, r).valid() && at(s.local, t, r).kv == me)
      sends.add(comm.isend(kv_payload.wire(), r, tag(t, kKv)));
    if (at(s.help, t, r).valid() && at(s.help, t, r).q == me)
      sends.add(comm.isend(q_payload.wire(), r, tag(t, kQuery)));
  }
}

}  // namespace

void distflash_forward(Stager& st, const Communicator& comm, const DistFlashSchedule& s,
                       const kernels::KernelParams& base, const std::int64_t* positions, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out, const TensorView& lse,
                       FlashOverlap ov, PassTimes& times) {
  const device::Device& dev = st.device();
  const int me = comm.rank(), P = s.P;
  const ChunkDims d = chunk_dims(q, k);
  Payload kv_payload, q_payload;  // this rank's chunks, staged out once, sent from their wire
  RequestSet sends;               // every isend of the pass; completed before returning
  StepInputs next;
  // Q, K, V travel in their storage dtype; partials (O, lse) fp32.
  const WireLayout kv_wire = wire::kv_block(k.dtype, d.kv()), q_wire = wire::query_only(q.dtype, d.q());
  const WireLayout result_wire = wire::out_lse(d.q(), d.row());
  if (s.steps > 1) {
    kv_payload = Payload(st, kv_wire, {k, v});
    q_payload = Payload(st, q_wire, {q});
    post_inputs(st, comm, s, 1, kv_payload, q_payload, next,
                sends);  // step 1's, under the diagonal
    if (!ov.inputs) times.comm_seconds += next.set.wait_all();
  }
  // The partial a helper returns at step t travels during step t + 1's compute and is merged
  // after it (LightSeq overlaps the returned partials the same way); the last one at the end.
  RequestSet pending;
  int pending_index = -1;
  const std::function<void()> poll = [&] {
    next.set.progress();
    pending.progress();
  };
  const auto params = [&](const FlashBlock& blk) {
    kernels::KernelParams p = block_params(base, positions, d, blk);
    if (ov.inputs) p.progress = &poll;
    return p;
  };
  const auto merge_pending = [&] {
    if (pending_index >= 0) {
      times.comm_seconds += pending.wait_all();
      Inbox result(st, pending.take(static_cast<std::size_t>(pending_index)));
      Stopwatch w(&times.compute_seconds);
      dev.merge_forward(out, lse, field_view(result_wire, 0, result.data(), d.q_shape()),
                        field_view(result_wire, 1, result.data(), d.row_shape()));
    }
    pending = RequestSet{};
    pending_index = -1;
  };
  {
    Stopwatch w(&times.compute_seconds);
    dev.step_forward(q, k, v, out, lse, params({me, me}));
  }
  TypedTensor part_out = pooled_tensor(st.pool(), d.q_shape(), DType::F32),
              part_lse = pooled_tensor(st.pool(), d.row_shape(), DType::F32);
  for (int t = 1; t < s.steps; ++t) {
    StepInputs cur = std::move(next);
    next = StepInputs{};
    times.comm_seconds += cur.set.wait_all();
    post_inputs(st, comm, s, t + 1, kv_payload, q_payload, next, sends);
    if (!ov.inputs) times.comm_seconds += next.set.wait_all();
    RequestSet results;
    int result_index = -1;
    // A helper returns the partial of our block (me, j) at this step: post its receive first.
    for (int r = 0; r < P; ++r) {
      const FlashBlock& hb = at(s.help, t, r);
      if (hb.valid() && hb.q == me)
        result_index = static_cast<int>(
            results.add(comm.irecv(st.wire_pool().get_host(result_wire.bytes()), r, tag(t, kPartial))));
    }
    const FlashBlock& hb = at(s.help, t, me);
    if (hb.valid()) {
      Inbox qi(st, cur.set.take(static_cast<std::size_t>(cur.q_index)));
      device::Buffer result = st.pool().get(result_wire.bytes());
      {
        Stopwatch w(&times.compute_seconds);
        dev.step_forward(field_view(q_wire, wire::kQ, qi.data(), d.q_shape()), k, v,
                         field_view(result_wire, 0, result.data(), d.q_shape()),
                         field_view(result_wire, 1, result.data(), d.row_shape()), params(hb));
      }
      sends.add(comm.isend(st.send_copy(std::move(result)), hb.q, tag(t, kPartial)));
    }
    const FlashBlock& lb = at(s.local, t, me);
    if (lb.valid()) {
      Inbox kv(st, cur.set.take(static_cast<std::size_t>(cur.kv_index)));
      Stopwatch w(&times.compute_seconds);
      dev.step_forward(q, field_view(kv_wire, wire::kK, kv.data(), d.kv_shape()),
                       field_view(kv_wire, wire::kV, kv.data(), d.kv_shape()), part_out.view(),
                       part_lse.view(), params(lb));
      dev.merge_forward(out, lse, part_out.view(), part_lse.view());
    }
    merge_pending();  // step t − 1's partial, which travelled during this step's compute
    // Without return overlap this step's partial is waited for now (merged at the same point).
    if (!ov.returns()) times.comm_seconds += results.wait_all();
    pending = std::move(results);
    pending_index = result_index;
  }
  merge_pending();
  times.comm_seconds += sends.wait_all();
  recycle_sends(st, sends);
  st.pool().put(part_out.release());
  st.pool().put(part_lse.release());
  kv_payload.recycle();
  q_payload.recycle();
}

void distflash_backward(Stager& st, const Communicator& comm, const DistFlashSchedule& s,
                        const kernels::KernelParams& base, const std::int64_t* positions,
                        const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, FlashOverlap ov, PassTimes& times) {
  const device::Device& dev = st.device();
  const int me = comm.rank(), P = s.P;
  const ChunkDims d = chunk_dims(q, k);
  TypedTensor delta = pooled_tensor(st.pool(), {d.B, d.H, d.c}, DType::F32);
  {
    Stopwatch w(&times.compute_seconds);
    dev.attention_delta(dout, out, delta.view());
  }
  Payload kv_payload, q_payload;  // this rank's chunks, staged out once, sent from their wire
  RequestSet sends;
  StepInputs next;
  // Q, dO, K, V travel in their storage dtype; lse, delta and the dQ, dK, dV partials in fp32.
  const WireLayout kv_wire = wire::kv_block(k.dtype, d.kv()),
                   q_wire = wire::query_block(q.dtype, d.q(), d.row());
  if (s.steps > 1) {
    kv_payload = Payload(st, kv_wire, {k, v});
    q_payload = Payload(st, q_wire, {q, dout, delta.view(), lse});
    post_inputs(st, comm, s, 1, kv_payload, q_payload, next,
                sends);  // step 1's transfer under the diagonal
    if (!ov.inputs) times.comm_seconds += next.set.wait_all();
  }
  // Gradients returned at step t (dK, dV to the KV owner, dQ to the query owner) travel during
  // step t + 1's compute and are added after it; the last ones at the end.
  RequestSet pending;
  int pending_dkv = -1, pending_dq = -1;
  const std::function<void()> poll = [&] {
    next.set.progress();
    pending.progress();
  };
  const auto params = [&](const FlashBlock& blk) {
    kernels::KernelParams p = block_params(base, positions, d, blk);
    if (ov.inputs) p.progress = &poll;
    return p;
  };
  const auto add_pending = [&] {
    times.comm_seconds += pending.wait_all();
    if (pending_dkv >= 0) {
      Inbox g(st, pending.take(static_cast<std::size_t>(pending_dkv)));
      add_bshd(dev, dk, g.f32());
      add_bshd(dev, dv, g.f32() + d.kv());
    }
    if (pending_dq >= 0) {
      Inbox g(st, pending.take(static_cast<std::size_t>(pending_dq)));
      add_bshd(dev, dq, g.f32());
    }
    pending = RequestSet{};
    pending_dkv = pending_dq = -1;
  };
  {
    Stopwatch w(&times.compute_seconds);
    dev.step_backward(dout, q, k, v, lse, delta.view(), dq, dk, dv, params({me, me}), false);
  }
  for (int t = 1; t < s.steps; ++t) {
    StepInputs cur = std::move(next);
    next = StepInputs{};
    times.comm_seconds += cur.set.wait_all();
    post_inputs(st, comm, s, t + 1, kv_payload, q_payload, next, sends);
    if (!ov.inputs) times.comm_seconds += next.set.wait_all();
    // Gradients coming back this step: dK, dV of our KV chunk from the query owner of our
    // local block, dQ of our queries from the helper.
    RequestSet grads;
    int dkv_index = -1, dq_index = -1;
    for (int r = 0; r < P; ++r) {
      const FlashBlock& lb = at(s.local, t, r);
      if (lb.valid() && lb.kv == me)
        dkv_index = static_cast<int>(
            grads.add(comm.irecv(st.wire_pool().get_host(kF32 * 2 * d.kv()), r, tag(t, kGrad))));
      const FlashBlock& hb = at(s.help, t, r);
      if (hb.valid() && hb.q == me)
        dq_index =
            static_cast<int>(grads.add(comm.irecv(st.wire_pool().get_host(kF32 * d.q()), r, tag(t, kGrad))));
    }
    const FlashBlock& hb = at(s.help, t, me);
    if (hb.valid()) {
      Inbox qs(st, cur.set.take(static_cast<std::size_t>(cur.q_index)));
      device::Buffer dq_part = st.pool().get_zeroed(kF32 * d.q());
      {
        Stopwatch w(&times.compute_seconds);
        dev.step_backward(field_view(q_wire, wire::kDout, qs.data(), d.q_shape()),
                          field_view(q_wire, wire::kQ, qs.data(), d.q_shape()), k, v,
                          field_view(q_wire, wire::kLse, qs.data(), d.row_shape()),
                          field_view(q_wire, wire::kDelta, qs.data(), d.row_shape()),
                          bshd(dq_part.f32(), d, d.H), dk, dv, params(hb), true);
      }
      sends.add(comm.isend(st.send_copy(std::move(dq_part)), hb.q, tag(t, kGrad)));
    }
    const FlashBlock& lb = at(s.local, t, me);
    if (lb.valid()) {
      Inbox kv(st, cur.set.take(static_cast<std::size_t>(cur.kv_index)));
      device::Buffer dkv = st.pool().get_zeroed(kF32 * 2 * d.kv());
      {
        Stopwatch w(&times.compute_seconds);
        dev.step_backward(dout, q, field_view(kv_wire, wire::kK, kv.data(), d.kv_shape()),
                          field_view(kv_wire, wire::kV, kv.data(), d.kv_shape()), lse, delta.view(), dq,
                          bshd(dkv.f32(), d, d.H_kv), bshd(dkv.f32() + d.kv(), d, d.H_kv), params(lb), true);
      }
      sends.add(comm.isend(st.send_copy(std::move(dkv)), lb.kv, tag(t, kGrad)));
    }
    add_pending();  // step t − 1's gradients, which travelled during this step's compute
    if (!ov.returns()) times.comm_seconds += grads.wait_all();
    pending = std::move(grads);
    pending_dkv = dkv_index;
    pending_dq = dq_index;
  }
  add_pending();
  times.comm_seconds += sends.wait_all();
  recycle_sends(st, sends);
  st.pool().put(delta.release());
  kv_payload.recycle();
  q_payload.recycle();
}

// ---------------------------------------------------------------- registration

namespace {

class DistFlashStrategy final : public PlannedStrategy {
 public:
  explicit DistFlashStrategy(const Setup& setup)
      : PlannedStrategy(setup),
        base_(step_params(setup, nullptr, nullptr, nullptr)),
        positions_(static_cast<std::size_t>(setup.shape.S_global)),
        overlap_{setup.cfg.overlap, setup.cfg.return_overlap},
        schedule_(make_distflash_schedule(*setup.resolved, setup.shape.S_global, setup.P)),
        stage_(*setup.device) {
    std::iota(positions_.begin(), positions_.end(), std::int64_t{0});
    twins_ = TableTwins(*setup.device, {&positions_});
    base_.host_q_pos = base_.host_kv_pos = positions_.data();  // the host twin of what the steps read
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    run(peak_fwd_, stats, [&](PassTimes& t) {
      distflash_forward(stage_, comm_, schedule_, base_, twins_.positions(positions_.data()), q, k, v, out,
                        lse, overlap_, t);
    });
  }
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    run(peak_bwd_, stats, [&](PassTimes& t) {
      distflash_backward(stage_, comm_, schedule_, base_, twins_.positions(positions_.data()), dout, q, k, v,
                         out, lse, dq, dk, dv, overlap_, t);
    });
  }

 private:
  kernels::KernelParams base_;
  std::vector<std::int64_t> positions_;  ///< 0 .. S_global − 1 (chunk i at i·c)
  TableTwins twins_;                     ///< positions_ in the device's memory (step_tables.h)
  FlashOverlap overlap_;
  DistFlashSchedule schedule_;
  Stager stage_;  // payload, partial and wire buffers kept across calls
};

}  // namespace

void validate_distflash(const DistConfig& cfg, const ProblemShape& shape, const ResolvedMask& mask, int P) {
  check_distflash_support(cfg.layout, shape, mask, P);
}

std::unique_ptr<Strategy> make_distflash(const Setup& setup) {
  return std::make_unique<DistFlashStrategy>(setup);
}

}  // namespace burst::strategies
