// src/strategies/ring_family.h — the ring passes on the step skeleton: burst and ring over the
// ranks, usp over its Ulysses groups (one ring serves both).
//
// ring_pass_forward: K,V circulate (flat or double ring), each step's partial (O_j, lse_j)
// merged into the output with merge form B (softmax_merge.h). ring_pass_backward: either side —
// QuerySide (BurstAttention, docs/algorithm.md §3): Q, dO, delta, lse circulate, dQ partials
// follow on the write chain, K, V, dK, dV stay; KvSide (RingAttention): K, V circulate, dK, dV
// partials follow, Q, dO, lse, dQ stay. Blocks with no visible pair are skipped (the payload
// still moves, unless the mask-aware schedule runs). A ring member's block is whatever it holds:
// a rank's tokens (burst, ring) or a Ulysses group's sequence for the group's heads (usp).
// Dtypes: Q, K, V, dO circulate in their storage dtype (bf16/f16 as their 16-bit patterns, half
// the bytes of fp32; the kernels read them directly); delta and lse stay fp32, and so do the
// dQ/dK/dV partials on the write ring unless DistConfig::partials_dtype asks for bf16 wire
// copies (summed in fp32 at every hop), so nothing is summed in 16 bits. out, dq, dk, dv are
// fp32 here (the façade rounds them once at the end).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "burst/mask.h"
#include "burst/strategy.h"
#include "kernels/kernels.h"
#include "strategies/ring_skeleton.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

class TableTwins;

/// The blocks of one ring: ring member j holds block j. Fixed per strategy (built once).
struct RingBlocks {
  /// Global positions of block j's tokens (increasing; every block the same count). Not owned:
  /// they outlive the passes (the plan's layout, usp's groups).
  std::vector<const std::int64_t*> positions;
  /// pairs[i][j]: visible (q, k) pairs per (batch, head) of block i's queries against block j's keys.
  std::vector<std::vector<std::int64_t>> pairs;
  /// The mask the positions are seen through, resolved over (S_global, S_global).
  const ResolvedMask* mask = nullptr;
  /// Kernel parameters every step starts from (positions and the progress hook set per call).
  kernels::KernelParams base;
  /// The positions' device twins (step_tables.h: the plan's, or usp's groups') the steps'
  /// parameters point at; null: the host arrays (the CPU, executors run alone in tests).
  const TableTwins* tables = nullptr;
  bool overlap = true;  ///< kernel calls poll the ring's transfers (DistConfig::overlap)
  /// Backward kernel calls cut by backward_spans and the own block split in halves
  /// (RingExecutor::run split_own): burst and ring. false: one call per block (usp, whose
  /// sums then stay those of one call over the group's sequence), cut only where `shaped`.
  bool split_backward = true;
  /// The device prefers whole-shaped steps (Device::prefers_shaped_steps, a GPU): the forward's
  /// calls cut by forward_spans and both passes' calls by shaped_spans into cuDNN's bands (every
  /// zigzag step; usp's group blocks too, its backward from the whole block). false: one forward
  /// call per block (the CPU).
  bool shaped = false;

  std::int64_t visible(int q_block, int kv_block) const {
    return pairs[static_cast<std::size_t>(q_block)][static_cast<std::size_t>(kv_block)];
  }
};

/// Forward over the ring: q [B,S,H,D] of this member's block, k, v [B,S,H_kv,D] (any dtype, D
/// contiguous), out [B,S,H,D] fp32, lse [B,H,S] fp32 overwritten. mask_aware: the mask-aware
/// schedule (RingExecutor::run_direct). steps: per-step records (or null). Collective over the
/// executor's ring. Returns the run's measurements.
RingRunStats ring_pass_forward(const RingExecutor& exec, const RingBlocks& blocks, bool mask_aware,
                               const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse, std::vector<StepTimes>* steps);

/// Backward over the ring on `side` (QuerySide or KvSide), delta = rowsum(dO∘O) [B,H,S] given;
/// dq, dk, dv (fp32) overwritten. Shapes as ring_pass_forward; collective likewise. out: the
/// member's out [B,S,H,D] that delta came from, or null; the KvSide steps hand its rows to the
/// device (Device::step_backward: a kernel that reads O instead of delta takes it); the QuerySide
/// circulates q, dout, delta and lse without out.
RingRunStats ring_pass_backward(const RingExecutor& exec, const RingBlocks& blocks, bool mask_aware,
                                BackwardSide side, const TensorView& dout, const TensorView& q,
                                const TensorView& k, const TensorView& v, const TensorView& lse,
                                const TensorView& delta, const TensorView& dq, const TensorView& dk,
                                const TensorView& dv, std::vector<StepTimes>* steps,
                                const TensorView* out = nullptr);

// The burst and ring strategies: the forward ring pass, and the backward on `side` — the plan's
// choice (burst: QuerySide, or Auto resolved by bytes) or always KvSide (ring).
std::unique_ptr<Strategy> make_ring_family(const Setup& setup, bool kv_side_backward);

}  // namespace burst::strategies
