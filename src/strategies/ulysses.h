// src/strategies/ulysses.h — the sequence↔heads all-to-all of the head-parallel strategies (internal).
//
// Shared by the head-parallel strategies: ulysses (DeepSpeed-Ulysses, arXiv 2309.14509), usp
// (Ulysses inside a ring, arXiv 2405.07719) and headpar (head-parallel attention).
// UlyssesExchange moves BSHD tensors between "my tokens, all heads" and "all tokens of the
// group, my heads" with one all_to_all_v per direction (head ownership: HeadSplit in
// plan_strategies.h); GroupAttention is what runs between the two all-to-alls.
// See docs/strategies.md §ulysses, §usp, §headpar; DeepSpeed-Ulysses (arXiv 2309.14509), USP (arXiv
// 2405.07719), Megatron-LM (arXiv 2205.05198).
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/plan.h"
#include "burst/tensor.h"
#include "device/device.h"
#include "plan_strategies.h"
#include "strategies/planned_strategy.h"
#include "strategies/pooled_tensor.h"
#include "strategies/staging.h"
#include "strategies/step_log.h"
#include "strategies/step_params.h"
#include "strategies/step_tables.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

/// One Ulysses all-to-all group of u ranks: member i owns global positions member_positions[i]
/// (increasing, disjoint); the group's sequence is their sorted union (positions()).
class UlyssesExchange {
 public:
  /// One tensor taking part in an exchange. BSHD fields: local [B, S_local(me), H or H_kv, D],
  /// gathered [B, S_group, heads or kv_heads, D]. Row fields (lse, delta): local [B, H, S_local],
  /// gathered [B, heads, S_group]. Views may be strided (D contiguous for BSHD).
  struct Field {
    TensorView local, gathered;
    bool kv = false;   ///< split by KV heads (K, V, dK, dV) rather than query heads
    bool row = false;  ///< [B, H, S] row vector instead of BSHD
  };

  /// Throws Error(InvalidArgument) when member positions overlap or are not increasing.
  /// `dev`: the device of every tensor exchanged (outlives the exchange). Each exchange packs
  /// its send buffer in device memory and stages it through pinned wire buffers (stager():
  /// one copy out, one copy in; the identity on a host-memory device).
  UlyssesExchange(const device::Device& dev, std::vector<std::vector<std::int64_t>> member_positions,
                  HeadSplit split);

  const std::vector<std::int64_t>& positions() const { return positions_; }
  /// positions() as the step kernels read them: in the device's memory (uploaded once, at
  /// construction: step_tables.h), or positions().data() on a host-memory device.
  const std::int64_t* device_positions() const { return twins_.positions(positions_.data()); }
  std::int64_t group_length() const { return static_cast<std::int64_t>(positions_.size()); }
  std::int64_t local_length(int member) const {
    return static_cast<std::int64_t>(rows_[static_cast<std::size_t>(member)].size());
  }
  const HeadSplit& split() const { return split_; }
  /// Member i's tokens as row indices into positions().
  const std::vector<std::int64_t>& rows(int member) const { return rows_[static_cast<std::size_t>(member)]; }
  /// rows(member) in the device's memory (uploaded once, at construction), the index copies'
  /// twin of the host table; nullptr on a host-memory device (or for a member without tokens).
  const std::int64_t* device_rows(int member) const { return twins_.twin(rows(member).data()); }
  /// Message buffers of the exchanges and the gathered tensors of the passes live here between
  /// calls (device::BufferPool, src/device/device.h: no fresh zeroed memory per call).
  device::BufferPool& pool() const { return stage_.pool(); }
  const device::Device& dev() const { return stage_.device(); }
  /// The staging of this group's collectives (src/strategies/staging.h); pool() is its device pool.
  Stager& stager() const { return stage_; }
  /// Head-sharded tensors over the group's sequence from pool() (contents unspecified):
  /// [B, S_group, heads, D], [B, S_group, kv_heads, D], rows [B, heads, S_group] (fp32).
  TypedTensor q_heads(std::int64_t B, std::int64_t D, DType dtype) const;
  TypedTensor kv_heads(std::int64_t B, std::int64_t D, DType dtype) const;
  TypedTensor row_heads(std::int64_t B) const;
  /// Hands tensors back to pool().
  void recycle(std::initializer_list<TypedTensor*> tensors) const;

