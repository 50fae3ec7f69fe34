// The one internal kernel entry (step.h): trusted BSHD views and the KernelParams → a
// kernels::Problem (those parameters plus the views) → the reference or tiled kernel.
#include "kernels/step.h"

#include <cassert>

namespace burst::kernels {

namespace {

Problem problem(const TensorView& q, const TensorView& k, const TensorView& v, const KernelParams& p) {
  assert(p.mask != nullptr && p.num_threads >= 1 && p.isa != Isa::Auto);
  assert((p.q_pos != nullptr || q.shape[1] == 0) && (p.kv_pos != nullptr || k.shape[1] == 0));
  assert(q.dtype == k.dtype && k.dtype == v.dtype && k.shape == v.shape);
  Problem pb;
  static_cast<KernelParams&>(pb) = p;
  pb.B = q.shape[0];
  pb.S_q = q.shape[1];
  pb.S_kv = k.shape[1];
  pb.H = q.shape[2];
  pb.H_kv = k.shape[2];
  pb.D = q.shape[3];
  pb.q = bshd_operand<Operand>(q);
  pb.k = bshd_operand<Operand>(k);
  pb.v = bshd_operand<Operand>(v);
  return pb;
}

}  // namespace

void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, const KernelParams& p) {
  const Problem pb = problem(q, k, v, p);
  ForwardIO io;
  io.out = bshd_operand<MutOperand>(out);
  io.lse = row_operand<MutRowOperand>(lse);
  if (p.impl == KernelImpl::Reference)
    forward_reference(pb, io);
  else
    forward_tiled(pb, io);
}

void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, const KernelParams& p, bool accumulate) {
  const Problem pb = problem(q, k, v, p);
  BackwardIO io;
  io.dout = bshd_operand<Operand>(dout);
  io.lse = row_operand<RowOperand>(lse);
  io.delta = row_operand<RowOperand>(delta);
  io.dq = bshd_operand<MutOperand>(dq);
  io.dk = bshd_operand<MutOperand>(dk);
  io.dv = bshd_operand<MutOperand>(dv);
  io.accumulate = accumulate;
  if (p.impl == KernelImpl::Reference)
    backward_reference(pb, io);
  else
    backward_tiled(pb, io);
}

}  // namespace burst::kernels
