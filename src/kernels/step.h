// src/kernels/step.h — the one internal kernel entry (not installed).
//
// Every caller inside burst reaches the kernels through step_forward / step_backward: the public
// entries of burst/attention.h after validating their inputs (once per call, varlen split per
// sequence), and every step of every distributed strategy. The strategies validate their local
// tensors once per pass (DistAttention) and resolve the mask once per DistAttention (the
// ResolvedMask over (S_global, S_global), src/strategies/strategy_impl.h), so a ring step costs
// no re-validation, no copy of the mask's slices and no rebuild of its index — which the public
// entry would repeat per step (docs/design.md § One kernel entry).
// Trusts its inputs (debug-only asserts): shapes, strides, dtypes and positions as the public
// attention_forward documents for BSHD, with the mask already resolved against the global
// lengths the positions live in.
#pragma once

#include <cassert>
#include <cstdint>
#include <functional>

#include "burst/isa.h"
#include "burst/mask.h"
#include "burst/tensor.h"
#include "kernels/kernels.h"

namespace burst::kernels {

/// A trusted BSHD view [B,S,H,D] (D contiguous) as a kernel operand (Operand or MutOperand).
template <typename Op>
Op bshd_operand(const TensorView& t) {
  assert(t.ndim == 4 && (t.stride[3] == 1 || t.shape[3] <= 1));
  Op o;
  o.dtype = t.dtype;
  o.data = t.data;
  o.sb = t.stride[0];
  o.ss = t.stride[1];
  o.sh = t.stride[2];
  return o;
}

/// A trusted fp32 row view [B,H,S] as a kernel row operand (RowOperand or MutRowOperand).
template <typename Op>
Op row_operand(const TensorView& t) {
  assert(t.ndim == 3 && t.dtype == DType::F32);
  Op o;
  o.data = t.f32();
  o.sb = t.stride[0];
  o.sh = t.stride[1];
  o.ss = t.stride[2];
  return o;
}

/// attention_forward on trusted BSHD views: q [B,S_q,H,D], k, v [B,S_kv,H_kv,D], out like q,
/// lse [B,H,S_q] (any strides, D contiguous). Not collective.
void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, const KernelParams& p);

/// attention_backward_with_delta on trusted BSHD views (delta, lse [B,H,S_q]): adds into dq, dk,
/// dv (F32) when accumulate, else overwrites. Not collective.
void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, const KernelParams& p, bool accumulate);

}  // namespace burst::kernels
