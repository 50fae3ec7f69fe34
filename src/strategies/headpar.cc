// headpar — head-parallel attention over sequence-sharded Q, K, V (the attention of a
// Megatron-LM tensor-parallel layer, arXiv 1909.08053 / 2205.05198, started from Q, K, V instead
// of X; BurstAttention's "TP" column). Forward: all-gather every rank's [Q | K | V] (all heads),
// attention over the whole sequence for this rank's H/P heads, reduce-scatter of [O | lse]
// zero-padded to all heads. Backward: all-gather [Q | dO | K | V | lse | delta], local backward,
// reduce-scatter [dQ | dK | dV] (replicated KV heads are summed by it). It moves about twice
// Megatron-SP's bytes (Q, K, V and O are wider than X), does not shrink with GQA on the query
// side and nothing overlaps; Megatron tensor parallelism itself is the LM's `--strategy tp`
// (apps/lm/model_tp.h). docs/strategies.md § headpar.
#include <numeric>

#include "burst/attention.h"
#include "burst/error.h"
#include "strategies/ulysses.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {
namespace {

/// Field of a packed per-rank block: a BSHD tensor with `Hx` heads (H or H_kv) or a row
/// vector [B, H, S], of `dtype` (Q, K, V, dO in their storage dtype; rows and results fp32).
/// `lo`, `n`: the head range this rank computes on.
struct Part {
  bool row;
  std::int64_t Hx, lo, n;
  DType dtype = DType::F32;
};

/// One rank's block of `parts` over its S tokens, all heads: one field per part (a BSHD tensor
/// [B, S, Hx, D] or rows [B, Hx, S]) in its dtype.
WireLayout block_layout(const std::vector<Part>& parts, std::int64_t B, std::int64_t S, std::int64_t D) {
  WireLayout l;
  for (const Part& p : parts) l.add(p.row ? "rows" : "bshd", p.dtype, B * S * p.Hx * (p.row ? 1 : D));
  return l;
}

/// Part p of one member's packed block (field at `at`, that member's S tokens, all Hx heads)
/// narrowed to this rank's heads [lo, lo + n): [B, S, n, D] or rows [B, n, S].
TensorView part_heads(const Part& p, const std::byte* at, std::int64_t B, std::int64_t S, std::int64_t D) {
  const TensorView all = p.row ? make_view(static_cast<const void*>(at), p.dtype, {B, p.Hx, S})
                               : make_view(static_cast<const void*>(at), p.dtype, {B, S, p.Hx, D});
  return narrow(all, p.row ? 1 : 2, p.lo, p.lo + p.n);
}

/// Copies this rank's heads of every part of every rank's gathered block (laid out by
/// block_layout) into the position-ordered tensors `dst` (gathered [B, S_global, n, D] or rows
/// [B, n, S_global], contiguous): member i's tokens go to its rows of the group's sequence.
void unpack_gathered(const device::Device& dev, const std::byte* all, const UlyssesExchange& ex,
                     const std::vector<Part>& parts, const std::vector<TensorView>& dst, std::int64_t B,
                     std::int64_t D) {
  for (int i = 0; i < ex.split().u; ++i) {
    const WireLayout block = block_layout(parts, B, ex.local_length(i), D);
    for (std::size_t f = 0; f < parts.size(); ++f)
      dev.index_copy(part_heads(parts[f], all + block[f].offset, B, ex.local_length(i), D), dst[f],
                     parts[f].row ? 2 : 1, ex.rows(i).data(), ex.device_rows(i), true, false);
    all += block.bytes();
  }
}

/// Writes this rank's heads of every part into the reduce-scatter input `buf` (fp32; rank i's
/// tokens of every part, all heads): the other heads' slots are never written, so a buffer
/// zeroed once stays zero there across calls.
void pack_scatter(const device::Device& dev, std::byte* buf, const UlyssesExchange& ex,
                  const std::vector<Part>& parts, const std::vector<TensorView>& src, std::int64_t B,
                  std::int64_t D) {
  for (int i = 0; i < ex.split().u; ++i) {
    const WireLayout block = block_layout(parts, B, ex.local_length(i), D);  // fp32 fields only
    for (std::size_t f = 0; f < parts.size(); ++f)
      dev.index_copy(src[f], part_heads(parts[f], buf + block[f].offset, B, ex.local_length(i), D),
                     parts[f].row ? 2 : 1, ex.rows(i).data(), ex.device_rows(i), false, false);
    buf += block.bytes();
  }
}

class HeadParallelStrategy final : public PlannedStrategy {
 public:
  explicit HeadParallelStrategy(const Setup& setup)
      : PlannedStrategy(setup),
        ex_(*setup.device, setup.plan->layout().positions,
            make_head_split(setup.shape.H, setup.shape.H_kv, setup.P, "headpar")),
        base_(step_params(setup, nullptr, nullptr, nullptr)),
        shape_(setup.shape),
        me_(setup.rank) {
    base_.q_pos = base_.kv_pos = ex_.device_positions();            // uploaded once (a GPU)
    base_.host_q_pos = base_.host_kv_pos = ex_.positions().data();  // their host twins
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    if (ex_.split().u == 1) return forward_local(q, k, v, out, lse, stats);
    forward_pass(q, k, v, out, lse, stats);
  }
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    if (ex_.split().u == 1) return backward_local(dout, q, k, v, out, lse, dq, dk, dv, stats);
    backward_pass(dout, q, k, v, out, lse, dq, dk, dv, stats);
  }

