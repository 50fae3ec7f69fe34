// src/strategies/ulysses.h — the sequence↔heads all-to-all of the head-parallel strategies (internal).
//
// Shared by the head-parallel strategies: ulysses (DeepSpeed-Ulysses, arXiv 2309.14509), usp
// (Ulysses inside a ring, arXiv 2405.07719) and tp (Megatron-style heads, arXiv 2205.05198).
// UlyssesExchange moves BSHD tensors between "my tokens, all heads" and "all tokens of the
// group, my heads" with one all_to_all_v per direction (head ownership: HeadSplit in
// peer_plan.h); GroupAttention is what runs between the two all-to-alls.
// See docs/strategies.md §ulysses, §usp, §tp DeepSpeed-Ulysses (arXiv 2309.14509), USP (arXiv 2405.07719), Megatron-LM (arXiv 2205.05198).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/plan.h"
#include "burst/tensor.h"
#include "strategies/peer_plan.h"
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
    bool kv = false;    ///< split by KV heads (K, V, dK, dV) rather than query heads
    bool row = false;   ///< [B, H, S] row vector instead of BSHD
  };

  /// Throws Error(InvalidArgument) when member positions overlap or are not increasing.
  UlyssesExchange(std::vector<std::vector<std::int64_t>> member_positions, HeadSplit split);

  const std::vector<std::int64_t>& positions() const { return positions_; }
  std::int64_t group_length() const { return static_cast<std::int64_t>(positions_.size()); }
  std::int64_t local_length(int member) const {
    return static_cast<std::int64_t>(rows_[static_cast<std::size_t>(member)].size());
  }
  const HeadSplit& split() const { return split_; }
  /// Member i's tokens as row indices into positions().
  const std::vector<std::int64_t>& rows(int member) const { return rows_[static_cast<std::size_t>(member)]; }

  /// Sequence → heads: fills every field's `gathered` from all members' `local`.
  /// Collective over `comm` (size u, rank = member index): every member calls with fields of
  /// the same kinds in the same order. Sends Σ_fields B·S_local·(heads or kv_heads)·W floats to
  /// each other member (W = D, or 1 for rows). Cost: one all_to_all_v plus two copies.
  void seq_to_heads(const Communicator& comm, const std::vector<Field>& fields) const;
  /// Heads → sequence: overwrites every field's `local` from all members' `gathered`; KV fields
  /// are summed over replicas when the split replicates KV heads (in member order:
  /// deterministic). Collective as seq_to_heads.
  void heads_to_seq(const Communicator& comm, const std::vector<Field>& fields) const;

 private:
  HeadSplit split_;
  std::vector<std::int64_t> positions_;
  std::vector<std::vector<std::int64_t>> rows_;   ///< member i's tokens as rows of positions_
};

/// Seconds a pass spent in kernels and blocked in communication (for DistStats).
struct PassTimes {
  double compute_seconds = 0, comm_seconds = 0;
};

/// Copies one pass's measurements into the DistStats fields a strategy owns.
inline void fill_stats(DistStats& stats, const PassTimes& t, std::int64_t visible_pairs,
                       std::int64_t peak_buffer_bytes) {
  stats.compute_seconds = t.compute_seconds;
  stats.exposed_comm_seconds = t.comm_seconds;
  stats.visible_pairs = visible_pairs;
  stats.peak_buffer_bytes = peak_buffer_bytes;
}

/// Runs one pass of a strategy. Once payload may be in flight an exception on one rank would
/// leave its peers waiting in a collective, so it aborts the communicator with a rank-tagged
/// message instead (docs/style.md rule 5). Inputs were validated and agreed before, so this is for
/// internal failures only (allocation, MPI errors).
template <typename F>
void run_pass(const Communicator& comm, const char* what, F&& pass) {
  try {
    pass();
  } catch (const std::exception& e) {
    comm.abort(std::string(what) + ": " + e.what());
  }
}

/// Adds the wall time of its scope to *sink (no-op for nullptr).
class Stopwatch {
 public:
  explicit Stopwatch(double* sink) : sink_(sink), t0_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    if (sink_) *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point t0_;
};

/// The shell the peer strategies share: the numbers they report come from their pure plan
/// (peer_plan), and every pass runs under run_pass (abort, never a hang) with its times.
class PeerStrategyBase : public Strategy {
 protected:
  /// Not collective. Throws Error(Internal) if the configuration has no peer plan (it passed
  /// validation, so it must have one).
  explicit PeerStrategyBase(const Setup& setup);
  /// Runs pass(PassTimes&) and fills the DistStats fields the strategy owns.
  template <typename F>
  void run(const char* what, bool backward, DistStats& stats, F&& pass) const {
    PassTimes t;
    run_pass(comm_, what, [&] { pass(t); });
    fill_stats(stats, t, pairs_, backward ? peak_bwd_ : peak_fwd_);
  }

  Communicator comm_;
  std::int64_t pairs_ = 0, peak_fwd_ = 0, peak_bwd_ = 0;
};

/// What runs on the gathered head-parallel tensors between the two all-to-alls: local attention
/// over the group's sequence (ulysses) or a ring over the other groups (usp). Gathered shapes:
/// q, out, dout, dq [B, S_group, heads, D]; k, v, dk, dv [B, S_group, kv_heads, D];
/// lse, delta [B, heads, S_group]. forward overwrites out/lse, backward overwrites dq/dk/dv.
class GroupAttention {
 public:
  virtual ~GroupAttention() = default;
  virtual void forward(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const TensorView& lse, PassTimes* times) const = 0;
  virtual void backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& lse, const TensorView& delta,
                        const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        PassTimes* times) const = 0;
};

/// Local attention over the group's whole sequence (positions from the exchange, mask on
/// global positions, resolved against S_global). Not collective. Keeps a reference to `ex`.
class LocalGroupAttention final : public GroupAttention {
 public:
  LocalGroupAttention(const UlyssesExchange& ex, AttentionParams base, std::int64_t S_global)
      : ex_(ex), base_(std::move(base)), S_global_(S_global) {}
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, PassTimes* times) const override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& lse, const TensorView& delta, const TensorView& dq,
                const TensorView& dk, const TensorView& dv, PassTimes* times) const override;

 private:
  const UlyssesExchange& ex_;
  AttentionParams base_;
  std::int64_t S_global_;
};

/// Ulysses forward on one group: seq→heads all-to-all of Q, K, V, `attend` on the gathered
/// heads, heads→seq of out and lse. q [B,S_local,H,D], k, v [B,S_local,H_kv,D], out like q,
/// lse [B,H,S_local]. Collective over `group` (and whatever `attend` uses). Memory: the
/// group's sequence for this member's heads, B·S_group·(3·heads + 2·kv_heads)·D + rows, plus
/// one send and one receive buffer of the exchange.
void ulysses_forward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                     const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse, PassTimes* times);
/// Ulysses backward: delta = rowsum(dO∘O) locally, seq→heads of Q, dO, K, V, lse, delta,
/// `attend` backward, heads→seq of dQ, dK, dV (dK, dV summed over KV replicas). Collective.
void ulysses_backward(const Communicator& group, const UlyssesExchange& ex, const GroupAttention& attend,
                      const TensorView& dout, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& out, const TensorView& lse,
                      const TensorView& dq, const TensorView& dk, const TensorView& dv, PassTimes* times);

}  // namespace burst::strategies
