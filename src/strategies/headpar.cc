// headpar — head-parallel attention over sequence-sharded Q, K, V (the attention of a
// Megatron-LM tensor-parallel layer, arXiv 1909.08053 / 2205.05198, started from Q, K, V instead
// of X; BurstAttention's "TP" column). Forward: all-gather every rank's [Q | K | V] (all heads),
// attention over the whole sequence for this rank's H/P heads, reduce-scatter of [O | lse]
// zero-padded to all heads. Backward: all-gather [Q | dO | K | V | lse | delta], local backward,
// reduce-scatter [dQ | dK | dV] (replicated KV heads are summed by it). It moves about twice
// Megatron-SP's bytes (Q, K, V and O are wider than X), does not shrink with GQA on the query
// side and nothing overlaps; Megatron tensor parallelism itself is the LM's `--strategy tp`
// (apps/lm/model_tp.h). docs/strategies.md § headpar.
#include <cstring>
#include <numeric>

#include "burst/attention.h"
#include "burst/error.h"
#include "strategies/common.h"
#include "strategies/ulysses.h"

namespace burst::strategies {
namespace {

std::int64_t at_bshd(const TensorView& v, std::int64_t b, std::int64_t s, std::int64_t h) {
  return b * v.stride[0] + s * v.stride[1] + h * v.stride[2];
}
std::int64_t at_row(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t s) {
  return b * v.stride[0] + h * v.stride[1] + s * v.stride[2];
}

/// Field of a packed per-rank block: a BSHD tensor with `Hx` heads (H or H_kv) or a row
/// vector [B, H, S]. `lo`, `n`: the head range this rank computes on.
struct Part {
  bool row;
  std::int64_t Hx, lo, n;
};

std::int64_t part_floats(const Part& p, std::int64_t B, std::int64_t S, std::int64_t D) {
  return B * S * p.Hx * (p.row ? 1 : D);
}

/// Copies this rank's heads of every part of every rank's gathered block into the
/// position-ordered tensors `dst` (gathered [B, S_global, n, D] or rows [B, n, S_global]).
void unpack_gathered(const std::vector<float>& all, const UlyssesExchange& ex, const std::vector<Part>& parts,
                     const std::vector<TensorView>& dst, std::int64_t B, std::int64_t D) {
  const float* in = all.data();
  for (int i = 0; i < ex.split().u; ++i) {
    const auto& rows = ex.rows(i);
    const std::int64_t S = ex.local_length(i);
    for (std::size_t f = 0; f < parts.size(); ++f) {
      const Part& p = parts[f];
      const TensorView& t = dst[f];
      for (std::int64_t b = 0; b < B; ++b) {
        if (p.row) {
          for (std::int64_t h = 0; h < p.n; ++h)
            for (std::int64_t s = 0; s < S; ++s)
              t.f32()[at_row(t, b, h, rows[static_cast<std::size_t>(s)])] = in[(b * p.Hx + p.lo + h) * S + s];
        } else {
          for (std::int64_t s = 0; s < S; ++s)
            for (std::int64_t h = 0; h < p.n; ++h)
              std::memcpy(t.f32() + at_bshd(t, b, rows[static_cast<std::size_t>(s)], h),
                          in + ((b * S + s) * p.Hx + p.lo + h) * D,
                          sizeof(float) * static_cast<std::size_t>(D));
        }
      }
      in += part_floats(p, B, S, D);
    }
  }
}

/// Builds the reduce-scatter input: for every rank i, its tokens of every part, zero except
/// this rank's heads (taken from the position-ordered `src`).
std::vector<float> pack_scatter(const UlyssesExchange& ex, const std::vector<Part>& parts,
                                const std::vector<TensorView>& src, std::int64_t B, std::int64_t D,
                                std::vector<std::int64_t>& counts) {
  const int P = ex.split().u;
  counts.assign(static_cast<std::size_t>(P), 0);
  for (int i = 0; i < P; ++i)
    for (const Part& p : parts)
      counts[static_cast<std::size_t>(i)] += part_floats(p, B, ex.local_length(i), D);
  std::vector<float> buf(
      static_cast<std::size_t>(std::accumulate(counts.begin(), counts.end(), std::int64_t{0})), 0.0f);
  float* out = buf.data();
  for (int i = 0; i < P; ++i) {
    const auto& rows = ex.rows(i);
    const std::int64_t S = ex.local_length(i);
    for (std::size_t f = 0; f < parts.size(); ++f) {
      const Part& p = parts[f];
      const TensorView& t = src[f];
      for (std::int64_t b = 0; b < B; ++b) {
        if (p.row) {
          for (std::int64_t h = 0; h < p.n; ++h)
            for (std::int64_t s = 0; s < S; ++s)
              out[(b * p.Hx + p.lo + h) * S + s] =
                  t.f32()[at_row(t, b, h, rows[static_cast<std::size_t>(s)])];
        } else {
          for (std::int64_t s = 0; s < S; ++s)
            for (std::int64_t h = 0; h < p.n; ++h)
              std::memcpy(out + ((b * S + s) * p.Hx + p.lo + h) * D,
                          t.f32() + at_bshd(t, b, rows[static_cast<std::size_t>(s)], h),
                          sizeof(float) * static_cast<std::size_t>(D));
        }
      }
      out += part_floats(p, B, S, D);
    }
  }
  return buf;
}

/// Copies consecutive contiguous blocks of `src` into the views, in order.
void unpack_all(const float* src, const std::vector<TensorView>& views) {
  for (const TensorView& v : views) {
    unpack_into(src, v);
    src += v.numel();
  }
}

class HeadparStrategy final : public PlannedStrategy {
 public:
  explicit HeadparStrategy(const Setup& setup)
      : PlannedStrategy(setup),
        ex_(setup.plan->layout().positions, make_head_split(setup.shape.H, setup.shape.H_kv, setup.P, "headpar")),
        base_(step_params(setup, nullptr, nullptr, nullptr)),
        shape_(setup.shape),
        me_(setup.rank) {
    base_.q_positions = base_.kv_positions = ex_.positions().data();
    base_.seq_q_global = base_.seq_kv_global = shape_.S_global;
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    forward_pass(q, k, v, out, lse, stats);
  }
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    backward_pass(dout, q, k, v, out, lse, dq, dk, dv, stats);
  }

