// DeepSpeed-Ulysses (arXiv 2309.14509): the sequence↔heads all-to-all shared with usp and headpar
// (src/strategies/ulysses.h) and the ulysses strategy. Exchange buffers are packed per destination in (field,
// b, s, h, d) order for BSHD fields and (field, b, h, s) for row fields; the receiver unpacks in the same
// order, placing each source's tokens at their rows of the group's position-sorted sequence.
#include <algorithm>
#include <numeric>

#include "burst/error.h"
#include "strategies/ulysses.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {

namespace {

/// One partner's segment of an exchange over `tokens` of one member's tokens: one field per
/// exchange field, B · tokens · (heads or kv_heads) · (D, or 1 for rows) elements in its own
/// dtype (Q, K, V, dO may be 16-bit; out, lse, delta and gradients are fp32). The head-parallel
/// planners count the same layouts (plan_strategies.cc, ulysses_*_bytes).
WireLayout segment_layout(const std::vector<UlyssesExchange::Field>& fields, const HeadSplit& split,
                          std::int64_t tokens) {
  WireLayout l;
  for (const auto& f : fields)
    l.add(f.row ? "rows" : "bshd", f.local.dtype,
          f.local.size(0) * tokens * (f.kv ? split.kv_heads : split.heads) * (f.row ? 1 : f.local.size(3)));
  return l;
}

/// Start of partner j's segment in a buffer of consecutive segments of `bytes` each.
std::byte* segment(const device::Buffer& buf, const std::vector<std::int64_t>& bytes, int j) {
  return buf.data() + std::accumulate(bytes.begin(), bytes.begin() + j, std::int64_t{0});
}

std::int64_t total(const std::vector<std::int64_t>& bytes) {
  return std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
}

/// Copies the part of field t one partner's segment holds between t and the segment field at
/// `seg` (device memory): BSHD t's heads [lo, lo + n) of tokens `rows` (nullptr: every token of
/// t in order; `rows_twin`: the same table in the device's memory, or nullptr) as a contiguous
/// [B, tokens, n, D], row t's [B, n, tokens]. to_segment: t → seg (a gather of the rows); else
/// seg → t (a scatter, added in when accumulate).
void segment_copy(const device::Device& dev, const TensorView& t, bool row,
                  const std::vector<std::int64_t>* rows, const std::int64_t* rows_twin, std::int64_t lo,
                  std::int64_t n, const std::byte* seg, bool to_segment, bool accumulate = false) {
  const int head_dim = row ? 1 : 2, seq_dim = row ? 2 : 1;
  const TensorView part = narrow(t, head_dim, lo, lo + n);
  std::vector<std::int64_t> shape = shape_of(part);
  if (rows) shape[static_cast<std::size_t>(seq_dim)] = static_cast<std::int64_t>(rows->size());
  const TensorView field = make_view(static_cast<const void*>(seg), t.dtype, shape);
  const std::int64_t* index = rows ? rows->data() : nullptr;
  if (to_segment)
    dev.index_copy(part, field, seq_dim, index, rows_twin, false, false);
  else
    dev.index_copy(field, part, seq_dim, index, rows_twin, true, accumulate);
}

/// Each field's local and gathered views share a dtype; row vectors (lse, delta) are fp32.
void check_fields(const std::vector<UlyssesExchange::Field>& fields) {
  for (const auto& f : fields)
    BURST_CHECK(f.local.dtype == f.gathered.dtype && (!f.row || f.local.dtype == DType::F32), Internal,
                "Ulysses field ", f.local.describe(), " / ", f.gathered.describe(),
                ": mixed dtypes or a 16-bit row vector");
}

}  // namespace

UlyssesExchange::UlyssesExchange(const device::Device& dev,
                                 std::vector<std::vector<std::int64_t>> member_positions, HeadSplit split)
    : split_(split), stage_(dev) {
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
  std::vector<const std::vector<std::int64_t>*> tables = tables_of(rows_);
  tables.push_back(&positions_);
  twins_ = TableTwins(dev, tables);
}

TypedTensor UlyssesExchange::q_heads(std::int64_t B, std::int64_t D, DType dtype) const {
  return pooled_tensor(pool(), {B, group_length(), split_.heads, D}, dtype);
}
TypedTensor UlyssesExchange::kv_heads(std::int64_t B, std::int64_t D, DType dtype) const {
  return pooled_tensor(pool(), {B, group_length(), split_.kv_heads, D}, dtype);
}
TypedTensor UlyssesExchange::row_heads(std::int64_t B) const {
  return pooled_tensor(pool(), {B, split_.heads, group_length()}, DType::F32);
}
void UlyssesExchange::recycle(std::initializer_list<TypedTensor*> tensors) const {
  for (TypedTensor* t : tensors) pool().put(t->release());
}

