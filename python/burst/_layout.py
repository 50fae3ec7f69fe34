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
        from ._comm import rank_size
        return rank_size(comm)
    return (0 if rank is None else int(rank)), (1 if world_size is None else int(world_size))


def _layout_of(S_global, P, layout, mask, pad):
    """(S_run, positions of every rank): the layout DistAttention builds for these arguments —
    with pad, over the padded length and the mask confined to the real tokens (burst/plan.h)."""
    S_global = int(S_global)
    m = build_mask(mask, False, (-1, -1), S_global)
    if pad:
        S_run = int(_C.padded_length(layout, P, S_global))
        m = _C.mask_without_padding(m, S_global)
    else:
        S_run = S_global
    return S_run, _C.make_layout(layout, P, S_run, m)


def positions(S_global, comm=None, layout="zigzag", mask=None, *, pad=False, rank=None,
              world_size=None):
    """Global positions (int64, increasing, length S_local) of the tokens this rank holds — use
    them as RoPE position ids under zigzag / striped layouts.

    comm: mpi4py communicator or torch ProcessGroup (None: single process unless rank/world_size are given, which lets
    a single process ask about any rank). mask: only layout="balanced" depends on it — pass the
    mask the attention uses (a burst.Mask such as burst.Mask(causal=True), a benchmark name or
    slices; None = full). pad: S_global need not split as the layout needs; the sequence is
    padded to burst.padded_length(S_global, P, layout) and positions >= S_global are padding.
    Not collective. Raises ValueError when S_global does not split as the layout needs and pad
    is False (contiguous / striped: divisible by P; zigzag: by 2P) or for an unknown layout."""
    r, P = _rank_size(comm, rank, world_size)
    if P == 1:
        S_run = int(_C.padded_length(layout, 1, int(S_global))) if pad else int(S_global)
        return np.arange(S_run, dtype=np.int64)
    return _layout_of(S_global, P, layout, mask, pad)[1][r]


def padded_length(S_global, P, layout="zigzag"):
    """The length a padded layout runs at: the next multiple of P (2P for zigzag) >= S_global.
    Pure."""
    return int(_C.padded_length(layout, int(P), int(S_global)))


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _pad_rows(x, dim, S_run):
    """x with zero rows appended along dim up to S_run (torch: differentiable)."""
    extra = S_run - x.shape[dim]
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    if _is_torch(x):
        import torch
        return torch.cat([x, x.new_zeros(shape)], dim=dim)
    return np.concatenate([x, np.zeros(shape, dtype=x.dtype)], axis=dim)


# Padded layouts this process has cut with shard(pad=True): (layout, P, rank, local length) ->
# (real S_global, padded length). A distributed call that gets shards of such a length without
# S_global is refused (padding_error): it would attend the padding as if it were real tokens.
# Every rank records the same cuts (shard's contract: every rank passes the same global x).
_padded_cuts = {}


def padding_error(layout, P, rank, S_local):
    """A ValueError when shards of S_local tokens on this rank are what shard(pad=True) made for
    this layout and P (and the call gave no S_global), else None. Pure (reads the record)."""
    cut = _padded_cuts.get((layout, int(P), int(rank), int(S_local)))
    if cut is None:
        return None
    S_real, S_run = cut
    return ValueError(f"these {layout} shards look padded by burst.shard(..., pad=True) "
                      f"(S_global={S_real} padded to {S_run} tokens over {P} ranks): pass "
                      f"S_global={S_real} so that the padding is masked (or S_global={S_run} "
                      f"if all {S_run} tokens are real)")


