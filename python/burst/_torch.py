"""torch integration: a torch.autograd.Function whose backward is burst's backward.

Tensors are handed to the C++ core as numpy views of the same memory (Tensor.numpy() on CPU
tensors shares storage), so nothing is copied except operands whose head dim is not contiguous.
bfloat16 tensors travel as their bit patterns (a uint16 view: numpy has no bfloat16). out and
the gradients have the input dtype, lse is float32 (as flash_attn).
Tensors off the host (CUDA) are refused by name (_device.py) until burst has a GPU path.
Imported lazily: the numpy path does not need torch.
"""
import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ._device import check_host
from ._numpy import lse_shape


def _contig_d(t):
    t = t.detach()
    return t if t.stride(-1) == 1 else t.contiguous()


def _np(t):
    """numpy view of a CPU tensor's memory; bfloat16 as its uint16 bit patterns."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def forward_tensors(runner, q, k, v, varlen):
    """(out, lse) of runner's forward on CPU tensors q, k, v: out like q (contiguous), lse
    float32 (lse_shape). The eager Function and the torch.compile op (_ops.py) both run this."""
    check_host("burst attention", q=q, k=k, v=v)
    qc, kc, vc = _contig_d(q), _contig_d(k), _contig_d(v)
    out = torch.empty(q.shape, dtype=q.dtype)
    lse = torch.empty(lse_shape(q, varlen), dtype=torch.float32)
    runner.forward(_np(qc), _np(kc), _np(vc), _np(out), lse.numpy())
    return out, lse


def backward_tensors(runner, dout, q, k, v, out, lse):
    """(dq, dk, dv) like q, k, v (contiguous) of runner's backward."""
    qc, kc, vc = _contig_d(q), _contig_d(k), _contig_d(v)
    dout = _contig_d(dout).to(qc.dtype)
    dq = torch.empty(qc.shape, dtype=qc.dtype)
    dk = torch.empty(kc.shape, dtype=kc.dtype)
    dv = torch.empty(vc.shape, dtype=vc.dtype)
    runner.backward(_np(dout), _np(qc), _np(kc), _np(vc), _np(_contig_d(out)),
                    _contig_d(lse).numpy(), _np(dq), _np(dk), _np(dv))
    return dq, dk, dv


class AttnFunction(torch.autograd.Function):
    """(q, k, v, runner, varlen) -> (out, lse); lse is not differentiable, and the backward is
    not itself differentiable (no double backward)."""

    @staticmethod
    def forward(ctx, q, k, v, runner, varlen):
        qc, kc, vc = _contig_d(q), _contig_d(k), _contig_d(v)
        out, lse = forward_tensors(runner, qc, kc, vc, varlen)
        ctx.save_for_backward(qc, kc, vc, out, lse)
        ctx.runner = runner
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, _dlse):
        qc, kc, vc, out, lse = ctx.saved_tensors
        dq, dk, dv = backward_tensors(ctx.runner, dout, qc, kc, vc, out, lse)
        return dq, dk, dv, None, None