 private:
  /// One rank: its tokens are the whole sequence in order and it owns every head, so the
  /// kernel runs on the caller's views; nothing is gathered or scattered.
  void forward_local(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const TensorView& lse, DistStats& stats) const {
    PassTimes t;
    {
      Stopwatch w(&t.compute_seconds);
      dev().step_forward(q, k, v, out, lse, base_);
    }
    fill_stats(stats, t, pairs_, 0);
  }
  void backward_local(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse, const TensorView& dq,
                      const TensorView& dk, const TensorView& dv, DistStats& stats) const {
    PassTimes t;
    TypedTensor delta = pooled_tensor(ex_.pool(), {shape_.B, shape_.H, q.size(1)}, DType::F32);
    {
      Stopwatch w(&t.compute_seconds);
      dev().attention_delta(dout, out, delta.view());
      dev().step_backward(dout, q, k, v, lse, delta.view(), dq, dk, dv, base_, false);
    }
    ex_.pool().put(delta.release());
    fill_stats(stats, t, pairs_, 4 * shape_.B * shape_.H * q.size(1));
  }

  void forward_pass(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, DistStats& stats) {
    PassTimes t;
    device::BufferPool& pool = ex_.pool();
    const HeadSplit& h = ex_.split();
    const std::int64_t B = shape_.B, D = shape_.D, S = ex_.group_length();
    const std::vector<Part> in_parts = {{false, h.H, h.q_lo(me_), h.heads, q.dtype},
                                        {false, h.H_kv, h.kv_lo(me_), h.kv_heads, k.dtype},
                                        {false, h.H_kv, h.kv_lo(me_), h.kv_heads, v.dtype}};
    TypedTensor qg = ex_.q_heads(B, D, q.dtype), kg = ex_.kv_heads(B, D, k.dtype),
                vg = ex_.kv_heads(B, D, v.dtype);
    TypedTensor og = ex_.q_heads(B, D, DType::F32), lg = ex_.row_heads(B);
    const std::vector<std::int64_t> c = block_bytes(in_parts);
    const WireLayout mine_in = block_layout(in_parts, B, ex_.local_length(me_), D);
    device::Buffer send = pool.get(c[static_cast<std::size_t>(me_)]), recv;
    {
      Stopwatch w(&t.comm_seconds);
      pack_field(dev(), mine_in, 0, q, send.data());
      pack_field(dev(), mine_in, 1, k, send.data());
      pack_field(dev(), mine_in, 2, v, send.data());
      recv = all_gather(send, c);
      unpack_gathered(dev(), recv.data(), ex_, in_parts, {qg.view(), kg.view(), vg.view()}, B, D);
    }
    {
      Stopwatch w(&t.compute_seconds);
      dev().step_forward(qg.view(), kg.view(), vg.view(), og.view(), lg.view(), base_);
    }
    const std::vector<Part> out_parts = {{false, h.H, h.q_lo(me_), h.heads},
                                         {true, h.H, h.q_lo(me_), h.heads}};
    const std::vector<std::int64_t> rc = block_floats(out_parts);
    device::Buffer mine;
    {
      Stopwatch w(&t.comm_seconds);
      device::Buffer& rs = scatter_input(rs_fwd_, sum(rc));
      pack_scatter(dev(), rs.data(), ex_, out_parts, {og.view(), lg.view()}, B, D);
      mine = reduce_scatter(rs, rc);
      unpack_into(dev(), mine.f32(), out);
      unpack_into(dev(), mine.f32() + out.numel(), lse);
    }
    const std::int64_t held = send.size() + recv.size() + mine.size() + rs_fwd_.size();
    fill_stats(stats, t, pairs_,
               kF32 * (B * S * (2 * h.heads + 2 * h.kv_heads) * D + B * h.heads * S) + held);
    ex_.recycle({&qg, &kg, &vg, &og, &lg});
    for (device::Buffer* x : {&send, &recv, &mine}) pool.put(std::move(*x));
  }

