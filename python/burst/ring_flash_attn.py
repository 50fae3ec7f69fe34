"""ring-flash-attention's API on burst: the names, signatures and contracts of
zhuzilin/ring-flash-attention's ``ring_flash_attn`` package, so that

    from burst.ring_flash_attn import zigzag_ring_flash_attn_func     # was: from ring_flash_attn

keeps the calls as they are (``burst.ring_flash_attn.install()`` also makes the plain
``import ring_flash_attn`` resolve here); ``group`` is a torch.distributed ProcessGroup (gloo; torchrun's
env:// set-up) or an mpi4py communicator (``mpirun``). RingAttention (strategy "ring") on upstream's layouts:
``ring_*`` contiguous (rank r holds chunk r of P), ``zigzag_ring_*`` zigzag (chunks r and
2P-1-r of 2P), ``stripe_*`` striped (token t on rank t mod P). Inputs are this rank's shards.

Contracts kept from upstream:
* ``group=None`` means torch's default process group when torch.distributed is initialised (as
  upstream), else ``MPI.COMM_WORLD``. A ProcessGroup's messages go through the group's own calls
  (burst._group); the results are bit-identical to the mpi4py path's.
* Varlen forms take the LOCAL ``cu_seqlens`` (upstream: ``cu_seqlens_global // world_size``): every
  packed sequence is split across the ranks by the layout on its own (each sequence's length must
  divide by P, 2P for zigzag), and local tensors hold, per sequence in order, this rank's part.
  lse is [H, T_local].
* ``return_attn_probs=True`` returns (out, lse, None).
* ``llama3_flash_attn_varlen_func`` (and its kvpacked / qkvpacked forms) with
  ``llama3_flash_attn_prepare_cu_seqlens``: the Llama-3 all-gather on burst's "allgather"
  strategy, the packed sequence split contiguously, documents free to cross ranks; the offsets
  are prepare's outputs (this rank's q offsets, k offsets within ``local_k_slice``).
Differences: host tensors, or torch CUDA tensors with each rank's on its GPU (a module built
with CUDA; messages through host memory, not NCCL); float32, bfloat16 or float16 (numpy: float32, float16), computed in
float32, out and gradients in the input dtype; ``dropout_p`` and ``alibi_slopes`` raise
NotImplementedError; ``window_size`` is honoured on global positions (upstream ignores it
across ranks). Every call is collective over the group; the plan is cached (burst.attn_func).
"""
import sys

import numpy as np

from . import _run
from ._comm import rank_size
from ._numpy import check_unsupported, make_runner

__all__ = [f"{p}_{f}" for p in ("ring_flash_attn", "zigzag_ring_flash_attn", "stripe_flash_attn")
           for f in ("func", "kvpacked_func", "qkvpacked_func", "varlen_func",
                     "varlen_kvpacked_func", "varlen_qkvpacked_func")]

_LAYOUTS = {"ring_flash_attn": "contiguous", "zigzag_ring_flash_attn": "zigzag",
            "stripe_flash_attn": "striped"}


def _world(group):
    """group, or for None torch's default process group when torch.distributed is initialised
    (upstream's meaning), else MPI.COMM_WORLD."""
    if group is not None:
        return group
    from ._group import default_group
    world = default_group()
    if world is not None:
        return world
    from mpi4py import MPI
    return MPI.COMM_WORLD


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
        P, positions, error = rank_size(comm)[1], None, None
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
                     f"{layout} layout; local shards {packing}. group: torch ProcessGroup or mpi4py "
                     f"communicator, None = torch's default group (else MPI.COMM_WORLD). Collective over group. See burst.ring_flash_attn.")
    return forms


for _name, _layout in _LAYOUTS.items():
    for _suffix, _f in _make(_name, _layout).items():
        globals()[f"{_name}_{_suffix}"] = _f
del _name, _layout, _suffix, _f


def _ints(x):
    """A list of Python ints from a torch tensor, numpy array or sequence of offsets."""
    return [int(c) for c in np.asarray(x.cpu() if hasattr(x, "cpu") else x).reshape(-1)]


def _as_offsets(values, like):
    """values as int offsets of like's kind (torch tensor of like's dtype, numpy, or a list)."""
    if hasattr(like, "cpu") and hasattr(like, "new_tensor"):
        return like.new_tensor(values)
    if isinstance(like, np.ndarray):
        return np.asarray(values, dtype=like.dtype)
    return list(values)


def llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, causal, rank, world_size):
    """ring-flash-attention's helper for the Llama-3 all-gather (same signature and returns).

    cu_seqlens: the GLOBAL offsets of the packed sequences over the whole group (int, from 0 to
    T_global; T_global divisible by world_size). Rank r holds tokens [r·L, (r+1)·L), L =
    T_global / world_size (the contiguous layout). Returns (cu_seqlens_q, cu_seqlens_k,
    max_seqlen_q, max_seqlen_k, local_k_slice): cu_seqlens_q the offsets of this rank's L query
    tokens; local_k_slice the global token range of the keys they need (from the start of the
    first document touching the rank to the rank's end when causal, else to the end of its last
    document); cu_seqlens_k the offsets within that range. Offsets come back as the input's kind
    (a torch tensor of its dtype, a numpy array, or a list). Pure.
    Raises ValueError when T_global does not divide by world_size (pad the packed sequence with
    a short extra document), or for offsets that are not non-decreasing from 0."""
    cu = _ints(cu_seqlens)
    P, r = int(world_size), int(rank)
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens={cu}: expected global offsets from 0, non-decreasing")
    if cu[-1] % P:
        raise ValueError(f"cu_seqlens[-1]={cu[-1]} tokens do not divide over world_size={P}: "
                         f"append a document of {P - cu[-1] % P} padding tokens")
    L = cu[-1] // P
    lo, hi = r * L, (r + 1) * L
    left = int(np.searchsorted(cu, lo, side="left"))
    right = int(np.searchsorted(cu, hi, side="left"))
    if cu[left] != lo:
        left -= 1
    q_off = [c - lo for c in cu[left:right + 1]]
    q_off[0], q_off[-1] = 0, L
    slice_left = cu[left]
    slice_right = hi if causal else cu[right]
    k_off = [c - slice_left for c in cu[left:right + 1]]
    k_off[-1] = slice_right - slice_left
    max_q = max(b - a for a, b in zip(q_off, q_off[1:]))
    max_k = max(b - a for a, b in zip(k_off, k_off[1:]))
    return (_as_offsets(q_off, cu_seqlens), _as_offsets(k_off, cu_seqlens), max_q, max_k,
            slice(slice_left, slice_right))


def _llama3_global_offsets(comm, T_local, cu_seqlens_q, cu_seqlens_k, local_k_slice, causal,
                           heads_k, heads_k_stride):
    """The GLOBAL cu_seqlens behind every rank's llama3_flash_attn_prepare_cu_seqlens outputs:
    each rank knows the document boundaries inside its own tokens (cu_seqlens_q) and where the
    document it starts in began (local_k_slice.start); one allgather joins them. Validates this
    rank's arguments first; every rank raises the same error (agree). Collective over comm."""
    from ._numpy import agree
    r, P = rank_size(comm)
    error, bounds = None, []
    try:
        cq, ck = _ints(cu_seqlens_q), _ints(cu_seqlens_k)
        start, stop = int(local_k_slice.start), int(local_k_slice.stop)
        lo = r * T_local
        if heads_k_stride is not None and (int(heads_k_stride) <= 0 or heads_k % int(heads_k_stride)):
            raise ValueError(f"heads_k_stride={heads_k_stride} must divide H_kv={heads_k}")
        if len(cq) < 2 or cq[0] != 0 or any(b < a for a, b in zip(cq, cq[1:])):
            raise ValueError(f"cu_seqlens_q={cq}: expected offsets from 0, non-decreasing")
        if cq[-1] != T_local:
            hint = (" — these look like the GLOBAL cu_seqlens" if cq[-1] == P * T_local and P > 1
                    else "")
            raise ValueError(f"cu_seqlens_q[-1]={cq[-1]} but this rank holds {T_local} tokens{hint}: "
                             f"pass llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, causal, rank, "
                             f"world_size)'s cu_seqlens_q, cu_seqlens_k and local_k_slice (or call "
                             f"burst.attn_varlen_func(..., comm=comm), which takes the global "
                             f"cu_seqlens)")
        expect_stop = lo + T_local if causal else None
        if (len(ck) != len(cq) or ck[0] != 0 or start > lo or start + ck[-1] != stop
                or (expect_stop is not None and stop != expect_stop) or stop < lo + T_local
                or any(start + a != lo + b for a, b in zip(ck[1:-1], cq[1:-1]))):
            raise ValueError(f"cu_seqlens_q={cq}, cu_seqlens_k={ck}, local_k_slice={local_k_slice} "
                             f"do not describe rank {r}'s tokens [{lo}, {lo + T_local}) "
                             f"(causal={causal}): pass llama3_flash_attn_prepare_cu_seqlens("
                             f"cu_seqlens, causal, rank, world_size)'s outputs for this rank")
        bounds = [start] + [lo + c for c in cq[1:-1]]
    except (ValueError, TypeError, AttributeError) as e:
        error = e if isinstance(e, ValueError) else ValueError(f"llama3 arguments: {e}")
    reports = agree(comm, error, (T_local, bounds))
    lengths = {t for t, _ in reports}
    if len(lengths) != 1:
        raise ValueError(f"llama3_flash_attn_varlen_func: ranks hold different token counts "
                         f"{[t for t, _ in reports]}; the contiguous split needs equal shards")
    cu = sorted({0, T_local * P}.union(*[set(b) for _, b in reports]))
    return np.asarray(cu, dtype=np.int64)


