"""torch integration: a torch.autograd.Function whose backward is burst's backward.

Tensors are handed to the C++ core as numpy views of the same memory (Tensor.numpy() on CPU
tensors shares storage), so nothing is copied except operands whose head dim is not contiguous.
Imported lazily: the numpy path does not need torch.
"""
import torch
from torch.autograd.function import once_differentiable

from ._numpy import lse_shape


def _contig_d(t):
    t = t.detach()
    return t if t.stride(-1) == 1 else t.contiguous()


class AttnFunction(torch.autograd.Function):
    """(q, k, v, runner, varlen) -> (out, lse); lse is not differentiable, and the backward is
    not itself differentiable (no double backward)."""

    @staticmethod
    def forward(ctx, q, k, v, runner, varlen):
        if q.device.type != "cpu" or k.device.type != "cpu" or v.device.type != "cpu":
            raise ValueError(f"burst runs on CPU; got devices {q.device}, {k.device}, {v.device}")
        qc, kc, vc = _contig_d(q), _contig_d(k), _contig_d(v)
        out = torch.empty(q.shape, dtype=torch.float32)
        lse = torch.empty(lse_shape(q, varlen), dtype=torch.float32)
        runner.forward(qc.numpy(), kc.numpy(), vc.numpy(), out.numpy(), lse.numpy())
        ctx.save_for_backward(qc, kc, vc, out, lse)
        ctx.runner = runner
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, _dlse):
        qc, kc, vc, out, lse = ctx.saved_tensors
        dout = _contig_d(dout)
        dq = torch.empty(qc.shape, dtype=torch.float32)
        dk = torch.empty(kc.shape, dtype=torch.float32)
        dv = torch.empty(vc.shape, dtype=torch.float32)
        ctx.runner.backward(dout.numpy(), qc.numpy(), kc.numpy(), vc.numpy(), out.numpy(),
                            lse.numpy(), dq.numpy(), dk.numpy(), dv.numpy())
        return dq, dk, dv, None, None