  void backward_pass(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                     const TensorView& dv, DistStats& stats) {
    PassTimes t;
    device::BufferPool& pool = ex_.pool();
    const HeadSplit& h = ex_.split();
    const std::int64_t B = shape_.B, D = shape_.D, S = ex_.group_length();
    TypedTensor delta = pooled_tensor(pool, {B, h.H, q.size(1)}, DType::F32);
    {
      Stopwatch w(&t.compute_seconds);
      dev().attention_delta(dout, out, delta.view());
    }
    const Part qp{false, h.H, h.q_lo(me_), h.heads, q.dtype},
        kvp{false, h.H_kv, h.kv_lo(me_), h.kv_heads, k.dtype};
    const Part rowp{true, h.H, h.q_lo(me_), h.heads};
    const std::vector<Part> in_parts = {qp, qp, kvp, kvp, rowp, rowp};
    TypedTensor qg = ex_.q_heads(B, D, q.dtype), dog = ex_.q_heads(B, D, dout.dtype);
    TypedTensor kg = ex_.kv_heads(B, D, k.dtype), vg = ex_.kv_heads(B, D, v.dtype);
    TypedTensor lg = ex_.row_heads(B), deltag = ex_.row_heads(B);
    const std::vector<std::int64_t> c = block_bytes(in_parts);
    const WireLayout mine_in = block_layout(in_parts, B, ex_.local_length(me_), D);
    device::Buffer send = pool.get(c[static_cast<std::size_t>(me_)]), recv;
    {
      Stopwatch w(&t.comm_seconds);
      std::size_t f = 0;
      for (const TensorView& x : {q, dout, k, v, lse, delta.view()})
        pack_field(dev(), mine_in, f++, x, send.data());
      recv = all_gather(send, c);
      unpack_gathered(dev(), recv.data(), ex_, in_parts,
                      {qg.view(), dog.view(), kg.view(), vg.view(), lg.view(), deltag.view()}, B, D);
    }
    TypedTensor dqg = ex_.q_heads(B, D, DType::F32), dkg = ex_.kv_heads(B, D, DType::F32),
                dvg = ex_.kv_heads(B, D, DType::F32);
    {
      Stopwatch w(&t.compute_seconds);
      dev().step_backward(dog.view(), qg.view(), kg.view(), vg.view(), lg.view(), deltag.view(), dqg.view(),
                          dkg.view(), dvg.view(), base_, false);
    }
    const Part dqp{false, h.H, h.q_lo(me_), h.heads}, dkvp{false, h.H_kv, h.kv_lo(me_), h.kv_heads};
    const std::vector<Part> out_parts = {dqp, dkvp, dkvp};
    const std::vector<std::int64_t> rc = block_floats(out_parts);
    device::Buffer mine;
    {
      Stopwatch w(&t.comm_seconds);
      device::Buffer& rs = scatter_input(rs_bwd_, sum(rc));
      pack_scatter(dev(), rs.data(), ex_, out_parts, {dqg.view(), dkg.view(), dvg.view()}, B, D);
      mine = reduce_scatter(rs, rc);
      unpack_into(dev(), mine.f32(), dq);
      unpack_into(dev(), mine.f32() + dq.numel(), dk);
      unpack_into(dev(), mine.f32() + dq.numel() + dk.numel(), dv);
    }
    const std::int64_t held = send.size() + recv.size() + mine.size() + rs_bwd_.size();
    fill_stats(stats, t, pairs_,
               kF32 * (B * S * (3 * h.heads + 4 * h.kv_heads) * D + 2 * B * h.heads * S) + held);
    ex_.recycle({&delta, &qg, &dog, &kg, &vg, &lg, &deltag, &dqg, &dkg, &dvg});
    for (device::Buffer* x : {&send, &recv, &mine}) pool.put(std::move(*x));
  }

