// burst/strategy.h — distributed (context-parallel) attention: the public façade.
//
// Owns: DistAttention, which binds a communicator, a configuration (strategy, layout, topology)
// and a problem (B, S_global, H, H_kv, D, mask) into a reusable plan, then runs exact forward and
// backward passes on each rank's local shards. Strategies: burst (BurstAttention, arXiv
// 2403.09347), ring (RingAttention), allgather (Llama-3), ulysses (DeepSpeed-Ulysses), usp
// (Ulysses × ring), distflash (DistFlashAttn), headpar (head-parallel attention: all-gather Q, K, V,
// reduce-scatter O — the attention of a Megatron-TP layer started from Q, K, V instead of X). Striped /
// zigzag attention = ring or burst on the striped / zigzag layout. See docs/strategies.md. Conventions: local
// tensors are BSHD [B, S_local, H, D] holding this rank's tokens in increasing global position (positions()
// lists them); lse is [B, H, S_local] fp32 natural log. The mask is on global positions. Results equal
// single-process attention on the unsharded sequence (within fp32 rounding). Failure policy: constructor and
// passes check everything that could differ between ranks before the first message and every rank throws the
// same burst::Error; a failure after messages are in flight aborts the communicator with a rank-tagged
// message. Does not: call MPI_Init, own model weights, or support dropout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/plan.h"

namespace burst {

/// Per-pass counters of this rank (reset at the start of each pass).
struct DistStats {
  std::int64_t bytes_sent = 0;             ///< payload bytes this rank sent
  std::int64_t bytes_sent_inter_node = 0;  ///< the part of bytes_sent sent to ranks on other nodes
  std::int64_t messages_sent = 0;
  double seconds = 0;                  ///< wall time of the pass on this rank
  double compute_seconds = 0;          ///< time inside attention kernels
  double exposed_comm_seconds = 0;     ///< time blocked waiting for communication
  std::int64_t visible_pairs = 0;      ///< (q, k) pairs this rank computed (FLOP = 4·D·pairs·H fwd)
  std::int64_t peak_buffer_bytes = 0;  ///< largest communication/working buffers held at once
  std::string backward_side;           ///< "query" or "kv" (backward passes)
};

/// One step of one pass on one rank (DistConfig::timeline). Steps are the plan's: record i of a
/// pass is PassPlan::steps[i] (ring family: ring step t, then the final hop of the write ring;
/// allgather: its one collective step). Strategies without a per-step executor (ulysses, usp,
/// distflash, headpar) record nothing (`burst bench dist --timeline` then writes one record per
/// pass with `whole_pass` set, from DistStats). Times are what this rank spent during the step
/// (a prefetch posted during step t for step t + 1 counts its bytes at t + 1, as the plan does).
struct StepRecord {
  std::string pass;  ///< "fwd" or "bwd"
  int rank = 0, step = 0;
  bool whole_pass = false;     ///< the strategy records passes, not steps
  double compute_seconds = 0;  ///< wall seconds inside attention kernels (progress polls included)
  /// CPU seconds of the calling thread inside the kernels (CLOCK_THREAD_CPUTIME_ID): unlike the
  /// wall time it does not grow when ranks share a core. With num_threads > 1: thread 0's share.
  double compute_cpu_seconds = 0;
  double wait_seconds = 0;          ///< blocked waiting for transfers or collectives
  double copy_seconds = 0;          ///< outside kernels and waits: copies, wire conversion, partial sums
  std::int64_t bytes_sent = 0;      ///< payload bytes this rank sent for the step (the plan's count)
  std::int64_t bytes_received = 0;  ///< payload bytes this rank received for the step
};

/// Collects a rank's StepRecords over passes (DistConfig::timeline points at one). Not
/// thread-safe and not collective: one per rank, written by the rank's passes.
class Timeline {
 public:
  void add(StepRecord record) { records_.push_back(std::move(record)); }
  const std::vector<StepRecord>& records() const { return records_; }
  void clear() { records_.clear(); }

 private:
  std::vector<StepRecord> records_;
};

class DistAttention {
 public:
  /// Builds the plan. Collective over comm: every rank passes identical cfg, shape and mask.
  /// Throws (same verdict on all ranks, before any payload moves): Error(InvalidArgument) for
  /// mismatched or invalid arguments, Error(Unsupported) for strategy/mask/layout pairs the
  /// strategy cannot express (e.g. ulysses with H % P ≠ 0).
  DistAttention(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape, const Mask& mask);
  /// Where the passes' operands live and run (a GPU; library-internal: src/strategy_device.h
  /// defines it, so only code linking a device library, burst_cuda, can name one). The
  /// constructor above runs on the host.
  struct OnDevice;
  /// As the constructor above, every pass's operands in on's device memory (check_device
  /// refuses the others on every rank). Collective; throws as above.
  DistAttention(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape, const Mask& mask,
                const OnDevice& on);
  ~DistAttention();
  DistAttention(DistAttention&&) noexcept;
  DistAttention& operator=(DistAttention&&) noexcept;

  const Plan& plan() const;
  const DistConfig& config() const;
  /// Global positions of this rank's local tokens (for RoPE), increasing; length S_local.
  const std::vector<std::int64_t>& positions() const;
  std::int64_t local_length() const;

  /// Forward. q [B,S_local,H,D], k, v [B,S_local,H_kv,D], out like q, lse [B,H,S_local], or an
  /// empty view (data == nullptr, on every rank) when the caller does not want lse: ulysses and
  /// usp then do not ship it (DeepSpeed returns no lse). ulysses and usp keep the forward's
  /// head-sharded tensors for its backward (DistConfig::saved_contexts).
  /// Collective. Throws as the constructor (shape checks are agreed over ranks first).
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse);
  /// Backward; dq like q, dk, dv like k (overwritten). q, k, v, out, lse are the forward's.
  /// ulysses and usp use a saved context when one matches q, k, v, out on every rank (then lse
  /// may be empty); otherwise lse is required (Error(InvalidArgument) on every rank). Collective.
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv);
  const DistStats& last_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace burst