void UlyssesExchange::seq_to_heads(const Communicator& comm, const std::vector<Field>& fields) const {
  const int u = split_.u, me = comm.rank();
  BURST_CHECK(comm.size() == u, Internal, "Ulysses exchange over ", comm.size(), " ranks, split for ", u);
  check_fields(fields);
  const WireLayout mine = segment_layout(fields, split_, local_length(me));
  std::vector<std::int64_t> send_bytes, recv_bytes;  // my tokens out, every member's tokens in
  for (int j = 0; j < u; ++j) {
    send_bytes.push_back(mine.bytes());
    recv_bytes.push_back(segment_layout(fields, split_, local_length(j)).bytes());
  }
  device::Buffer send = pool().get(total(send_bytes));
  for (int j = 0; j < u; ++j) {
    std::byte* seg = segment(send, send_bytes, j);
    for (std::size_t fi = 0; fi < fields.size(); ++fi) {
      const Field& f = fields[fi];
      segment_copy(dev(), f.local, f.row, nullptr, nullptr, f.kv ? split_.kv_lo(j) : split_.q_lo(j),
                   f.kv ? split_.kv_heads : split_.heads, seg + mine[fi].offset, true);
    }
  }
  device::Buffer recv = stage_.collective(
      send, total(recv_bytes),
      [&](const ByteBuffer& sent, ByteBuffer& got) { comm.all_to_all_v(sent, send_bytes, got, recv_bytes); });
  for (int i = 0; i < u; ++i) {
    const WireLayout theirs = segment_layout(fields, split_, local_length(i));
    const std::byte* seg = segment(recv, recv_bytes, i);
    for (std::size_t fi = 0; fi < fields.size(); ++fi) {
      const Field& f = fields[fi];
      segment_copy(dev(), f.gathered, f.row, &rows_[static_cast<std::size_t>(i)], device_rows(i), 0,
                   f.kv ? split_.kv_heads : split_.heads, seg + theirs[fi].offset, false);
    }
  }
  pool().put(std::move(send));
  pool().put(std::move(recv));
}

void UlyssesExchange::heads_to_seq(const Communicator& comm, const std::vector<Field>& fields) const {
  const int u = split_.u, me = comm.rank();
  BURST_CHECK(comm.size() == u, Internal, "Ulysses exchange over ", comm.size(), " ranks, split for ", u);
  check_fields(fields);
  const WireLayout mine = segment_layout(fields, split_, local_length(me));
  std::vector<std::int64_t> send_bytes, recv_bytes;  // every member's tokens out, mine in
  for (int j = 0; j < u; ++j) {
    send_bytes.push_back(segment_layout(fields, split_, local_length(j)).bytes());
    recv_bytes.push_back(mine.bytes());
  }
  device::Buffer send = pool().get(total(send_bytes));
  for (int i = 0; i < u; ++i) {
    const WireLayout theirs = segment_layout(fields, split_, local_length(i));
    std::byte* seg = segment(send, send_bytes, i);
    for (std::size_t fi = 0; fi < fields.size(); ++fi) {
      const Field& f = fields[fi];
      segment_copy(dev(), f.gathered, f.row, &rows_[static_cast<std::size_t>(i)], device_rows(i), 0,
                   f.kv ? split_.kv_heads : split_.heads, seg + theirs[fi].offset, true);
    }
  }
  device::Buffer recv = stage_.collective(
      send, total(recv_bytes),
      [&](const ByteBuffer& sent, ByteBuffer& got) { comm.all_to_all_v(sent, send_bytes, got, recv_bytes); });
  // Replicated KV heads (fp32 gradients) come back once per replica: zero, then sum in member order.
  for (const Field& f : fields) {
    if (!(f.kv && split_.kv_replicated)) continue;
    BURST_CHECK(f.local.dtype == DType::F32, Internal, "summed Ulysses field ", f.local.describe(),
                " must be fp32");
    dev().fill(f.local, 0.0f);
  }
  for (int j = 0; j < u; ++j) {
    const std::byte* seg = segment(recv, recv_bytes, j);
    for (std::size_t fi = 0; fi < fields.size(); ++fi) {
      const Field& f = fields[fi];
      const bool sum = f.kv && split_.kv_replicated;  // fp32 (checked above): added in member order
      segment_copy(dev(), f.local, f.row, nullptr, nullptr, f.kv ? split_.kv_lo(j) : split_.q_lo(j),
                   f.kv ? split_.kv_heads : split_.heads, seg + mine[fi].offset, false, sum);
    }
  }
  pool().put(std::move(send));
  pool().put(std::move(recv));
}

