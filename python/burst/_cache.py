"""The plan cache behind attn_func(comm=...), the ring-flash-attention shims and attn_backward.

Building a burst::DistAttention is collective and not free: an allgather agreeing on the
operands, MPI_Comm_split plus four MPI_Comm_dups for the ring channels, the fingerprint and
verdict agreements and the pure plan. A model calls attention with the same problem every step,
so the runner is kept, keyed by everything that defines the problem on this rank (the local
operand shapes and dtypes, mask, scale, strategy, layout, extras, varlen offsets, padding,
explicit layout).

Agreement: a rank may only take a cached plan when every rank takes the SAME plan, or a rank
whose call differs (another shape, a new sequence length on one rank only) would enter a pass
its peers never join. So each lookup is one control exchange of the plan id (burst/comm.h:
one small message to every peer, under the watchdog, _comm.py) on a kept dup of the caller's
communicator; on any disagreement every rank takes the full path, whose agreement raises the
same error everywhere. After the first call that is the only collective outside the pass
itself, and no communicator is duplicated. Plan ids are issued in build order, and builds are collective, so equal ids on
all ranks mean the same plan.
"""
import atexit
import hashlib
from collections import OrderedDict

import numpy as np

from ._device import device_name


_MAX_PLANS = 32
_entries = OrderedDict()      # key digest -> (comm, plan id, runner); least recently used first
_next_id = [0]
_stats = {"plans_built": 0, "hits": 0, "misses": 0, "lookups": 0}
_atexit = [False]


def _describe(x):
    """A text that identifies x across processes (Python's hash() of str is salted per process)."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return repr(x)
    if hasattr(x, "fingerprint") and hasattr(x, "describe"):      # burst.Mask
        return f"Mask#{x.fingerprint()}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):              # an array of offsets / positions
        a = np.ascontiguousarray(np.asarray(x.cpu() if hasattr(x, "cpu") else x))
        return f"array{a.shape}{a.dtype}#{hashlib.blake2b(a.tobytes(), digest_size=8).hexdigest()}"
    if isinstance(x, dict):
        return "{" + ",".join(f"{k}:{_describe(x[k])}" for k in sorted(x)) + "}"
    if isinstance(x, (list, tuple)):
        return "(" + ",".join(_describe(i) for i in x) + ")"
    return f"{type(x).__name__}:{x!r}"


def plan_key(q, k, v, **problem):
    """Digest of this rank's problem: operand kinds, shapes, dtypes, devices (a CUDA tensor on one
    rank misses the cache, so the full path's agreement refuses it on every rank) and every
    argument that shapes the plan. None when the operands are not arrays (the full path then
    reports the error)."""
    try:
        ops = [(type(t).__module__.split(".")[0], tuple(t.shape), str(t.dtype), device_name(t))
               for t in (q, k, v)]
    except AttributeError:
        return None
    text = _describe(ops) + _describe(problem)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _same_comm(a, b):
    from ._comm import _same_comm as same
    return same(a, b)


def lookup(comm, key, timeout=300.0):
    """The cached runner for key when every rank of comm has the same cached plan, else None.
    Collective over comm (one control exchange of an int64 under the watchdog, timeout seconds:
    a rank that never arrives ends the job with a message naming it, see _comm.py)."""
    from . import _comm
    _stats["lookups"] += 1
    entry = _entries.get(key) if key is not None else None
    pid = entry[1] if entry is not None and _same_comm(entry[0], comm) else -1
    votes = _comm.watched(comm, timeout, "burst Python: plan cache lookup").exchange(
        [pid], "burst Python: plan cache lookup")
    if pid < 0 or any(v != pid for v in votes):
        _stats["misses"] += 1
        return None
    _entries.move_to_end(key)
    _stats["hits"] += 1
    return entry[2]


def store(comm, key, runner):
    """Keeps a runner built collectively over comm (every rank stores in the same order)."""
    _stats["plans_built"] += 1
    if key is None:
        return
    if not _atexit[0]:          # free the communicator dups before mpi4py finalizes MPI (LIFO)
        atexit.register(clear)
        _atexit[0] = True
    _entries[key] = (comm, _next_id[0], runner)
    _next_id[0] += 1
    while len(_entries) > _MAX_PLANS:
        _entries.popitem(last=False)


def clear():
    """Drops every cached plan (their communicator dups are freed). Call on every rank."""
    _entries.clear()
    from . import _comm
    _comm.clear()


def stats():
    """Counters since import: plans_built (each one MPI_Comm_split plus channel dups and the
    setup agreements), hits, misses, lookups (one control exchange each), cached."""
    return dict(_stats, cached=len(_entries))