 private:
  void forward_pass(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, DistStats& stats) const {
    PassTimes t;
    const HeadSplit& h = ex_.split();
    const std::int64_t B = shape_.B, D = shape_.D, S = ex_.group_length();
    const std::vector<Part> in_parts = {{false, h.H, h.q_lo(me_), h.heads},
                                        {false, h.H_kv, h.kv_lo(me_), h.kv_heads},
                                        {false, h.H_kv, h.kv_lo(me_), h.kv_heads}};
    Tensor qg({B, S, h.heads, D}), kg({B, S, h.kv_heads, D}), vg({B, S, h.kv_heads, D});
    Tensor og({B, S, h.heads, D}), lg({B, h.heads, S});
    std::vector<float> send, recv;
    {
      Stopwatch w(&t.comm_seconds);
      append_packed(q, send);
      append_packed(k, send);
      append_packed(v, send);
      const auto c = counts(in_parts);
      recv.resize(static_cast<std::size_t>(std::accumulate(c.begin(), c.end(), std::int64_t{0})));
      comm_.all_gather_v(send.data(), c, recv.data());
      unpack_gathered(recv, ex_, in_parts, {qg.view(), kg.view(), vg.view()}, B, D);
    }
    {
      Stopwatch w(&t.compute_seconds);
      attention_forward(qg.view(), kg.view(), vg.view(), og.view(), lg.view(), base_);
    }
    Stopwatch w(&t.comm_seconds);
    const std::vector<Part> out_parts = {{false, h.H, h.q_lo(me_), h.heads},
                                         {true, h.H, h.q_lo(me_), h.heads}};
    std::vector<std::int64_t> rs_counts;
    std::vector<float> rs = pack_scatter(ex_, out_parts, {og.view(), lg.view()}, B, D, rs_counts);
    std::vector<float> mine(static_cast<std::size_t>(rs_counts[static_cast<std::size_t>(me_)]));
    comm_.reduce_scatter(rs.data(), rs_counts, mine.data());
    unpack_all(mine.data(), {out, lse});
    fill_stats(stats, t, pairs_,
               4 * (B * S * (2 * h.heads + 2 * h.kv_heads) * D + B * h.heads * S +
                    static_cast<std::int64_t>(send.size() + recv.size() + rs.size() + mine.size())));
  }

