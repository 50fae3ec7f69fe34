// DeepSpeed-Ulysses (arXiv 2309.14509): the sequence↔heads all-to-all shared with usp and headpar
// (src/strategies/ulysses.h) and the ulysses strategy. Exchange buffers are packed per destination in (field,
// b, s, h, d) order for BSHD fields and (field, b, h, s) for row fields; the receiver unpacks in the same
// order, placing each source's tokens at their rows of the group's position-sorted sequence.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "burst/error.h"
#include "strategies/common.h"
#include "strategies/ulysses.h"

namespace burst::strategies {

namespace {

std::int64_t field_local_rows(const UlyssesExchange::Field& f) {
  return f.row ? f.local.size(2) : f.local.size(1);
}

/// Offset of element (b, s, h, d) of a BSHD view or (b, h, s) of a row view.
std::int64_t at(const TensorView& v, bool row, std::int64_t b, std::int64_t s, std::int64_t h) {
  return row ? b * v.stride[0] + h * v.stride[1] + s * v.stride[2]
             : b * v.stride[0] + s * v.stride[1] + h * v.stride[2];
}

std::int64_t elem_bytes(const UlyssesExchange::Field& f) {
  return static_cast<std::int64_t>(dtype_size(f.local.dtype));
}

/// Bytes one token contributes to an exchange with one partner: Σ_fields B · heads · W · e, each
/// field in its own dtype (Q, K, V, dO may be 16-bit; out, lse, delta and gradients are fp32).
std::int64_t bytes_per_token(const std::vector<UlyssesExchange::Field>& fields, const HeadSplit& split) {
  std::int64_t n = 0;
  for (const auto& f : fields)
    n += f.local.size(0) * (f.kv ? split.kv_heads : split.heads) * (f.row ? 1 : f.local.size(3)) *
         elem_bytes(f);
  return n;
}

/// Words (4 bytes) of a payload of `bytes`: each partner's segment is padded to whole words.
std::int64_t payload_words(std::int64_t bytes) { return (bytes + 3) / 4; }

/// Start of partner j's segment in a buffer laid out by `counts` (words).
char* segment(std::vector<float>& buf, const std::vector<std::int64_t>& counts, int j) {
  const std::int64_t off = std::accumulate(counts.begin(), counts.begin() + j, std::int64_t{0});
  return reinterpret_cast<char*>(buf.data() + off);
}

void copy(void* dst, const void* src, std::int64_t bytes) {
  std::memcpy(dst, src, static_cast<std::size_t>(bytes));
}

/// x[0..n) += in[0..n) for fp32 values at any alignment (a 16-bit field before may leave the
/// payload 2-byte aligned).
void add_f32(char* x, const char* in, std::int64_t n) {
  for (std::int64_t d = 0; d < n; ++d) {
    float a = 0, b = 0;
    std::memcpy(&a, x + 4 * d, 4);
    std::memcpy(&b, in + 4 * d, 4);
    a += b;
    std::memcpy(x + 4 * d, &a, 4);
  }
}

/// Each field's local and gathered views share a dtype; row vectors (lse, delta) are fp32.
void check_fields(const std::vector<UlyssesExchange::Field>& fields) {
  for (const auto& f : fields)
    BURST_CHECK(f.local.dtype == f.gathered.dtype && (!f.row || f.local.dtype == DType::F32), Internal,
                "Ulysses field ", f.local.describe(), " / ", f.gathered.describe(),
                ": mixed dtypes or a 16-bit row vector");
}

std::vector<float> buffer_for(const std::vector<std::int64_t>& counts) {
  return std::vector<float>(
      static_cast<std::size_t>(std::accumulate(counts.begin(), counts.end(), std::int64_t{0})));
}

}  // namespace

UlyssesExchange::UlyssesExchange(std::vector<std::vector<std::int64_t>> member_positions, HeadSplit split)
    : split_(split) {
  BURST_CHECK(static_cast<int>(member_positions.size()) == split.u, InvalidArgument, "Ulysses group of ",
              member_positions.size(), " members for a head split over ", split.u, " ranks");
  for (const auto& pos : member_positions) positions_.insert(positions_.end(), pos.begin(), pos.end());
  std::sort(positions_.begin(), positions_.end());
  BURST_CHECK(std::adjacent_find(positions_.begin(), positions_.end()) == positions_.end(), InvalidArgument,
              "Ulysses group members own overlapping positions");
  rows_.resize(member_positions.size());
  for (std::size_t i = 0; i < member_positions.size(); ++i) {
    const auto& pos = member_positions[i];
    BURST_CHECK(std::is_sorted(pos.begin(), pos.end()), InvalidArgument, "member ", i,
                " positions are not increasing");
    rows_[i].reserve(pos.size());
    for (std::int64_t p : pos) {
      rows_[i].push_back(std::lower_bound(positions_.begin(), positions_.end(), p) - positions_.begin());
    }
  }
}

void UlyssesExchange::seq_to_heads(const Communicator& comm, const std::vector<Field>& fields) const {
  const int u = split_.u, me = comm.rank();
  BURST_CHECK(comm.size() == u, Internal, "Ulysses exchange over ", comm.size(), " ranks, split for ", u);
  check_fields(fields);
  const std::int64_t per_token = bytes_per_token(fields, split_);
  std::vector<std::int64_t> send_counts, recv_counts;  // my tokens out, every member's tokens in (words)
  for (int j = 0; j < u; ++j) {
    send_counts.push_back(payload_words(local_length(me) * per_token));
    recv_counts.push_back(payload_words(local_length(j) * per_token));
  }
  std::vector<float> send = buffer_for(send_counts), recv = buffer_for(recv_counts);
  for (int j = 0; j < u; ++j) {
    char* out = segment(send, send_counts, j);
    for (const Field& f : fields) {
      const std::int64_t B = f.local.size(0), S = field_local_rows(f), W = f.row ? 1 : f.local.size(3);
      const std::int64_t n = f.kv ? split_.kv_heads : split_.heads, es = elem_bytes(f);
      const std::int64_t lo = f.kv ? split_.kv_lo(j) : split_.q_lo(j);
      const char* src = static_cast<const char*>(f.local.data);
      for (std::int64_t b = 0; b < B; ++b) {
        if (f.row) {
          for (std::int64_t h = 0; h < n; ++h)
            for (std::int64_t s = 0; s < S; ++s, out += es)
              copy(out, src + es * at(f.local, true, b, s, lo + h), es);
        } else {
          for (std::int64_t s = 0; s < S; ++s)
            for (std::int64_t h = 0; h < n; ++h, out += W * es)
              copy(out, src + es * at(f.local, false, b, s, lo + h), W * es);
        }
      }
    }
  }
  comm.all_to_all_v(send.data(), send_counts, recv.data(), recv_counts);
  for (int i = 0; i < u; ++i) {
    const char* in = segment(recv, recv_counts, i);
    const auto& rows = rows_[static_cast<std::size_t>(i)];
    for (const Field& f : fields) {
      const std::int64_t B = f.gathered.size(0), W = f.row ? 1 : f.gathered.size(3);
      const std::int64_t n = f.kv ? split_.kv_heads : split_.heads, es = elem_bytes(f);
      char* dst = static_cast<char*>(f.gathered.data);
      for (std::int64_t b = 0; b < B; ++b) {
        if (f.row) {
          for (std::int64_t h = 0; h < n; ++h)
            for (std::int64_t row : rows) {
              copy(dst + es * at(f.gathered, true, b, row, h), in, es);
              in += es;
            }
        } else {
          for (std::int64_t row : rows)
            for (std::int64_t h = 0; h < n; ++h, in += W * es)
              copy(dst + es * at(f.gathered, false, b, row, h), in, W * es);
        }
      }
    }
  }
}

void UlyssesExchange::heads_to_seq(const Communicator& comm, const std::vector<Field>& fields) const {
  const int u = split_.u, me = comm.rank();
  BURST_CHECK(comm.size() == u, Internal, "Ulysses exchange over ", comm.size(), " ranks, split for ", u);
  check_fields(fields);
  const std::int64_t per_token = bytes_per_token(fields, split_);
  std::vector<std::int64_t> send_counts, recv_counts;  // every member's tokens out, mine in (words)
  for (int j = 0; j < u; ++j) {
    send_counts.push_back(payload_words(local_length(j) * per_token));
    recv_counts.push_back(payload_words(local_length(me) * per_token));
  }
  std::vector<float> send = buffer_for(send_counts), recv = buffer_for(recv_counts);
  for (int i = 0; i < u; ++i) {
    char* out = segment(send, send_counts, i);
    const auto& rows = rows_[static_cast<std::size_t>(i)];
    for (const Field& f : fields) {
      const std::int64_t B = f.gathered.size(0), W = f.row ? 1 : f.gathered.size(3);
      const std::int64_t n = f.kv ? split_.kv_heads : split_.heads, es = elem_bytes(f);
      const char* src = static_cast<const char*>(f.gathered.data);
      for (std::int64_t b = 0; b < B; ++b) {
        if (f.row) {
          for (std::int64_t h = 0; h < n; ++h)
            for (std::int64_t row : rows) {
              copy(out, src + es * at(f.gathered, true, b, row, h), es);
              out += es;
            }
        } else {
          for (std::int64_t row : rows)
            for (std::int64_t h = 0; h < n; ++h, out += W * es)
              copy(out, src + es * at(f.gathered, false, b, row, h), W * es);
        }
      }
    }
  }
  comm.all_to_all_v(send.data(), send_counts, recv.data(), recv_counts);
  // Replicated KV heads (fp32 gradients) come back once per replica: zero, then sum in member order.
  for (const Field& f : fields) {
    if (!(f.kv && split_.kv_replicated)) continue;
    BURST_CHECK(f.local.dtype == DType::F32, Internal, "summed Ulysses field ", f.local.describe(),
                " must be fp32");
    const std::int64_t B = f.local.size(0), S = field_local_rows(f), W = f.row ? 1 : f.local.size(3);
    const std::int64_t Hx = f.row ? f.local.size(1) : f.local.size(2);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t h = 0; h < Hx; ++h)
          std::fill_n(f.local.f32() + at(f.local, f.row, b, s, h), W, 0.0f);
  }
  for (int j = 0; j < u; ++j) {
    const char* in = segment(recv, recv_counts, j);
    for (const Field& f : fields) {
      const std::int64_t B = f.local.size(0), S = field_local_rows(f), W = f.row ? 1 : f.local.size(3);
      const std::int64_t n = f.kv ? split_.kv_heads : split_.heads, es = elem_bytes(f);
      const std::int64_t lo = f.kv ? split_.kv_lo(j) : split_.q_lo(j);
      const bool sum = f.kv && split_.kv_replicated;
      char* dst = static_cast<char*>(f.local.data);
      for (std::int64_t b = 0; b < B; ++b) {
        if (f.row) {
          for (std::int64_t h = 0; h < n; ++h)
            for (std::int64_t s = 0; s < S; ++s, in += es) {
              char* x = dst + es * at(f.local, true, b, s, lo + h);
              sum ? add_f32(x, in, 1) : copy(x, in, es);
            }
        } else {
          for (std::int64_t s = 0; s < S; ++s)
            for (std::int64_t h = 0; h < n; ++h, in += W * es) {
              char* x = dst + es * at(f.local, false, b, s, lo + h);
              sum ? add_f32(x, in, W) : copy(x, in, W * es);
            }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- ulysses passes

namespace {

double* comm_sink(PassTimes* t) { return t ? &t->comm_seconds : nullptr; }
double* compute_sink(PassTimes* t) { return t ? &t->compute_seconds : nullptr; }

AttentionParams gathered_params(const AttentionParams& base, const UlyssesExchange& ex,
                                std::int64_t S_global) {
  AttentionParams p = base;
  p.q_positions = ex.positions().data();
  p.kv_positions = ex.positions().data();
  p.q_offset = p.kv_offset = 0;
  p.seq_q_global = p.seq_kv_global = S_global;
  return p;
}

}  // namespace

std::uint64_t context_key(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out) {
  if (q.dtype == DType::F32 || out.dtype == q.dtype) return content_fingerprint({q, k, v, out});
  TypedTensor rounded(std::vector<std::int64_t>(out.shape.begin(), out.shape.begin() + out.ndim), q.dtype);
  convert(out, rounded.view());
  return content_fingerprint({q, k, v, rounded.view()});
}

void ContextStore::save(std::uint64_t key, UlyssesContext ctx) {
  if (slots_ <= 0) return;
  erase(key);
  if (static_cast<int>(entries_.size()) == slots_) entries_.pop_front();
  entries_.emplace_back(key, std::move(ctx));
}

const UlyssesContext* ContextStore::find(std::uint64_t key) const {
  for (const auto& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

void ContextStore::erase(std::uint64_t key) {
  entries_.erase(
      std::remove_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == key; }),
      entries_.end());
}

void ulysses_forward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                     const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const TensorView& lse, PassTimes* times, UlyssesContext* keep) {
  const HeadSplit& s = ex.split();
  const std::int64_t B = q.size(0), D = q.size(3), S = ex.group_length();
  TypedTensor qg({B, S, s.heads, D}, q.dtype), kg({B, S, s.kv_heads, D}, k.dtype),
      vg({B, S, s.kv_heads, D}, v.dtype);
  Tensor og({B, S, s.heads, D}), lg({B, s.heads, S});
  {
    Stopwatch w(comm_sink(times));
    ex.seq_to_heads(group,
                    {{q, qg.view(), false, false}, {k, kg.view(), true, false}, {v, vg.view(), true, false}});
  }
  attend.forward(qg.view(), kg.view(), vg.view(), og.view(), lg.view(), times);
  {
    Stopwatch w(comm_sink(times));
    if (lse.data != nullptr) {
      ex.heads_to_seq(group, {{out, og.view(), false, false}, {lse, lg.view(), false, true}});
    } else {
      ex.heads_to_seq(group, {{out, og.view(), false, false}});
    }
  }
  if (keep == nullptr) return;
  if (q.dtype == DType::F32) {
    *keep = {std::move(qg), std::move(kg), std::move(vg), std::move(og), std::move(lg), TypedTensor{}};
  } else {  // keep out as the caller saves it: rounded to the inputs' dtype (delta uses it)
    TypedTensor rounded({B, S, s.heads, D}, q.dtype);
    convert(og.view(), rounded.view());
    *keep = {std::move(qg), std::move(kg), std::move(vg), Tensor{}, std::move(lg), std::move(rounded)};
  }
}

void ulysses_backward_saved(const Communicator& group, const UlyssesExchange& ex,
                            const GroupAttention& attend, const UlyssesContext& ctx, const TensorView& dout,
                            const TensorView& dq, const TensorView& dk, const TensorView& dv,
                            PassTimes* times) {
  const HeadSplit& s = ex.split();
  const std::int64_t B = dout.size(0), D = dout.size(3), S = ex.group_length();
  TypedTensor dog({B, S, s.heads, D}, dout.dtype);
  Tensor deltag({B, s.heads, S});
  {
    Stopwatch w(comm_sink(times));
    ex.seq_to_heads(group, {{dout, dog.view(), false, false}});
  }
  {
    Stopwatch w(compute_sink(times));
    attention_delta(dog.view(), ctx.out_view(), deltag.view());
  }
  Tensor dqg({B, S, s.heads, D}), dkg({B, S, s.kv_heads, D}), dvg({B, S, s.kv_heads, D});
  attend.backward(dog.view(), ctx.q.view(), ctx.k.view(), ctx.v.view(), ctx.lse.view(), deltag.view(),
                  dqg.view(), dkg.view(), dvg.view(), times);
  Stopwatch w(comm_sink(times));
  ex.heads_to_seq(
      group, {{dq, dqg.view(), false, false}, {dk, dkg.view(), true, false}, {dv, dvg.view(), true, false}});
}

void ulysses_backward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                      const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse, const TensorView& dq,
                      const TensorView& dk, const TensorView& dv, PassTimes* times) {
  const HeadSplit& s = ex.split();
  const std::int64_t B = q.size(0), D = q.size(3), S = ex.group_length(), S_local = q.size(1);
  Tensor delta({B, s.H, S_local});
  {
    Stopwatch w(compute_sink(times));
    attention_delta(dout, out, delta.view());
  }
  TypedTensor qg({B, S, s.heads, D}, q.dtype), dog({B, S, s.heads, D}, dout.dtype),
      kg({B, S, s.kv_heads, D}, k.dtype), vg({B, S, s.kv_heads, D}, v.dtype);
  Tensor lg({B, s.heads, S}), deltag({B, s.heads, S});
  {
    Stopwatch w(comm_sink(times));
    ex.seq_to_heads(group, {{q, qg.view(), false, false},
                            {dout, dog.view(), false, false},
                            {k, kg.view(), true, false},
                            {v, vg.view(), true, false},
                            {lse, lg.view(), false, true},
                            {delta.view(), deltag.view(), false, true}});
  }
  Tensor dqg({B, S, s.heads, D}), dkg({B, S, s.kv_heads, D}), dvg({B, S, s.kv_heads, D});
  attend.backward(dog.view(), qg.view(), kg.view(), vg.view(), lg.view(), deltag.view(), dqg.view(),
                  dkg.view(), dvg.view(), times);
  Stopwatch w(comm_sink(times));
  ex.heads_to_seq(
      group, {{dq, dqg.view(), false, false}, {dk, dkg.view(), true, false}, {dv, dvg.view(), true, false}});
}

void LocalGroupAttention::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const TensorView& lse, PassTimes* times) const {
  Stopwatch w(compute_sink(times));
  attention_forward(q, k, v, out, lse, gathered_params(base_, ex_, S_global_));
}

void LocalGroupAttention::backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& lse, const TensorView& delta,
                                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                                   PassTimes* times) const {
  Stopwatch w(compute_sink(times));
  attention_backward_with_delta(dout, q, k, v, lse, delta, dq, dk, dv, gathered_params(base_, ex_, S_global_),
                                false);
}

// ---------------------------------------------------------------- registration

void HeadParallelStrategy::forward_in(const Communicator& group, const UlyssesExchange& ex,
                                      const GroupAttention& attend, const TensorView& q, const TensorView& k,
                                      const TensorView& v, const TensorView& out, const TensorView& lse,
                                      DistStats& stats) {
  UlyssesContext ctx;
  const bool keep = store_.slots() > 0;
  run(peak_fwd_, stats, [&](PassTimes& t) {
    ulysses_forward(group, ex, attend, q, k, v, out, lse, &t, keep ? &ctx : nullptr);
  });
  if (keep) store_.save(context_key(q, k, v, out), std::move(ctx));
}

const UlyssesContext* HeadParallelStrategy::agreed_context(const TensorView& q, const TensorView& k,
                                                           const TensorView& v, const TensorView& out,
                                                           std::uint64_t& key) const {
  key = store_.slots() > 0 ? context_key(q, k, v, out) : 0;
  const UlyssesContext* ctx = store_.slots() > 0 ? store_.find(key) : nullptr;
  // Control data (not counted): every rank must take the same path, or the exchanges differ.
  return comm_.all_reduce_min(std::int64_t{ctx != nullptr ? 1 : 0}) == 1 ? ctx : nullptr;
}

bool HeadParallelStrategy::backward_without_lse(const TensorView& q, const TensorView& k, const TensorView& v,
                                                const TensorView& out) {
  std::uint64_t key = 0;
  return agreed_context(q, k, v, out, key) != nullptr;
}

void HeadParallelStrategy::backward_in(const Communicator& group, const UlyssesExchange& ex,
                                       const GroupAttention& attend, const TensorView& dout,
                                       const TensorView& q, const TensorView& k, const TensorView& v,
                                       const TensorView& out, const TensorView& lse, const TensorView& dq,
                                       const TensorView& dk, const TensorView& dv, DistStats& stats) {
  std::uint64_t key = 0;
  const UlyssesContext* ctx = agreed_context(q, k, v, out, key);
  if (ctx != nullptr) {
    run(peak_bwd_, stats,
        [&](PassTimes& t) { ulysses_backward_saved(group, ex, attend, *ctx, dout, dq, dk, dv, &t); });
  } else {
    run(peak_bwd_stateless_, stats,
        [&](PassTimes& t) { ulysses_backward(group, ex, attend, dout, q, k, v, out, lse, dq, dk, dv, &t); });
  }
  store_.erase(key);  // the matched context (or a stale one of these inputs) is used up
}

namespace {

class UlyssesStrategy final : public HeadParallelStrategy {
 public:
  explicit UlyssesStrategy(const Setup& setup)
      : HeadParallelStrategy(setup, "ulysses"),
        ex_(setup.plan->layout().positions,
            make_head_split(setup.shape.H, setup.shape.H_kv, setup.P, "ulysses")),
        attend_(ex_, step_params(setup, nullptr, nullptr, nullptr), setup.shape.S_global) {}

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    forward_in(comm_, ex_, attend_, q, k, v, out, lse, stats);
  }
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    backward_in(comm_, ex_, attend_, dout, q, k, v, out, lse, dq, dk, dv, stats);
  }

 private:
  UlyssesExchange ex_;
  LocalGroupAttention attend_;  // refers to ex_
};

}  // namespace

void validate_ulysses(const DistConfig&, const ProblemShape& shape, const Mask&, int P) {
  // Every layout and every mask: tokens are regathered in global order, the kernel sees positions.
  make_head_split(shape.H, shape.H_kv, P, "ulysses");
}

std::unique_ptr<Strategy> make_ulysses(const Setup& setup) {
  return std::make_unique<UlyssesStrategy>(setup);
}

}  // namespace burst::strategies
