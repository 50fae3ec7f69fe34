"""burst — exact context-parallel attention over MPI, with a flash_attn-shaped Python API.

    import burst
    out = burst.attn_func(q, k, v, causal=True)                       # one process
    out = burst.attn_func(q, k, v, causal=True, comm=MPI.COMM_WORLD)  # q, k, v: this rank's shard

Layout BSHD: q [B, S, H, D], k and v [B, S, H_kv, D] (GQA: H % H_kv == 0, query head h reads KV
head h // (H // H_kv)); varlen THD: [total_tokens, H, D] with int32 cu_seqlens. CPU torch
tensors (float32, bfloat16, float16) or numpy arrays (float32, float16); torch inputs get a real
autograd Function whose backward runs burst's backward. out and gradients come back in the input
dtype; lse is float32 natural log, [B, H, S_local] (varlen [H, T_local]). Accumulation is float32;
bfloat16 on a CPU with AVX512-BF16 multiplies bf16 operands (docs/design.md § bf16 arithmetic),
float16 is widened to float32. float64 raises NotImplementedError naming the conversion.

With ``comm`` (an mpi4py communicator or a torch.distributed ProcessGroup: gloo, e.g. under
torchrun; the results are bit-identical) the inputs are LOCAL shards: rank r holds the tokens
``burst.positions(S_global, comm, layout)`` (see ``burst.shard`` / ``burst.unshard``), and every
rank must call with identical arguments except the tensors. Masks are stated on global positions.
Errors: ValueError (invalid argument), NotImplementedError (unsupported combination),
RuntimeError (communication / internal); under ``comm`` every rank raises the same error.
"""
from . import _C
from ._cache import clear as clear_plan_cache, stats as plan_cache_stats
from ._layout import padded_length, positions, shard, unshard
from ._masks import Mask, benchmark_mask, mask_names
from ._numpy import (backward_numpy, check_extra, check_unsupported, forward_numpy, local_error,
                     make_runner)
from ._plan import DistAttention
from ._kvcache import DistKVCache, attn_with_kvcache
from ._C import __version__, release_kernel_workspace

__all__ = ["attn_func", "attn_varlen_func", "attn_qkvpacked_func", "attn_kvpacked_func",
           "attn_varlen_qkvpacked_func", "attn_varlen_kvpacked_func", "attn_backward",
           "attn_varlen_backward", "positions", "shard", "unshard", "padded_length",
           "plan_cache_stats", "clear_plan_cache", "Mask", "benchmark_mask", "mask_names",
           "strategies", "layouts",
           "DistAttention", "ring_flash_attn_func", "zigzag_ring_flash_attn_func",
           "stripe_flash_attn_func", "release_kernel_workspace",
           "DistKVCache", "attn_with_kvcache"]

layouts = ("contiguous", "zigzag", "striped", "balanced")


def strategies():
    """Names of the distributed strategies this build provides (burst, ring, allgather, ...)."""
    return list(_C.all_strategies())


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _compiling(q):
    """True while torch.compile traces a call with torch tensors on torch >= 2.4 (_ops.py)."""
    if not _is_torch(q):
        return False
    from . import _ops
    return _ops.compiling()


def _run(q, k, v, runner, varlen, return_lse, return_attn_probs):
    if _is_torch(q):
        from ._torch import AttnFunction
        out, lse = AttnFunction.apply(q, k, v, runner, varlen)
    else:
        out, lse = forward_numpy(runner, q, k, v, varlen)
    if return_attn_probs:
        return out, lse, None
    return (out, lse) if return_lse else out


def attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
              softcap=0.0, alibi_slopes=None, deterministic=True, return_attn_probs=False,
              comm=None, *, return_lse=False, strategy="burst", layout="zigzag", mask=None,
              S_global=None, **extra):
    """Exact attention softmax(softmax_scale · QKᵀ + mask)·V, flash_attn_func's arguments in its
    order, with ``comm`` appended (as ring-flash-attention appends ``group``).

    q [B, S, H, D], k, v [B, S_kv, H_kv, D], one dtype: float32, bfloat16 or float16 (CPU torch)
    or float32, float16 (numpy); D contiguous or copied. out in that dtype, lse float32.
    softmax_scale: default 1/sqrt(D). causal / window_size=(left, right): flash_attn semantics on
    global positions (bottom-right aligned, -1 = unbounded). mask: a general mask instead (a
    burst.Mask, a benchmark mask name, or a list of slices; see burst._masks).
    comm: mpi4py communicator or torch.distributed ProcessGroup (gloo); None = single process. strategy: one of burst.strategies()
    ("burst", "ring", "allgather", "ulysses", "usp", "distflash", "headpar"); layout: how the global
    sequence is split ("zigzag", "contiguous", "striped", "balanced") — the caller's shards must
    follow it (burst.shard). Extras: num_threads, impl ("tiled" / "reference": the kernel),
    backward_side ("auto" / "query" / "kv"), ulysses_degree, usp_ring ("ring" / "burst": usp's ring
    across the Ulysses groups; "burst" is BurstEngine's hybrid), ranks_per_node, double_ring, overlap, mask_aware (burst, ring: only the blocks the mask
    needs move; False: the full ring), partials_dtype ("fp32" / "bf16": burst, ring — the
    backward's dQ / dK, dV partials on the write ring in bf16, half those bytes, error growing
    with P: docs/strategies.md § bf16 write-ring partials), comm_timeout (seconds without communication progress before
    the job is aborted with a message naming the rank, host, peer, strategy and ring step; default
    $BURST_COMM_TIMEOUT or 300).
    S_global: with comm, the real sequence length when the shards carry padding (burst.shard(x,
    comm, layout, pad=True) pads to burst.padded_length): padding tokens are masked (out = 0,
    lse = -inf, zero gradients); None = the shards hold exactly the sequence.
    Returns out (like q); (out, lse) with return_lse; (out, lse, None) with return_attn_probs
    (attention probabilities are never materialised). A row with no visible key gives out = 0
    and lse = -inf.
    Collective over comm; the plan is cached per (communicator, shapes, mask, strategy, layout,
    extras), so repeated calls cost one small control exchange besides the pass itself
    (burst.plan_cache_stats()). Every collective runs under the watchdog (comm_timeout): a rank
    that never arrives ends the job with a message naming it, never a hang. Raises ValueError / NotImplementedError (dropout_p != 0, softcap,
    alibi_slopes, float64 inputs) / RuntimeError, identically on every rank.
    Cost: 4·D·H·(visible pairs) flop forward, 2.5x that backward; O(tile) extra memory.
    torch.compile (torch >= 2.4): without mask=, S_global= and extras the call is the custom op
    burst::attn_forward (its backward burst::attn_backward): no graph break (burst._ops).
    """
    if (mask is None and S_global is None and not extra and dropout_p == 0.0 and softcap == 0.0
            and alibi_slopes is None and _compiling(q)):
        # Under torch.compile: the custom op (_ops.py), one opaque node instead of a graph break.
        from . import _ops
        out, lse = _ops.attn(q, k, v, softmax_scale, causal, window_size, deterministic, comm,
                             strategy, layout)
        if return_attn_probs:
            return out, lse, None
        return (out, lse) if return_lse else out
    # An unsupported argument on one rank only must not leave the others in the agreement:
    # the error travels through it (make_runner's local_error) and every rank raises it.
    runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                         window_size=window_size, deterministic=deterministic, comm=comm,
                         strategy=strategy, layout=layout, mask=mask, extra=extra,
                         S_global=S_global,
                         local_error=local_error(check_unsupported, dropout_p, softcap, alibi_slopes))
    return _run(q, k, v, runner, False, return_lse, return_attn_probs)


def attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=True,
                        return_attn_probs=False, comm=None, **kw):
    """flash_attn_qkvpacked_func: qkv [B, S, 3, H, D] (q, k, v stacked; torch gradients flow into
    qkv). Otherwise as attn_func (keywords after comm included)."""
    return attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                     window_size, softcap, alibi_slopes, deterministic, return_attn_probs, comm,
                     **kw)


def attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                       window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=True,
                       return_attn_probs=False, comm=None, **kw):
    """flash_attn_kvpacked_func: q [B, S, H, D], kv [B, S_kv, 2, H_kv, D]. As attn_func."""
    return attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size,
                     softcap, alibi_slopes, deterministic, return_attn_probs, comm, **kw)


def attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                     softcap=0.0, alibi_slopes=None, deterministic=True, return_attn_probs=False,
                     comm=None, *, return_lse=False, strategy="burst", layout="zigzag", **extra):
    """Packed variable-length attention, flash_attn_varlen_func's arguments in its order.

    q [T_q, H, D], k, v [T_kv, H_kv, D]; cu_seqlens_* (batch + 1,) int offsets into the packed
    dimension; each sequence attends only within itself (positions restart at 0 per sequence;
    causal / window_size apply per sequence). max_seqlen_* are accepted for compatibility and
    checked against cu_seqlens. lse is [H, T_q].
    With comm: the PACKED sequence of T_global tokens is split across ranks by ``layout``
    (q, k, v are this rank's T_local tokens, as burst.shard(x, comm, layout, dim=0) gives) and
    cu_seqlens are the GLOBAL offsets (cu_seqlens_q == cu_seqlens_k, cu[-1] == T_global); it runs
    as B = 1 attention with a document mask. Collective; errors as attn_func.
    """
    def check_varlen():
        check_unsupported(dropout_p, softcap, alibi_slopes)
        for name, cu, mx in (("q", cu_seqlens_q, max_seqlen_q), ("k", cu_seqlens_k, max_seqlen_k)):
            lens = [int(b) - int(a) for a, b in zip(list(cu), list(cu)[1:])]
            if lens and mx is not None and int(mx) < max(lens):
                raise ValueError(f"max_seqlen_{name}={mx} is smaller than the longest sequence "
                                 f"{max(lens)} in cu_seqlens_{name}")
    runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                         window_size=window_size, deterministic=deterministic, comm=comm,
                         strategy=strategy, layout=layout, mask=None, varlen=True,
                         cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, extra=extra,
                         local_error=local_error(check_varlen))
    return _run(q, k, v, runner, True, return_lse, return_attn_probs)


def attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                               causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=True, return_attn_probs=False, comm=None, **kw):
    """flash_attn_varlen_qkvpacked_func: qkv [T, 3, H, D], one cu_seqlens for q and k. As
    attn_varlen_func."""
    return attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen,
                            max_seqlen, dropout_p, softmax_scale, causal, window_size, softcap,
                            alibi_slopes, deterministic, return_attn_probs, comm, **kw)


def attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=True, return_attn_probs=False, comm=None, **kw):
    """flash_attn_varlen_kvpacked_func: q [T_q, H, D], kv [T_kv, 2, H_kv, D]. As
    attn_varlen_func."""
    return attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                            max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap,
                            alibi_slopes, deterministic, return_attn_probs, comm, **kw)


def attn_backward(dout, q, k, v, out, lse, softmax_scale=None, causal=False,
                  window_size=(-1, -1), deterministic=True, comm=None, *, strategy="burst",
                  layout="zigzag", mask=None, S_global=None, **extra):
    """Backward for numpy users (torch users call .backward()): returns (dq, dk, dv) given the
    forward's out and lse and the upstream gradient dout (like out). Same problem arguments as
    the attn_func call that produced out/lse. Collective over comm."""
    runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                         window_size=window_size, deterministic=deterministic, comm=comm,
                         strategy=strategy, layout=layout, mask=mask, extra=extra,
                         S_global=S_global)
    return backward_numpy(runner, dout, q, k, v, out, lse)


def attn_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, softmax_scale=None,
                         causal=False, window_size=(-1, -1), deterministic=True, comm=None, *,
                         strategy="burst", layout="zigzag", **extra):
    """Varlen twin of attn_backward (lse [H, T_q])."""
    runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                         window_size=window_size, deterministic=deterministic, comm=comm,
                         strategy=strategy, layout=layout, mask=None, varlen=True,
                         cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, extra=extra)
    return backward_numpy(runner, dout, q, k, v, out, lse)


from .ring_flash_attn import (ring_flash_attn_func, stripe_flash_attn_func,  # noqa: E402
                              zigzag_ring_flash_attn_func)

del check_extra
