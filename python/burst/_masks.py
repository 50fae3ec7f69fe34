"""Mask descriptions accepted by the burst Python API, turned into ``burst._C.Mask``.

A mask is stated on GLOBAL token positions, exactly as in the C++ API (``burst/mask.h``):

* flash_attn shorthands: ``causal=True`` and/or ``window_size=(left, right)`` (-1 = unbounded),
  bottom-right aligned when S_q != S_kv;
* ``mask="<name>"``: one of the 14 Long-Context Attention Benchmark masks (``burst.mask_names()``),
  built over the global sequence with default parameters, or ``burst.benchmark_mask(name,
  S_global, **config)`` for explicit parameters;
* ``mask=[(q_begin, q_end, k_begin, k_end[, kind[, window_left, window_right]]), ...]``: a union of
  slices (the MagiAttention / LongCA-bench AttnSlice IR); kind is "full" (default), "causal",
  "inv_causal" or "bi_causal";
* ``mask=burst.Mask(...)``: a mask object from any of the above.
"""
from . import _C

Mask = _C.Mask


def mask_names():
    """Names of the 14 benchmark masks, in the benchmark's order."""
    return list(_C.mask_names())


def benchmark_mask(name, S_global, **config):
    """One of the benchmark masks over ``S_global`` tokens (config: seed, num_documents, window,
    global_tokens, block, density, prefix_fraction; see BenchmarkMaskConfig in mask.h).
    Raises ValueError for an unknown name or nonsensical config."""
    return Mask.benchmark(name, int(S_global), **config)


def _slice_tuple(s):
    s = tuple(s)
    if len(s) == 4:
        return (*[int(x) for x in s], "full", -1, -1)
    if len(s) == 5:
        return (*[int(x) for x in s[:4]], str(s[4]), -1, -1)
    if len(s) == 7:
        return (*[int(x) for x in s[:4]], str(s[4]), int(s[5]), int(s[6]))
    raise ValueError(f"mask slice {s!r}: expected (q_begin, q_end, k_begin, k_end[, kind"
                     f"[, window_left, window_right]])")


def build_mask(mask, causal, window_size, S_global):
    """The ``_C.Mask`` for a Python mask description; S_global sizes benchmark masks.

    Raises ValueError when an explicit mask is combined with causal / window_size, or when the
    description is malformed."""
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"window_size={window_size!r}: expected a pair (left, right)") from None
    if mask is None:
        return Mask(causal=bool(causal), window_left=left, window_right=right)
    if causal or (left, right) != (-1, -1):
        raise ValueError(f"mask={mask!r} given together with causal={causal} / window_size="
                         f"{window_size}: state the whole mask in one place")
    if isinstance(mask, Mask):
        return mask
    if isinstance(mask, str):
        return Mask.benchmark(mask, int(S_global))
    try:
        slices = [_slice_tuple(s) for s in mask]
    except TypeError:
        raise ValueError(f"mask={mask!r}: expected None, a burst.Mask, a benchmark mask name "
                         f"or a list of slices") from None
    return Mask(slices=slices)


def document_slices(cu_seqlens, causal, window_size):
    """Slices for packed documents given by cu_seqlens (flash_attn varlen semantics over a packed
    global sequence: each document attends within itself)."""
    left, right = (int(w) for w in window_size)
    kind = "causal" if causal else "full"
    cu = [int(c) for c in cu_seqlens]
    return [(cu[i], cu[i + 1], cu[i], cu[i + 1], kind, left, right)
            for i in range(len(cu) - 1) if cu[i + 1] > cu[i]]
