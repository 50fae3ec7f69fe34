"""torch.compile support: burst's attention as torch.library custom ops (torch >= 2.4).

``torch.compile`` cannot trace into burst (its C++ passes, plan cache and agreement are opaque
Python and native code), so inside a compiled region ``attn_func`` calls the custom op
``burst::attn_forward`` instead of the autograd Function: dynamo records one opaque call, the
fake (meta) implementation gives inductor the output shapes (out like q, contiguous; lse
[B, H, S_q] float32), and ``register_autograd`` routes the backward to ``burst::attn_backward``.
The ops run the same runner as the eager path (make_runner, then the same forward / backward
buffers as _torch.AttnFunction), so a compiled model computes the same attention bits.
Covered: attn_func's keyword set softmax_scale, causal, window_size, deterministic, strategy,
layout, return_lse, with comm=None or a communicator (mpi4py or torch ProcessGroup) handed over
as a small integer (the communicators burst saw in eager calls, in order: _comm.known_index; use
it once outside the compiled region, e.g. burst.shard / burst.positions); other arguments (mask=, S_global=,
extras, varlen) keep the autograd Function (a graph break under torch.compile).
On older torch (1.13: no torch.library.custom_op) AVAILABLE is False and nothing is registered.
"""
import torch

from ._comm import known
from ._numpy import make_runner
from ._torch import backward_tensors, forward_tensors


def _version():
    try:
        return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return (0, 0)


AVAILABLE = _version() >= (2, 4) and hasattr(torch.library, "custom_op")


def comm_index(comm):
    """The ops' integer for comm (-1: None): its index among the communicators burst has seen in
    an eager call (_comm.known_index; a trace cannot register one: its list append would only
    happen after the graph ran). Raises ValueError for a communicator never seen eagerly."""
    from ._comm import known_index
    index = known_index(comm, register=False)
    if index is None:
        raise ValueError("torch.compile: this communicator was never used by burst outside the "
                         "compiled region; call burst.positions / burst.shard / attn_func with it "
                         "once eagerly first")
    return index


def compiling():
    """True while torch.compile (dynamo) traces: then attn_func calls the custom op."""
    return AVAILABLE and torch.compiler.is_compiling()


def _runner(q, k, v, softmax_scale, causal, window_left, window_right, deterministic, comm,
            strategy, layout):
    return make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                       window_size=(window_left, window_right), deterministic=deterministic,
                       comm=known(comm), strategy=strategy, layout=layout,
                       mask=None)


if AVAILABLE:
    from typing import Optional, Tuple

    Tensor = torch.Tensor

    @torch.library.custom_op("burst::attn_forward", mutates_args=())
    def attn_forward(q: Tensor, k: Tensor, v: Tensor, softmax_scale: Optional[float], causal: bool,
                     window_left: int, window_right: int, deterministic: bool, comm: int,
                     strategy: str, layout: str) -> Tuple[Tensor, Tensor]:
        """burst.attn_func's (out, lse) for q [B,S,H,D], k, v [B,S_kv,H_kv,D] (local shards with
        comm >= 0: collective over that communicator). out like q (contiguous), lse [B,H,S]
        float32."""
        runner = _runner(q, k, v, softmax_scale, causal, window_left, window_right,
                         deterministic, comm, strategy, layout)
        return forward_tensors(runner, q, k, v, False)

    @attn_forward.register_fake
    def _attn_forward_fake(q, k, v, softmax_scale, causal, window_left, window_right,
                           deterministic, comm, strategy, layout):
        B, S, H = q.shape[0], q.shape[1], q.shape[2]
        return q.new_empty(q.shape), q.new_empty((B, H, S), dtype=torch.float32)

    @torch.library.custom_op("burst::attn_backward", mutates_args=())
    def attn_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                      softmax_scale: Optional[float], causal: bool, window_left: int,
                      window_right: int, deterministic: bool, comm: int, strategy: str,
                      layout: str) -> Tuple[Tensor, Tensor, Tensor]:
        """(dq, dk, dv) like q, k, v (contiguous) from the forward's out, lse and dout.
        Collective like attn_forward."""
        runner = _runner(q, k, v, softmax_scale, causal, window_left, window_right,
                         deterministic, comm, strategy, layout)
        return backward_tensors(runner, dout, q, k, v, out, lse)

    @attn_backward.register_fake
    def _attn_backward_fake(dout, q, k, v, out, lse, *args):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def _setup_context(ctx, inputs, output):
        q, k, v, *args = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = args

    def _backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attn_backward(dout, q, k, v, out, lse, *ctx.args)
        return (dq, dk, dv) + (None,) * len(ctx.args)

    attn_forward.register_autograd(_backward, setup_context=_setup_context)


def attn(q, k, v, softmax_scale, causal, window_size, deterministic, comm, strategy, layout):
    """(out, lse) through the custom op (AVAILABLE only)."""
    return torch.ops.burst.attn_forward(q, k, v, softmax_scale, bool(causal),
                                        int(window_size[0]), int(window_size[1]),
                                        bool(deterministic), comm_index(comm), strategy, layout)