  void backward_pass(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                     const TensorView& dv, DistStats& stats) const {
    PassTimes t;
    const HeadSplit& h = ex_.split();
    const std::int64_t B = shape_.B, D = shape_.D, S = ex_.group_length();
    Tensor delta({B, h.H, q.size(1)});
    {
      Stopwatch w(&t.compute_seconds);
      attention_delta(dout, out, delta.view());
    }
    const Part qp{false, h.H, h.q_lo(me_), h.heads}, kvp{false, h.H_kv, h.kv_lo(me_), h.kv_heads};
    const Part rowp{true, h.H, h.q_lo(me_), h.heads};
    const std::vector<Part> in_parts = {qp, qp, kvp, kvp, rowp, rowp};
    Tensor qg({B, S, h.heads, D}), dog({B, S, h.heads, D}), kg({B, S, h.kv_heads, D}),
        vg({B, S, h.kv_heads, D});
    Tensor lg({B, h.heads, S}), deltag({B, h.heads, S});
    std::vector<float> send, recv;
    {
      Stopwatch w(&t.comm_seconds);
      append_packed(q, send);
      append_packed(dout, send);
      append_packed(k, send);
      append_packed(v, send);
      append_packed(lse, send);
      append_packed(delta.view(), send);
      const auto c = counts(in_parts);
      recv.resize(static_cast<std::size_t>(std::accumulate(c.begin(), c.end(), std::int64_t{0})));
      comm_.all_gather_v(send.data(), c, recv.data());
      unpack_gathered(recv, ex_, in_parts,
                      {qg.view(), dog.view(), kg.view(), vg.view(), lg.view(), deltag.view()}, B, D);
    }
    Tensor dqg({B, S, h.heads, D}), dkg({B, S, h.kv_heads, D}), dvg({B, S, h.kv_heads, D});
    {
      Stopwatch w(&t.compute_seconds);
      attention_backward_with_delta(dog.view(), qg.view(), kg.view(), vg.view(), lg.view(), deltag.view(),
                                    dqg.view(), dkg.view(), dvg.view(), base_, false);
    }
    Stopwatch w(&t.comm_seconds);
    const std::vector<Part> out_parts = {qp, kvp, kvp};
    std::vector<std::int64_t> rs_counts;
    std::vector<float> rs =
        pack_scatter(ex_, out_parts, {dqg.view(), dkg.view(), dvg.view()}, B, D, rs_counts);
    std::vector<float> mine(static_cast<std::size_t>(rs_counts[static_cast<std::size_t>(me_)]));
    comm_.reduce_scatter(rs.data(), rs_counts, mine.data());
    unpack_all(mine.data(), {dq, dk, dv});
    fill_stats(stats, t, pairs_,
               4 * (B * S * (3 * h.heads + 4 * h.kv_heads) * D + 2 * B * h.heads * S +
                    static_cast<std::int64_t>(send.size() + recv.size() + rs.size() + mine.size())));
  }

  std::vector<std::int64_t> counts(const std::vector<Part>& parts) const {
    std::vector<std::int64_t> c(static_cast<std::size_t>(ex_.split().u), 0);
    for (int i = 0; i < ex_.split().u; ++i)
      for (const Part& p : parts)
        c[static_cast<std::size_t>(i)] += part_floats(p, shape_.B, ex_.local_length(i), shape_.D);
    return c;
  }
  UlyssesExchange ex_;
  AttentionParams base_;
  ProblemShape shape_;
  int me_ = 0;
};

}  // namespace

void validate_headpar(const DistConfig&, const ProblemShape& shape, const Mask&, int P) {
  // Every layout and every mask: each rank sees the whole sequence for its heads.
  make_head_split(shape.H, shape.H_kv, P, "headpar");
}

std::unique_ptr<Strategy> make_headpar(const Setup& setup) { return std::make_unique<HeadparStrategy>(setup); }

}  // namespace burst::strategies
