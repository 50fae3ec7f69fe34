// burst/strategy.h — distributed (context-parallel) attention: the public façade.
//
// Owns: DistAttention, which binds a communicator, a configuration (strategy, layout, topology)
// and a problem (B, S_global, H, H_kv, D, mask) into a reusable plan, then runs exact forward and
// backward passes on each rank's local shards. Strategies: burst (BurstAttention, arXiv
// 2403.09347), ring (RingAttention), allgather (Llama-3), ulysses (DeepSpeed-Ulysses), usp
// (Ulysses × ring), distflash (DistFlashAttn), tp (head-parallel baseline). Striped / zigzag
// attention = ring or burst on the striped / zigzag layout. See docs/strategies.md.
// Conventions: local tensors are BSHD [B, S_local, H, D] holding this rank's tokens in
// increasing global position (positions() lists them); lse is [B, H, S_local] fp32 natural log.
// The mask is on global positions. Results equal single-process attention on the unsharded
// sequence (within fp32 rounding).
// Failure policy: constructor and passes check everything that could differ between ranks
// before the first message and every rank throws the same burst::Error; a failure after
// messages are in flight aborts the communicator with a rank-tagged message.
// Does not: call MPI_Init, own model weights, or support dropout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/plan.h"

namespace burst {

enum class StrategyKind : std::uint8_t { Burst, Ring, AllGather, Ulysses, Usp, DistFlash, Tp };
/// Which side circulates in the backward: query side (Q, dO, D, lse + dQ ring; BurstAttention)
/// or KV side (K, V + dK, dV ring; RingAttention). Auto picks fewer bytes (docs/strategies.md).
enum class BackwardSide : std::uint8_t { Auto, QuerySide, KvSide };

const char* to_string(StrategyKind s) noexcept;
StrategyKind strategy_from_string(const std::string& name);   ///< Throws Error(InvalidArgument)
std::vector<StrategyKind> all_strategies();

struct DistConfig {
  StrategyKind strategy = StrategyKind::Burst;
  LayoutKind layout = LayoutKind::Zigzag;
  int ulysses_degree = 0;          ///< usp: Ulysses degree u (P = u·r); 0 → largest divisor of P dividing H_kv
  int ranks_per_node = 0;          ///< burst double ring: L; 0 → from MPI_Comm_split_type(SHARED)
  bool double_ring = true;         ///< burst: topology-aware double ring when nodes > 1
  BackwardSide backward_side = BackwardSide::Auto;
  bool overlap = true;             ///< double buffering + progress polling between tiles
  int num_threads = 0;             ///< kernel threads per rank; 0 → OpenMP default
  std::optional<float> softmax_scale;
};

struct ProblemShape {
  std::int64_t B = 1, S_global = 0, H = 0, H_kv = 0, D = 0;
};

/// Per-pass counters of this rank (reset at the start of each pass).
struct DistStats {
  std::int64_t bytes_sent = 0;          ///< payload bytes this rank sent
  std::int64_t messages_sent = 0;
  double seconds = 0;                   ///< wall time of the pass on this rank
  double compute_seconds = 0;           ///< time inside attention kernels
  double exposed_comm_seconds = 0;      ///< time blocked waiting for communication
  std::int64_t visible_pairs = 0;       ///< (q, k) pairs this rank computed (FLOP = 4·D·pairs·H fwd)
  std::int64_t peak_buffer_bytes = 0;   ///< largest communication/working buffers held at once
  std::string backward_side;            ///< "query" or "kv" (backward passes)
};

class DistAttention {
 public:
  /// Builds the plan. Collective over comm: every rank passes identical cfg, shape and mask.
  /// Throws (same verdict on all ranks, before any payload moves): Error(InvalidArgument) for
  /// mismatched or invalid arguments, Error(Unsupported) for strategy/mask/layout pairs the
  /// strategy cannot express (e.g. ulysses with H % P ≠ 0).
  DistAttention(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape,
                const Mask& mask);
  ~DistAttention();
  DistAttention(DistAttention&&) noexcept;
  DistAttention& operator=(DistAttention&&) noexcept;

  const Plan& plan() const;
  const DistConfig& config() const;
  /// Global positions of this rank's local tokens (for RoPE), increasing; length S_local.
  const std::vector<std::int64_t>& positions() const;
  std::int64_t local_length() const;

  /// Forward. q [B,S_local,H,D], k, v [B,S_local,H_kv,D], out like q, lse [B,H,S_local].
  /// Collective. Throws as the constructor (shape checks are agreed over ranks first).
  void forward(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const TensorView& lse);
  /// Backward; dq like q, dk, dv like k (overwritten). Collective.
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                const TensorView& v, const TensorView& out, const TensorView& lse,
                const TensorView& dq, const TensorView& dk, const TensorView& dv);
  const DistStats& last_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace burst