def llama3_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, heads_k_stride, local_k_slice, dropout_p=0.0,
                                  softmax_scale=None, causal=False, window_size=(-1, -1),
                                  alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                  group=None):
    """ring-flash-attention's llama3_flash_attn_varlen_func (same signature), on burst's
    all-gather strategy (the Llama-3 context parallelism: K, V all-gathered, dK, dV
    reduce-scattered).

    q [T_local, H, D], k, v [T_local, H_kv, D]: this rank's tokens [r·T_local, (r+1)·T_local) of
    the packed global sequence (the contiguous split; every rank the same T_local).
    cu_seqlens_q, cu_seqlens_k, max_seqlen_*, local_k_slice: this rank's outputs of
    llama3_flash_attn_prepare_cu_seqlens(cu_seqlens_global, causal, rank, world_size); documents
    may cross ranks. Each document attends only within itself (causal / window_size per
    document, on its own positions). heads_k_stride must divide H_kv and changes nothing here
    (burst gathers every head at once). lse [H, T_local] float32. Returns out; (out, lse, None)
    with return_attn_probs. dtypes: float32, bfloat16, float16 (out and gradients in the input
    dtype, computed in float32). Collective over group (a torch ProcessGroup or mpi4py
    communicator; None as in the other functions): one
    allgather of the document boundaries, then the cached plan's pass.
    Raises (every rank): ValueError for offsets that do not match this rank's tokens (e.g. the
    global cu_seqlens passed as cu_seqlens_q) or unequal shards; NotImplementedError for
    dropout_p, alibi_slopes."""
    check_unsupported(dropout_p, 0.0, alibi_slopes)
    comm = _world(group)
    heads_k = k.shape[1] if getattr(k, "ndim", 0) == 3 else -1
    cu = _llama3_global_offsets(comm, q.shape[0], cu_seqlens_q, cu_seqlens_k, local_k_slice,
                                causal, heads_k, heads_k_stride)
    runner = make_runner(q, k, v, softmax_scale=softmax_scale, causal=causal,
                         window_size=window_size, deterministic=deterministic, comm=comm,
                         strategy="allgather", layout="contiguous", mask=None, varlen=True,
                         cu_seqlens_q=cu, cu_seqlens_k=cu)
    return _run(q, k, v, runner, True, False, return_attn_probs)


def llama3_flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                           max_seqlen_k, heads_k_stride, local_k_slice,
                                           dropout_p=0.0, softmax_scale=None, causal=False,
                                           window_size=(-1, -1), alibi_slopes=None,
                                           deterministic=False, return_attn_probs=False,
                                           group=None):
    """llama3_flash_attn_varlen_func with kv [T_local, 2, H_kv, D]."""
    return llama3_flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                         max_seqlen_q, max_seqlen_k, heads_k_stride,
                                         local_k_slice, dropout_p, softmax_scale, causal,
                                         window_size, alibi_slopes, deterministic,
                                         return_attn_probs, group)


def llama3_flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                            max_seqlen_k, heads_k_stride, local_k_slice,
                                            dropout_p=0.0, softmax_scale=None, causal=False,
                                            window_size=(-1, -1), alibi_slopes=None,
                                            deterministic=False, return_attn_probs=False,
                                            group=None):
    """llama3_flash_attn_varlen_func with qkv [T_local, 3, H, D]."""
    return llama3_flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens_q,
                                         cu_seqlens_k, max_seqlen_q, max_seqlen_k, heads_k_stride,
                                         local_k_slice, dropout_p, softmax_scale, causal,
                                         window_size, alibi_slopes, deterministic,
                                         return_attn_probs, group)


__all__ += ["llama3_flash_attn_prepare_cu_seqlens", "llama3_flash_attn_varlen_func",
            "llama3_flash_attn_varlen_kvpacked_func", "llama3_flash_attn_varlen_qkvpacked_func"]


def install():
    """Makes ``import ring_flash_attn`` (and ``from ring_flash_attn import ...``) resolve to this
    module, so a script's ring-flash-attention calls run as written (its process setup must be
    mpi4py's or torch.distributed's; tests/py/upstream_style_script.py). Process-wide; returns this module."""
    sys.modules["ring_flash_attn"] = sys.modules[__name__]
    return sys.modules[__name__]