  /// all_gather_v of this rank's packed block `send` (device memory, c[me] bytes) into every
  /// rank's blocks in rank order (a pool block of Σ c bytes), staged: out once, in once.
  device::Buffer all_gather(device::Buffer& send, const std::vector<std::int64_t>& c) const {
    return ex_.stager().collective(
        send, sum(c), [&](const ByteBuffer& sent, ByteBuffer& got) { comm_.all_gather_v(sent, c, got); });
  }
  /// reduce_scatter of the fp32 input `rs` (rank i's block: rc[i] values) into this rank's summed
  /// block (a pool block of rc[me] values), staged: the whole input out once, the block in once.
  device::Buffer reduce_scatter(device::Buffer& rs, const std::vector<std::int64_t>& rc) const {
    return ex_.stager().collective(rs, kF32 * rc[static_cast<std::size_t>(me_)],
                                   [&](const ByteBuffer& sent, ByteBuffer& got) {
                                     comm_.reduce_scatter(f32_data(sent), rc, f32_data(got));
                                   });
  }

  /// Bytes of every rank's block of `parts` (block_layout).
  std::vector<std::int64_t> block_bytes(const std::vector<Part>& parts) const {
    std::vector<std::int64_t> c(static_cast<std::size_t>(ex_.split().u), 0);
    for (int i = 0; i < ex_.split().u; ++i)
      c[static_cast<std::size_t>(i)] = block_layout(parts, shape_.B, ex_.local_length(i), shape_.D).bytes();
    return c;
  }
  /// fp32 values of every rank's block of `parts` (all fp32: the reduce-scatter's counts).
  std::vector<std::int64_t> block_floats(const std::vector<Part>& parts) const {
    std::vector<std::int64_t> c = block_bytes(parts);
    for (std::int64_t& x : c) x /= kF32;
    return c;
  }
  static std::int64_t sum(const std::vector<std::int64_t>& c) {
    return std::accumulate(c.begin(), c.end(), std::int64_t{0});
  }
  /// The reduce-scatter input of one pass kind (device memory), zeroed once: pack_scatter
  /// writes only this rank's heads, so every other slot stays zero across calls.
  device::Buffer& scatter_input(device::Buffer& buf, std::int64_t floats) const {
    if (buf.size() != kF32 * floats) {
      buf = dev().allocate(kF32 * floats, device::MemoryKind::Device);
      if (floats > 0) dev().fill(make_view(buf.f32(), {floats}), 0.0f);
    }
    return buf;
  }

  UlyssesExchange ex_;  // head split, position-sorted rows and the buffer pool (no all-to-all here)
  kernels::KernelParams base_;
  ProblemShape shape_;
  int me_ = 0;
  device::Buffer rs_fwd_, rs_bwd_;  // reduce-scatter inputs (scatter_input)
};

}  // namespace

void validate_headpar(const DistConfig&, const ProblemShape& shape, const ResolvedMask&, int P) {
  // Every layout and every mask: each rank sees the whole sequence for its heads.
  make_head_split(shape.H, shape.H_kv, P, "headpar");
}

std::unique_ptr<Strategy> make_headpar(const Setup& setup) {
  return std::make_unique<HeadParallelStrategy>(setup);
}

}  // namespace burst::strategies
