"""ring-flash-attention's API on burst: the names, signatures and contracts of
zhuzilin/ring-flash-attention's ``ring_flash_attn`` package, so that

    from burst.ring_flash_attn import zigzag_ring_flash_attn_func     # was: from ring_flash_attn

runs unchanged code (``burst.ring_flash_attn.install()`` also makes the plain
``import ring_flash_attn`` resolve here). RingAttention (strategy "ring") on upstream's layouts:
``ring_*`` contiguous (rank r holds chunk r of P), ``zigzag_ring_*`` zigzag (chunks r and
2P-1-r of 2P), ``stripe_*`` striped (token t on rank t mod P). Inputs are this rank's shards.

Contracts kept from upstream:
* ``group=None`` means the whole world (upstream: torch's default process group; here
  ``MPI.COMM_WORLD``). ``group`` is an mpi4py communicator: a torch ProcessGroup cannot yield one.
* Varlen forms take the LOCAL ``cu_seqlens`` (upstream: ``cu_seqlens_global // world_size``): every
  packed sequence is split across the ranks by the layout on its own (each sequence's length must
  divide by P, 2P for zigzag), and local tensors hold, per sequence in order, this rank's part.
  lse is [H, T_local].
* ``return_attn_probs=True`` returns (out, lse, None).
Differences: CPU float32 (numpy or torch); ``dropout_p`` and ``alibi_slopes`` raise
NotImplementedError; ``window_size`` is honoured on global positions (upstream ignores it
across ranks). Every call is collective over the group; the plan is cached (burst.attn_func).
"""
import sys

import numpy as np

from . import _run
from ._numpy import check_unsupported, make_runner

__all__ = [f"{p}_{f}" for p in ("ring_flash_attn", "zigzag_ring_flash_attn", "stripe_flash_attn")
           for f in ("func", "kvpacked_func", "qkvpacked_func", "varlen_func",
                     "varlen_kvpacked_func", "varlen_qkvpacked_func")]

_LAYOUTS = {"ring_flash_attn": "contiguous", "zigzag_ring_flash_attn": "zigzag",
            "stripe_flash_attn": "striped"}


def _world(group):
    from mpi4py import MPI
    return MPI.COMM_WORLD if group is None else group


def varlen_positions(cu_seqlens_local, P, layout):
    """Global positions of every rank's tokens under upstream's varlen split: sequence i of
    local length l (global P*l, starting at P*cu[i]) gives rank r its chunk r of P (contiguous),
    its chunks r and 2P-1-r of 2P (zigzag) or its tokens r, r+P, ... (striped). Returns P
    increasing int64 arrays. Raises ValueError for offsets that are not non-decreasing from 0 or
    an odd local length under zigzag with P > 1. Pure."""
    cu = [int(c) for c in np.asarray(cu_seqlens_local).reshape(-1)]
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens={cu}: expected local offsets from 0, non-decreasing")
    ranks = [[] for _ in range(P)]
    for a, b in zip(cu, cu[1:]):
        n, g0 = b - a, P * a
        if layout == "zigzag" and P > 1 and n % 2:
            raise ValueError(f"zigzag varlen: local sequence length {n} (cu_seqlens {a}..{b}) is "
                             f"odd; every sequence must divide by 2P = {2 * P}")
        for r in range(P):
            if layout == "contiguous" or P == 1:
                ranks[r].append(g0 + r * n + np.arange(n))
            elif layout == "zigzag":
                c = n // 2
                ranks[r] += [g0 + r * c + np.arange(c), g0 + (2 * P - 1 - r) * c + np.arange(c)]
            else:
                ranks[r].append(g0 + r + P * np.arange(n))
    return [np.concatenate(p).astype(np.int64) if p else np.zeros(0, np.int64) for p in ranks]


def _make(name, layout):
    def func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
             alibi_slopes=None, deterministic=False, return_attn_probs=False, group=None):
        check_unsupported(dropout_p, 0.0, alibi_slopes)
        runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                             window_size=window_size, deterministic=deterministic,
                             comm=_world(group), strategy="ring", layout=layout, mask=None)
        return _run(q, k, v, runner, False, False, return_attn_probs)

    def kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                      window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                      return_attn_probs=False, group=None):
        return func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size,
                    alibi_slopes, deterministic, return_attn_probs, group)

    def qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                       window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                       return_attn_probs=False, group=None):
        return func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                    window_size, alibi_slopes, deterministic, return_attn_probs, group)

    def varlen_func(q, k, v, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                    causal=False, window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, group=None):
        check_unsupported(dropout_p, 0.0, alibi_slopes)
        comm = _world(group)
        cu = np.asarray(cu_seqlens.cpu() if hasattr(cu_seqlens, "cpu") else cu_seqlens)
        P, positions, error = comm.Get_size(), None, None
        try:
            positions = varlen_positions(cu, P, layout)
        except ValueError as e:      # raised on every rank by make_runner's agreement
            error = e
        runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                             window_size=window_size, deterministic=deterministic, comm=comm,
                             strategy="ring", layout=layout, mask=None, varlen=True,
                             cu_seqlens_q=cu, cu_seqlens_k=cu, positions=positions,
                             doc_offsets=cu.astype(np.int64) * P, local_error=error)
        return _run(q, k, v, runner, True, False, return_attn_probs)

    def varlen_kvpacked_func(q, kv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                             causal=False, window_size=(-1, -1), alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, group=None):
        return varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens, max_seqlen, dropout_p,
                           softmax_scale, causal, window_size, alibi_slopes, deterministic,
                           return_attn_probs, group)

    def varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                              causal=False, window_size=(-1, -1), alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, group=None):
        return varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, max_seqlen, dropout_p,
                           softmax_scale, causal, window_size, alibi_slopes, deterministic,
                           return_attn_probs, group)

    forms = {"func": func, "kvpacked_func": kvpacked_func, "qkvpacked_func": qkvpacked_func,
             "varlen_func": varlen_func, "varlen_kvpacked_func": varlen_kvpacked_func,
             "varlen_qkvpacked_func": varlen_qkvpacked_func}
    for suffix, f in forms.items():
        f.__name__ = f.__qualname__ = f"{name}_{suffix}"
        packing = ("qkv [B,S,3,H,D]" if suffix == "qkvpacked_func" else
                   "q [B,S,H,D], kv [B,S,2,H_kv,D]" if suffix == "kvpacked_func" else
                   "qkv [T,3,H,D]" if suffix == "varlen_qkvpacked_func" else
                   "q [T,H,D], kv [T,2,H_kv,D]" if suffix == "varlen_kvpacked_func" else
                   "q [T,H,D], k, v [T,H_kv,D]" if suffix == "varlen_func" else
                   "q [B,S,H,D], k, v [B,S,H_kv,D]")
        f.__doc__ = (f"ring-flash-attention's {f.__name__} (same signature): RingAttention on the "
                     f"{layout} layout; local shards {packing}. group: mpi4py communicator, "
                     f"None = MPI.COMM_WORLD. Collective over group. See burst.ring_flash_attn.")
    return forms


for _name, _layout in _LAYOUTS.items():
    for _suffix, _f in _make(_name, _layout).items():
        globals()[f"{_name}_{_suffix}"] = _f
del _name, _layout, _suffix, _f


def install():
    """Makes ``import ring_flash_attn`` (and ``from ring_flash_attn import ...``) resolve to this
    module, so a script written for ring-flash-attention runs unchanged. Process-wide; returns
    this module."""
    sys.modules["ring_flash_attn"] = sys.modules[__name__]
    return sys.modules[__name__]