// ---------------------------------------------------------------- ulysses passes

namespace {

double* comm_sink(PassTimes* t) { return t ? &t->comm_seconds : nullptr; }
double* compute_sink(PassTimes* t) { return t ? &t->compute_seconds : nullptr; }

kernels::KernelParams gathered_params(const kernels::KernelParams& base, const UlyssesExchange& ex) {
  kernels::KernelParams p = base;
  p.q_pos = ex.device_positions();  // uploaded once per exchange (a GPU)
  p.kv_pos = ex.device_positions();
  p.host_q_pos = p.host_kv_pos = ex.positions().data();  // their host twins (KernelArgs::host_*)
  return p;
}

}  // namespace

std::uint64_t context_key(device::BufferPool& pool, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& out) {
  const device::Device& dev = pool.device();
  if (q.dtype == DType::F32 || out.dtype == q.dtype) return dev.fingerprint({q, k, v, out});
  TypedTensor rounded = pooled_tensor(pool, shape_of(out), q.dtype);
  dev.convert(out, rounded.view());
  const std::uint64_t key = dev.fingerprint({q, k, v, rounded.view()});
  pool.put(rounded.release());
  return key;
}

std::vector<UlyssesContext> ContextStore::save(std::uint64_t key, UlyssesContext ctx) {
  std::vector<UlyssesContext> dropped;
  if (slots_ <= 0) {
    dropped.push_back(std::move(ctx));
    return dropped;
  }
  dropped = erase(key);
  if (static_cast<int>(entries_.size()) == slots_) {
    dropped.push_back(std::move(entries_.front().second));
    entries_.pop_front();
  }
  entries_.emplace_back(key, std::move(ctx));
  return dropped;
}

const UlyssesContext* ContextStore::find(std::uint64_t key) const {
  for (const auto& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

std::vector<UlyssesContext> ContextStore::erase(std::uint64_t key) {
  std::vector<UlyssesContext> dropped;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first != key) {
      ++it;
      continue;
    }
    dropped.push_back(std::move(it->second));
    it = entries_.erase(it);
  }
  return dropped;
}

void recycle(device::BufferPool& pool, UlyssesContext&& ctx) {
  for (TypedTensor* t : {&ctx.q, &ctx.k, &ctx.v, &ctx.out, &ctx.lse}) pool.put(t->release());
}

namespace {

/// One member (u = 1): the group's sequence is the local one in the same order (member positions
/// increase), so nothing is exchanged or packed: `attend` reads and writes the caller's views.
/// lse empty: written to a pool buffer, which `keep` (if any) takes as the whole context.
void local_forward(const UlyssesExchange& ex, const GroupAttention& attend, const TensorView& q,
                   const TensorView& k, const TensorView& v, const TensorView& out, const TensorView& lse,
                   PassTimes* times, UlyssesContext* keep) {
  device::BufferPool& pool = ex.pool();
  TypedTensor own;
  if (lse.data == nullptr || keep != nullptr)
    own = pooled_tensor(pool, {q.size(0), q.size(2), q.size(1)}, DType::F32);
  attend.forward(q, k, v, out, lse.data != nullptr ? lse : own.view(), times);
  if (keep == nullptr) {
    pool.put(own.release());
    return;
  }
  if (lse.data != nullptr) unpack_into(ex.dev(), lse.f32(), own.view());  // lse is contiguous (façade)
  *keep = UlyssesContext{};
  keep->local = true;
  keep->lse = std::move(own);
}

/// One member's backward (u = 1): delta = rowsum(dO∘O), then `attend` on the caller's views.
void local_backward(const UlyssesExchange& ex, const GroupAttention& attend, const TensorView& dout,
                    const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                    PassTimes* times) {
  device::BufferPool& pool = ex.pool();
  TypedTensor delta = pooled_tensor(pool, {q.size(0), q.size(2), q.size(1)}, DType::F32);
  {
    Stopwatch w(compute_sink(times));
    ex.dev().attention_delta(dout, out, delta.view());
  }
  attend.backward(dout, q, k, v, lse, delta.view(), dq, dk, dv, times);
  pool.put(delta.release());
}

}  // namespace

