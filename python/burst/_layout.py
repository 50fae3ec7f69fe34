"""Sequence layouts on the Python side: which global tokens a rank holds, shard and unshard.

The assignment itself comes from the C++ planner (burst::make_layout, ``burst/plan.h``):
contiguous (rank r holds chunk r of P), zigzag (2P chunks; rank r holds chunks r and 2P-1-r),
striped (token t on rank t mod P), balanced (contiguous chunks placed so that per-rank work under
the mask is even). Local tensors hold their tokens in increasing global position.
"""
import numpy as np

from . import _C
from ._masks import build_mask


def _rank_size(comm, rank, world_size):
    if comm is not None:
        return comm.Get_rank(), comm.Get_size()
    return (0 if rank is None else int(rank)), (1 if world_size is None else int(world_size))


def positions(S_global, comm=None, layout="zigzag", mask=None, *, rank=None, world_size=None):
    """Global positions (int64, increasing, length S_local) of the tokens this rank holds — use
    them as RoPE position ids under zigzag / striped layouts.

    comm: mpi4py communicator (None: single process unless rank/world_size are given, which lets
    a single process ask about any rank). mask: only layout="balanced" depends on it — pass the
    mask the attention uses (a burst.Mask such as burst.Mask(causal=True), a benchmark name or
    slices; None = full).
    Not collective. Raises ValueError when S_global does not split as the layout needs
    (contiguous / striped: divisible by P; zigzag: by 2P) or for an unknown layout."""
    r, P = _rank_size(comm, rank, world_size)
    if P == 1:
        return np.arange(int(S_global), dtype=np.int64)
    m = build_mask(mask, False, (-1, -1), int(S_global))
    return _C.make_layout(layout, P, int(S_global), m)[r]


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def shard(x, comm, layout="zigzag", dim=1, mask=None):
    """This rank's tokens of a global tensor x (sequence along ``dim``: 1 for BSHD, 0 for THD).
    numpy or torch; with torch the result is differentiable (an index_select). Not collective:
    every rank passes the same global x and keeps its own part."""
    pos = positions(x.shape[dim], comm, layout, mask)
    if _is_torch(x):
        import torch
        return x.index_select(dim, torch.from_numpy(pos))
    return np.take(x, pos, axis=dim)


def unshard(x_local, comm, layout="zigzag", dim=1, mask=None):
    """Inverse of shard: gathers every rank's local tensor into the global one, on every rank.
    Collective over comm (an Allgatherv). numpy in, numpy out; torch in, torch out (detached: no
    gradient flows through unshard)."""
    is_torch = _is_torch(x_local)
    bf16 = is_torch and str(x_local.dtype) == "torch.bfloat16"   # numpy has no bfloat16: move the bits
    if is_torch:
        import torch
        t = x_local.detach().cpu()
        xn = (t.view(torch.int16) if bf16 else t).numpy()
    else:
        xn = np.asarray(x_local)
    if comm is None or comm.Get_size() == 1:
        return x_local.detach().clone() if is_torch else xn.copy()
    rows = np.ascontiguousarray(np.moveaxis(xn, dim, 0))
    counts = comm.allgather(rows.shape[0])
    tails = comm.allgather(rows.shape[1:])
    if any(t != tails[0] for t in tails):
        raise ValueError(f"unshard: local shapes differ across ranks beyond dim {dim}: {tails}")
    S_global = int(sum(counts))
    gathered = np.empty((S_global,) + rows.shape[1:], dtype=rows.dtype)
    row_elems = int(np.prod(rows.shape[1:], dtype=np.int64))
    comm.Allgatherv(rows, [gathered, [c * row_elems for c in counts]])
    P = comm.Get_size()
    m = build_mask(mask, False, (-1, -1), S_global)
    order = np.concatenate(_C.make_layout(layout, P, S_global, m))
    out = np.empty_like(gathered)
    out[order] = gathered
    out = np.moveaxis(out, 0, dim)
    if is_torch:
        result = torch.from_numpy(np.ascontiguousarray(out))
        return result.view(torch.bfloat16) if bf16 else result
    return np.ascontiguousarray(out)