def shard(x, comm, layout="zigzag", dim=1, mask=None, pad=False):
    """This rank's tokens of a global tensor x (sequence along ``dim``: 1 for BSHD, 0 for THD).
    numpy or torch; with torch the result is differentiable (an index_select). pad: a length that
    does not split as the layout needs is padded with zero tokens first (see positions); pass
    ``S_global=x.shape[dim]`` to attn_func / unshard so that the padding is masked / stripped
    (a distributed attn_func call on shards of the padded length without S_global raises
    ValueError on every rank instead of attending the padding).
    Not collective: every rank passes the same global x and keeps its own part."""
    pos = positions(x.shape[dim], comm, layout, mask, pad=pad)
    if pad:
        r, P = _rank_size(comm, None, None)
        S_run = padded_length(x.shape[dim], P, layout)
        if S_run != x.shape[dim] and comm is not None:
            _padded_cuts[(layout, P, r, len(pos))] = (int(x.shape[dim]), S_run)
        x = _pad_rows(x, dim, S_run)
    if _is_torch(x):
        import torch
        return x.index_select(dim, torch.from_numpy(pos))
    return np.take(x, pos, axis=dim)


def unshard(x_local, comm, layout="zigzag", dim=1, mask=None, S_global=None, comm_timeout=None):
    """Inverse of shard: gathers every rank's local tensor into the global one, on every rank.
    S_global: the real length when the shards were padded (shard(..., pad=True)); the padding is
    stripped. Collective over comm (an allgather under burst's watchdog: comm_timeout seconds,
    None = $BURST_COMM_TIMEOUT or 300; a rank that never arrives ends the job with a message
    naming it). numpy in, numpy out; torch in, torch out (detached: no gradient flows through
    unshard)."""
    is_torch = _is_torch(x_local)
    bf16 = is_torch and str(x_local.dtype) == "torch.bfloat16"   # numpy has no bfloat16: move the bits
    if is_torch:
        import torch
        t = x_local.detach().cpu()
        xn = (t.view(torch.int16) if bf16 else t).numpy()
    else:
        xn = np.asarray(x_local)
    if comm is None or _rank_size(comm, None, None)[1] == 1:
        out = np.ascontiguousarray(np.take(xn, np.arange(S_global or xn.shape[dim]), axis=dim))
        return _as_input_kind(out, is_torch, bf16)
    rows = np.ascontiguousarray(np.moveaxis(xn, dim, 0))
    # Under the watchdog (_comm.py): a rank that never arrives ends the job, naming it.
    from . import _comm
    timeout = _comm.comm_timeout({}) if comm_timeout is None else comm_timeout
    shapes = _comm.allgather(comm, (rows.shape, rows.dtype.str), timeout, "unshard: local shapes")
    if any((s[1:], d) != (shapes[0][0][1:], shapes[0][1]) for s, d in shapes):
        raise ValueError(f"unshard: local shapes differ across ranks beyond dim {dim} or dtypes differ: "
                         + ", ".join(f"rank {r}: {s} {d}" for r, (s, d) in enumerate(shapes))
                         + "; every rank passes its shard of the same global tensor")
    counts = [s[0] for s, _ in shapes]
    S_run = int(sum(counts))
    parts = _comm.watched(comm, timeout, "unshard: gather").all_gather_bytes(rows.tobytes(), "unshard: gather")
    gathered = np.frombuffer(b"".join(parts), dtype=rows.dtype).reshape((S_run,) + rows.shape[1:])
    P = _rank_size(comm, None, None)[1]
    pad = S_global is not None and int(S_global) != S_run
    S_real = int(S_global) if S_global is not None else S_run
    S_lay, lay = _layout_of(S_real, P, layout, mask, pad)
    if S_lay != S_run:
        raise ValueError(f"unshard: the ranks hold {S_run} tokens, the {layout} layout of "
                         f"S_global={S_real} over {P} ranks holds {S_lay}")
    out = np.empty_like(gathered)
    out[np.concatenate(lay)] = gathered
    out = np.ascontiguousarray(np.moveaxis(out[:S_real], 0, dim))
    return _as_input_kind(out, is_torch, bf16)


def _as_input_kind(out, is_torch, bf16):
    """numpy stays numpy; torch gets torch back (bfloat16 from the moved int16 bits)."""
    if not is_torch:
        return out
    import torch
    result = torch.from_numpy(out)
    return result.view(torch.bfloat16) if bf16 else result