  /// Sequence → heads: fills every field's `gathered` from all members' `local`. Each field's
  /// slice for one partner is copied in runs: a token's heads [lo, lo + n) are one contiguous
  /// run of a BSHD tensor (D contiguous, heads adjacent), so one copy per token and field.
  /// Collective over `comm` (size u, rank = member index): every member calls with fields of
  /// the same kinds in the same order. Each field travels in its own dtype (local and gathered
  /// views share it; Q, K, V, dO may be bf16/f16, row vectors are fp32): sends
  /// Σ_fields B·S_local·(heads or kv_heads)·W·e bytes to each other member (W = D, or 1 for rows;
  /// e = bytes per element), each field at an offset aligned to its element size (a
  /// WireLayout per partner segment; src/wire_layout.h). Cost: one
  /// all_to_all_v plus two copies.
  void seq_to_heads(const Communicator& comm, const std::vector<Field>& fields) const;
  /// Heads → sequence: overwrites every field's `local` from all members' `gathered`; KV fields
  /// are summed over replicas when the split replicates KV heads (in member order:
  /// deterministic; such fields must be fp32). Collective as seq_to_heads.
  void heads_to_seq(const Communicator& comm, const std::vector<Field>& fields) const;

 private:
  HeadSplit split_;
  std::vector<std::int64_t> positions_;
  std::vector<std::vector<std::int64_t>> rows_;  ///< member i's tokens as rows of positions_
  TableTwins twins_;                             ///< positions_ and rows_ in the device's memory
  mutable Stager stage_;  // the exchanges are logically const: the pools only cache memory
};

/// What runs on the gathered head-parallel tensors between the two all-to-alls: local attention
/// over the group's sequence (ulysses) or a ring over the other groups (usp). Gathered shapes:
/// q, out, dout, dq [B, S_group, heads, D]; k, v, dk, dv [B, S_group, kv_heads, D];
/// lse, delta [B, heads, S_group]. forward overwrites out/lse, backward overwrites dq/dk/dv.
class GroupAttention {
 public:
  virtual ~GroupAttention() = default;
  virtual void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, PassTimes* times) const = 0;
  virtual void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& lse, const TensorView& delta, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, PassTimes* times) const = 0;
};

/// Local attention over the group's whole sequence (positions from the exchange; `base` carries
/// the mask resolved against S_global). Not collective. Keeps a reference to `ex`.
class LocalGroupAttention final : public GroupAttention {
 public:
  LocalGroupAttention(const UlyssesExchange& ex, kernels::KernelParams base)
      : ex_(ex), base_(std::move(base)) {}
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, PassTimes* times) const override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, PassTimes* times) const override;

 private:
  const UlyssesExchange& ex_;
  kernels::KernelParams base_;
};

/// The head-sharded tensors of one forward pass, kept for its backward: DeepSpeed-Ulysses keeps
/// them as the local attention's autograd context (arXiv 2309.14509 §3.1), so the backward moves
/// only dO in and dQ, dK, dV out. Shapes as GroupAttention's gathered ones; q, k, v in the inputs'
/// dtype (bf16/f16 kept as they travelled), lse fp32; out fp32 for fp32 inputs, else rounded to
/// the inputs' dtype, as the caller saves it, so that delta = rowsum(dO∘O) is the stateless path's
/// (and FlashAttention's) from the saved out. `local` (one member, u = 1): the gathered tensors
/// are the caller's own, which the backward receives again (same content: same key), so only lse
/// is kept. Storage comes from the exchange's pool; recycle() gives it back.
struct UlyssesContext {
  TypedTensor q, k, v, out, lse;
  bool local = false;
};

/// Hands a context's storage back to `pool`.
void recycle(device::BufferPool& pool, UlyssesContext&& ctx);

/// The key a saved context is stored under: dev.fingerprint of q, k, v and out, with out
/// rounded to q's dtype first (into a block of `pool`, given back) when q is 16-bit (the forward sees the
/// fp32 result the façade rounds afterwards, the backward gets the rounded one back — or the fp32 one: both
/// match).
std::uint64_t context_key(device::BufferPool& pool, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& out);

