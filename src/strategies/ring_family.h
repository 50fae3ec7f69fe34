// src/strategies/ring_family.h — the passes shared by burst and ring on the step skeleton.
//
// ring_forward: K,V circulate (flat or double ring), each step's partial (O_j, lse_j) merged
// into the output with merge form B (softmax_merge.h). ring_backward: either side —
// QuerySide (BurstAttention, docs/algorithm.md §3): Q, dO, delta, lse circulate, dQ partials follow
// on the write chain, K, V, dK, dV stay; KvSide (RingAttention): K, V circulate, dK, dV partials
// follow, Q, dO, lse, dQ stay. Blocks the plan marks empty (no visible pair) are skipped.
// Dtypes: Q, K, V, dO circulate in their storage dtype (bf16/f16 as their 16-bit patterns, half
// the bytes of fp32; the kernels read them directly); delta and lse stay fp32, and so do the
// dQ/dK/dV partials on the write ring unless DistConfig::partials_dtype asks for bf16 wire
// copies (summed in fp32 at every hop), so nothing is summed in 16 bits. out, dq, dk, dv are fp32 here (the
// façade rounds them once at the end).
#pragma once

#include <memory>

#include "burst/strategy.h"
#include "strategies/ring_skeleton.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

void ring_forward(const Setup& setup, const RingExecutor& exec, const TensorView& q, const TensorView& k,
                  const TensorView& v, const TensorView& out, const TensorView& lse, DistStats& stats);

void ring_backward(const Setup& setup, const RingExecutor& exec, BackwardSide side, const TensorView& dout,
                   const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                   const TensorView& lse, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                   DistStats& stats);

// The burst and ring strategies: ring_forward, and ring_backward on `side` — the plan's choice
// (burst: QuerySide, or Auto resolved by bytes) or always KvSide (ring).
std::unique_ptr<Strategy> make_ring_family(const Setup& setup, bool kv_side_backward);

}  // namespace burst::strategies
