"""torch integration: a torch.autograd.Function whose backward is burst's backward.

Tensors are handed to the C++ core as numpy views of the same memory (Tensor.numpy() on CPU
tensors shares storage), so nothing is copied except operands whose head dim is not contiguous.
bfloat16 tensors travel as their bit patterns (a uint16 view: numpy has no bfloat16). out and
the gradients have the input dtype, lse is float32 (as flash_attn).
CUDA tensors of a single-process call (a module built with CUDA, _device.check_local) take the
GPU path instead: their memory goes to the C++ core as (data_ptr, shape, strides, dtype, device),
no copy either, out / lse / the gradients are allocated on the same GPU, and the call waits for
torch's current stream first and returns once its own work is done. Distributed calls
(DistRunner) do the same with each rank's tensors on its own GPU: the plan was built for that
GPU (make_runner), messages travel through pinned host memory.
Imported lazily: the numpy path does not need torch.
"""
import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import _C
from ._device import check_local, device_name
from ._numpy import lse_shape

_GPU_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _contig_d(t):
    t = t.detach()
    return t if t.stride(-1) == 1 else t.contiguous()


def _np(t):
    """numpy view of a CPU tensor's memory; bfloat16 as its uint16 bit patterns."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _desc(t, name):
    """A CUDA tensor's memory for the GPU path: (data_ptr, shape, strides in elements, dtype,
    device)."""
    if t.dtype not in _GPU_DTYPES:
        raise ValueError(f"burst attention: {name} has dtype {t.dtype}; float32, bfloat16 or "
                         f"float16 expected")
    return (t.data_ptr(), list(t.shape), list(t.stride()), _GPU_DTYPES[t.dtype], str(t.device))


def _where(runner, q, k, v):
    """The device of this call: the operands' GPU in a CUDA build (after _C.check_gpu: a clear
    error when it is not usable; a distributed call's plan was built for it, make_runner), else
    "cpu"."""
    device = check_local("burst attention", q=q, k=k, v=v)
    if device != "cpu":
        _C.check_gpu(device)
    return device


def _after_torch(t):
    """Waits for the work torch enqueued on t's device so far (the operands, their contiguous
    copies): burst's GPU path runs on a stream of its own."""
    torch.cuda.current_stream(t.device).synchronize()


def forward_tensors(runner, q, k, v, varlen):
    """(out, lse) of runner's forward on tensors q, k, v (host, or one GPU: _where): out like q
    (contiguous), lse float32 (lse_shape), on q's device. The eager Function and the
    torch.compile op (_ops.py) both run this."""
    device = _where(runner, q, k, v)
    qc, kc, vc = _contig_d(q), _contig_d(k), _contig_d(v)
    if device != "cpu":
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(lse_shape(q, varlen), dtype=torch.float32, device=q.device)
        _after_torch(qc)
        runner.forward_device(_desc(qc, "q"), _desc(kc, "k"), _desc(vc, "v"), _desc(out, "out"),
                              _desc(lse, "lse"))
        return out, lse
    out = torch.empty(q.shape, dtype=q.dtype)
    lse = torch.empty(lse_shape(q, varlen), dtype=torch.float32)
    runner.forward(_np(qc), _np(kc), _np(vc), _np(out), lse.numpy())
    return out, lse


def backward_tensors(runner, dout, q, k, v, out, lse):
    """(dq, dk, dv) like q, k, v (contiguous, on their device) of runner's backward."""
    qc, kc, vc = _contig_d(q), _contig_d(k), _contig_d(v)
    dout = _contig_d(dout).to(qc.dtype)
    if device_name(qc) != "cpu":
        oc, lc = _contig_d(out), _contig_d(lse)
        check_local("burst attention backward", dout=dout, q=qc, k=kc, v=vc, out=oc, lse=lc)
        dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (qc, kc, vc))
        _after_torch(qc)
        runner.backward_device(_desc(dout, "dout"), _desc(qc, "q"), _desc(kc, "k"), _desc(vc, "v"),
                               _desc(oc, "out"), _desc(lc, "lse"), _desc(dq, "dq"), _desc(dk, "dk"),
                               _desc(dv, "dv"))
        return dq, dk, dv
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