/// Up to `slots` saved contexts keyed by the device fingerprint of the forward's local q, k, v,
/// out; saving past `slots` drops the oldest. Not collective; slots = 0 keeps nothing.
class ContextStore {
 public:
  explicit ContextStore(int slots) : slots_(slots) {}
  int slots() const { return slots_; }
  /// Replaces a context with the same key; returns the contexts it drops (that one, or the oldest
  /// past `slots`; `ctx` itself when slots = 0) so that their storage can be recycled.
  std::vector<UlyssesContext> save(std::uint64_t key, UlyssesContext ctx);
  /// The context saved under `key`, or nullptr.
  const UlyssesContext* find(std::uint64_t key) const;
  /// Removes and returns the contexts saved under `key`.
  std::vector<UlyssesContext> erase(std::uint64_t key);

 private:
  int slots_;
  std::deque<std::pair<std::uint64_t, UlyssesContext>> entries_;
};

/// Ulysses forward on one group: seq→heads all-to-all of Q, K, V (in their dtype), `attend` on the
/// gathered heads, heads→seq of out (fp32) and of lse unless lse is empty (data == nullptr). q
/// [B,S_local,H,D], k, v [B,S_local,H_kv,D], out like q, lse [B,H,S_local] or empty. With `keep`, the
/// gathered q, k, v, out, lse are moved into it. With one member (u = 1) nothing is exchanged:
/// `attend` runs on the caller's views (a kept context holds lse only, `local`). Collective over
/// `group` (and whatever `attend` uses).
/// Memory: the group's sequence for this member's heads, B·S_group·(2·heads + 2·kv_heads)·D +
/// rows, plus one send and one receive buffer of the exchange.
void ulysses_forward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                     const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const TensorView& lse, PassTimes* times, UlyssesContext* keep = nullptr);
/// Ulysses backward from a saved context (DeepSpeed's): seq→heads of dO, delta = rowsum(dO∘O)
/// on the gathered heads, `attend` backward, heads→seq of dQ, dK, dV (dK, dV summed over KV
/// replicas). q, k, v, out: the caller's (read only for a `local` context). Collective over `group`.
void ulysses_backward_saved(const Communicator& group, const UlyssesExchange& ex,
                            const GroupAttention& attend, const UlyssesContext& ctx, const TensorView& dout,
                            const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& dq, const TensorView& dk,
                            const TensorView& dv, PassTimes* times);
/// Stateless Ulysses backward (no saved context): delta = rowsum(dO∘O) locally, seq→heads of
/// Q, dO, K, V, lse, delta, `attend` backward, heads→seq of dQ, dK, dV. Collective.
void ulysses_backward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                      const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse, const TensorView& dq,
                      const TensorView& dk, const TensorView& dv, PassTimes* times);

/// The passes of a head-parallel strategy around one Ulysses group with saved contexts, shared
/// by ulysses (attend: local attention) and usp (attend: the ring over the groups).
/// The backward takes the saved path when every rank of the strategy's communicator holds a
/// context for its (q, k, v, out) — agreed over the ranks (one control all-reduce) before any
/// payload moves — and the stateless path otherwise (which needs lse; the façade asks
/// backward_without_lse first when the caller passed none). Either path frees the context it
/// matched. With one member (u = 1) nothing moves, so a context is kept only for callers that
/// pass no lse, and a backward given lse takes the stateless path without looking for one.
class UlyssesFamilyBase : public PlannedStrategy {
 public:
  bool backward_without_lse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out) override;

 protected:
  UlyssesFamilyBase(const Setup& setup, const char* name)
      : PlannedStrategy(setup), name_(name), store_(setup.cfg.saved_contexts), key_pool_(*setup.device) {}
  void forward_in(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                  const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, DistStats& stats);
  void backward_in(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                   const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, DistStats& stats);

 private:
  /// Collective: the context saved for (q, k, v, out) when every rank holds one, else nullptr.
  const UlyssesContext* agreed_context(const TensorView& q, const TensorView& k, const TensorView& v,
                                       const TensorView& out, std::uint64_t& key) const;

  std::string name_;
  ContextStore store_;
  mutable device::BufferPool key_pool_;  // context_key's rounded out (16-bit inputs), kept across calls
};

}  // namespace burst::strategies