void ulysses_forward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                     const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const TensorView& lse, PassTimes* times, UlyssesContext* keep) {
  if (ex.split().u == 1) return local_forward(ex, attend, q, k, v, out, lse, times, keep);
  const std::int64_t B = q.size(0), D = q.size(3);
  TypedTensor qg = ex.q_heads(B, D, q.dtype), kg = ex.kv_heads(B, D, k.dtype),
              vg = ex.kv_heads(B, D, v.dtype);
  TypedTensor og = ex.q_heads(B, D, DType::F32), lg = ex.row_heads(B);
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
  if (keep == nullptr) {
    ex.recycle({&qg, &kg, &vg, &og, &lg});
    return;
  }
  // Keep out as the caller saves it: rounded to the inputs' dtype (delta uses it).
  if (q.dtype != DType::F32) {
    TypedTensor rounded = ex.q_heads(B, D, q.dtype);
    ex.dev().convert(og.view(), rounded.view());
    ex.recycle({&og});
    og = std::move(rounded);
  }
  *keep = UlyssesContext{std::move(qg), std::move(kg), std::move(vg), std::move(og), std::move(lg), false};
}

void ulysses_backward_saved(const Communicator& group, const UlyssesExchange& ex,
                            const GroupAttention& attend, const UlyssesContext& ctx, const TensorView& dout,
                            const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& dq, const TensorView& dk,
                            const TensorView& dv, PassTimes* times) {
  if (ctx.local) return local_backward(ex, attend, dout, q, k, v, out, ctx.lse.view(), dq, dk, dv, times);
  const std::int64_t B = dout.size(0), D = dout.size(3);
  TypedTensor dog = ex.q_heads(B, D, dout.dtype), deltag = ex.row_heads(B);
  {
    Stopwatch w(comm_sink(times));
    ex.seq_to_heads(group, {{dout, dog.view(), false, false}});
  }
  {
    Stopwatch w(compute_sink(times));
    ex.dev().attention_delta(dog.view(), ctx.out.view(), deltag.view());
  }
  TypedTensor dqg = ex.q_heads(B, D, DType::F32), dkg = ex.kv_heads(B, D, DType::F32),
              dvg = ex.kv_heads(B, D, DType::F32);
  attend.backward(dog.view(), ctx.q.view(), ctx.k.view(), ctx.v.view(), ctx.lse.view(), deltag.view(),
                  dqg.view(), dkg.view(), dvg.view(), times);
  {
    Stopwatch w(comm_sink(times));
    ex.heads_to_seq(
        group,
        {{dq, dqg.view(), false, false}, {dk, dkg.view(), true, false}, {dv, dvg.view(), true, false}});
  }
  ex.recycle({&dog, &deltag, &dqg, &dkg, &dvg});
}

void ulysses_backward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                      const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse, const TensorView& dq,
                      const TensorView& dk, const TensorView& dv, PassTimes* times) {
  if (ex.split().u == 1) return local_backward(ex, attend, dout, q, k, v, out, lse, dq, dk, dv, times);
  const std::int64_t B = q.size(0), D = q.size(3);
  TypedTensor delta = pooled_tensor(ex.pool(), {B, ex.split().H, q.size(1)}, DType::F32);
  {
    Stopwatch w(compute_sink(times));
    ex.dev().attention_delta(dout, out, delta.view());
  }
  TypedTensor qg = ex.q_heads(B, D, q.dtype), dog = ex.q_heads(B, D, dout.dtype);
  TypedTensor kg = ex.kv_heads(B, D, k.dtype), vg = ex.kv_heads(B, D, v.dtype);
  TypedTensor lg = ex.row_heads(B), deltag = ex.row_heads(B);
  {
    Stopwatch w(comm_sink(times));
    ex.seq_to_heads(group, {{q, qg.view(), false, false},
                            {dout, dog.view(), false, false},
                            {k, kg.view(), true, false},
                            {v, vg.view(), true, false},
                            {lse, lg.view(), false, true},
                            {delta.view(), deltag.view(), false, true}});
  }
  TypedTensor dqg = ex.q_heads(B, D, DType::F32), dkg = ex.kv_heads(B, D, DType::F32),
              dvg = ex.kv_heads(B, D, DType::F32);
  attend.backward(dog.view(), qg.view(), kg.view(), vg.view(), lg.view(), deltag.view(), dqg.view(),
                  dkg.view(), dvg.view(), times);
  {
    Stopwatch w(comm_sink(times));
    ex.heads_to_seq(
        group,
        {{dq, dqg.view(), false, false}, {dk, dkg.view(), true, false}, {dv, dvg.view(), true, false}});
  }
  ex.recycle({&delta, &qg, &dog, &kg, &vg, &lg, &deltag, &dqg, &dkg, &dvg});
}

void LocalGroupAttention::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const TensorView& lse, PassTimes* times) const {
  Stopwatch w(compute_sink(times));
  ex_.dev().step_forward(q, k, v, out, lse, gathered_params(base_, ex_));
}

void LocalGroupAttention::backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& lse, const TensorView& delta,
                                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                                   PassTimes* times) const {
  Stopwatch w(compute_sink(times));
  ex_.dev().step_backward(dout, q, k, v, lse, delta, dq, dk, dv, gathered_params(base_, ex_), false);
}

// ---------------------------------------------------------------- registration

void UlyssesFamilyBase::forward_in(const Communicator& group, const UlyssesExchange& ex,
                                   const GroupAttention& attend, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& out, const TensorView& lse,
                                   DistStats& stats) {
  UlyssesContext ctx;
  // With one member (u = 1) nothing moves, so a context spares no bytes: keep one (its lse) only
  // for a caller that passes no lse and so cannot run the stateless backward.
  const bool keep = store_.slots() > 0 && (ex.split().u > 1 || lse.data == nullptr);
  run(peak_fwd_, stats, [&](PassTimes& t) {
    ulysses_forward(group, ex, attend, q, k, v, out, lse, &t, keep ? &ctx : nullptr);
  });
  if (keep)
    for (UlyssesContext& c : store_.save(context_key(ex.pool(), q, k, v, out), std::move(ctx)))
      recycle(ex.pool(), std::move(c));
}

const UlyssesContext* UlyssesFamilyBase::agreed_context(const TensorView& q, const TensorView& k,
                                                        const TensorView& v, const TensorView& out,
                                                        std::uint64_t& key) const {
  key = store_.slots() > 0 ? context_key(key_pool_, q, k, v, out) : 0;
  const UlyssesContext* ctx = store_.slots() > 0 ? store_.find(key) : nullptr;
  // Control data (not counted): every rank must take the same path, or the exchanges differ.
  return comm_.all_reduce_min(std::int64_t{ctx != nullptr ? 1 : 0}) == 1 ? ctx : nullptr;
}

bool UlyssesFamilyBase::backward_without_lse(const TensorView& q, const TensorView& k, const TensorView& v,
                                             const TensorView& out) {
  std::uint64_t key = 0;
  return agreed_context(q, k, v, out, key) != nullptr;
}

void UlyssesFamilyBase::backward_in(const Communicator& group, const UlyssesExchange& ex,
                                    const GroupAttention& attend, const TensorView& dout, const TensorView& q,
                                    const TensorView& k, const TensorView& v, const TensorView& out,
                                    const TensorView& lse, const TensorView& dq, const TensorView& dk,
                                    const TensorView& dv, DistStats& stats) {
  if (ex.split().u == 1 && lse.data != nullptr) {  // nothing to spare (forward_in): the stateless path,
    run(peak_bwd_, stats,                          // which at u = 1 holds no more than the saved one
        [&](PassTimes& t) { ulysses_backward(group, ex, attend, dout, q, k, v, out, lse, dq, dk, dv, &t); });
    return;
  }
  std::uint64_t key = 0;
  const UlyssesContext* ctx = agreed_context(q, k, v, out, key);
  if (ctx != nullptr) {
    run(peak_bwd_, stats, [&](PassTimes& t) {
      ulysses_backward_saved(group, ex, attend, *ctx, dout, q, k, v, out, dq, dk, dv, &t);
    });
  } else {
    run(peak_bwd_stateless_, stats,
        [&](PassTimes& t) { ulysses_backward(group, ex, attend, dout, q, k, v, out, lse, dq, dk, dv, &t); });
  }
  // The matched context (or a stale one of these inputs) is used up.
  for (UlyssesContext& c : store_.erase(key)) recycle(ex.pool(), std::move(c));
}

namespace {

class UlyssesStrategy final : public UlyssesFamilyBase {
 public:
  explicit UlyssesStrategy(const Setup& setup)
      : UlyssesFamilyBase(setup, "ulysses"),
        ex_(*setup.device, setup.plan->layout().positions,
            make_head_split(setup.shape.H, setup.shape.H_kv, setup.P, "ulysses")),
        attend_(ex_, step_params(setup, nullptr, nullptr, nullptr)) {}

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

void validate_ulysses(const DistConfig&, const ProblemShape& shape, const ResolvedMask&, int P) {
  // Every layout and every mask: tokens are regathered in global order, the kernel sees positions.
  make_head_split(shape.H, shape.H_kv, P, "ulysses");
}

std::unique_ptr<Strategy> make_ulysses(const Setup& setup) {
  return std::make_unique<UlyssesStrategy>(setup);
}

}  // namespace burst::strategies
