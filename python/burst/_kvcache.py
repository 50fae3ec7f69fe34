"""Long-context inference: a KV cache sharded over MPI ranks, and flash_attn_with_kvcache.

``DistKVCache`` wraps burst::DistKVCache (burst/kv_cache.h): each rank keeps the K/V of its tokens
(after a prefill through any strategy, the rows ``burst.positions`` gave it); ``decode`` computes
partial attention where the K/V live and merges the partial (out, lse) with one small all-gather,
so the bytes per generated token do not depend on the context length (Infinite-LLM's
DistAttention; flash-decoding's split-KV inside a rank).

``attn_with_kvcache`` is flash_attn_with_kvcache with ``comm`` appended: dense caches, optionally
appending new k, v in place, then attention of q over the cached prefix.
"""
import os
import numpy as np

from . import _C
from ._comm import rank_size
from ._device import check_host
from ._numpy import agree, check_dtype

_POLICIES = ("least_loaded", "round_robin")


def _handle(comm, timeout):
    """What _C.DistKVCache is built over: an mpi4py Fortran handle (MPI.COMM_SELF for None) or
    the kept burst._C.Communicator of a torch ProcessGroup (_comm.py)."""
    from ._group import is_group
    if is_group(comm):
        from . import _comm
        return _comm.watched(comm, timeout, "DistKVCache set-up")
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_SELF
    return comm.py2f()


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _array(name, x):
    """float32 numpy array of x: a view for float32 (a CPU torch tensor shares its memory), a
    widened copy for bfloat16 / float16 (exact: every 16-bit value is a float32 value).
    Raises NotImplementedError for float64 and ValueError for other dtypes (check_dtype)."""
    check_dtype(name, x)
    check_host("DistKVCache", **{name: x})
    if _is_torch(x):
        x = x.detach()
        return (x if str(x.dtype) == "torch.float32" else x.float()).numpy()
    x = np.asarray(x)
    return x if x.dtype == np.float32 else x.astype(np.float32)


def _like(q, a):
    """a (float32 numpy) as q's kind and dtype: out comes back in the input dtype, rounded once."""
    if _is_torch(q):
        import torch
        return torch.from_numpy(a).to(q.dtype)
    return a.astype(np.asarray(q).dtype, copy=False)


def _dtype_error(named):
    """ValueError when the named operands (name -> tensor / array / None) do not share one dtype,
    naming the conversion; None when they do. float64 and other dtypes: check_dtype's error."""
    given = [(n, x) for n, x in named if x is not None]
    for n, x in given:
        try:
            check_dtype(n, x)
        except (ValueError, NotImplementedError) as e:
            return e
    dtypes = {n: str(x.dtype).replace("torch.", "") for n, x in given}
    first, want = given[0][0], dtypes[given[0][0]]
    odd = [n for n in dtypes if dtypes[n] != want]
    if not odd:
        return None
    n = odd[0]
    return ValueError(f"attn_with_kvcache: {first} is {want} but {n} is {dtypes[n]}: q, k_cache, "
                      f"v_cache, k and v must share one dtype (as in flash_attn_with_kvcache); "
                      f"convert q to the cache's dtype, e.g. q.to({n}.dtype)"
                      if first == "q" else
                      f"attn_with_kvcache: {first} is {want} but {n} is {dtypes[n]}: convert them "
                      f"to one dtype")


class DistKVCache:
    """A KV cache sharded over the ranks of ``comm`` (mpi4py or a torch ProcessGroup; None = this process alone).

    heads / kv_heads / head_dim: H, H_kv (GQA: H % H_kv == 0), D of the queries and cached K/V.
    capacity_per_rank: tokens one rank may hold over all sequences (overflow raises ValueError on
    every rank). chunk_tokens: storage chunk and flash-decoding split, a multiple of 64.
    policy: "least_loaded" (new tokens go to the rank holding fewest tokens of the sequence) or
    "round_robin" (token t to rank t mod P). Every method except the queries is collective with
    identical arguments; errors are raised identically on every rank and leave the cache unchanged.
    A NaN or infinity in K/V (prefill, append) or q (decode) raises ValueError naming the element:
    a NaN value would reach the causal rows that do not see its key.
    comm_timeout: seconds without communication progress before the watchdog aborts the job
    naming the ranks that never arrived (None: $BURST_COMM_TIMEOUT, else 300; 0 waits forever).
    """

    def __init__(self, comm, heads, kv_heads, head_dim, capacity_per_rank, chunk_tokens=1024,
                 policy="least_loaded", softmax_scale=None, num_threads=0, impl="tiled", *,
                 comm_timeout=None):
        if comm_timeout is None:
            comm_timeout = float(os.environ.get("BURST_COMM_TIMEOUT", 300))
        self._c = _C.DistKVCache(_handle(comm, float(comm_timeout)), heads, kv_heads, head_dim, capacity_per_rank,
                                 chunk_tokens, policy, softmax_scale, num_threads, impl,
                                 float(comm_timeout))
        self.heads = heads

    def prefill(self, seq_ids, k_local, v_local, positions, seqlen_global):
        """Adds sequences from this rank's prefill rows: k_local, v_local [B, S_local, H_kv, D]
        at global ``positions`` [S_local] (increasing; over all ranks a partition of
        [0, seqlen_global))."""
        self._c.prefill(list(seq_ids), _array("k_local", k_local), _array("v_local", v_local),
                        [int(p) for p in positions], int(seqlen_global))

    def append(self, seq_ids, k, v):
        """Appends k, v [B, S_new, H_kv, D] (identical on every rank) to the sequences (created
        empty when new); each token is stored on one rank chosen by the policy."""
        self._c.append(list(seq_ids), _array("k", k), _array("v", v))

    def decode(self, seq_ids, q, causal=True, return_softmax_lse=False):
        """Attention of q [B, S_q, H, D] (identical on every rank) over the cached sequences;
        causal: row i sits at position length - S_q + i (append the new K/V first). Returns out
        in q's kind and dtype (and lse [B, H, S_q] float32 natural log), the same on every rank.
        float32, bfloat16 or float16 inputs; the cache stores float32 (16-bit K/V widened
        exactly) and decode computes in float32."""
        qa = _array("q", q)
        out = np.empty(qa.shape, np.float32)
        lse = np.empty((qa.shape[0], qa.shape[2], qa.shape[1]) if qa.ndim == 4 else (0,), np.float32)
        self._c.decode(list(seq_ids), qa, out, lse, bool(causal))
        return (_like(q, out), _lse_like(q, lse)) if return_softmax_lse else _like(q, out)

    def remove(self, seq_id):
        """Drops a sequence on this rank (no messages; every rank must do the same)."""
        self._c.remove(int(seq_id))

    def sequences(self):
        return list(self._c.sequences())

    def length(self, seq_id):
        return self._c.length(int(seq_id))

    def rank_lengths(self, seq_id):
        return list(self._c.rank_lengths(int(seq_id)))

    def local_positions(self, seq_id):
        return self._c.local_positions(int(seq_id))

    def last_stats(self):
        """seconds, local_seconds, merge_seconds, bytes_sent, kv_bytes_read, chunks of the last
        decode on this rank."""
        return self._c.last_stats()


def _lse_like(q, lse):
    """lse is float32 whatever q's dtype (as flash_attn); torch in, torch out."""
    if _is_torch(q):
        import torch
        return torch.from_numpy(lse)
    return lse


def attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                      cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                      softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                      rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                      return_softmax_lse=False, comm=None, *, num_threads=0, impl="tiled",
                      comm_timeout=None):
    """flash_attn_with_kvcache's arguments in its order, with ``comm`` appended.

    q [B, S_q, H, D]; k_cache, v_cache [B, S_cache, H_kv, D] dense caches whose first
    cache_seqlens[b] rows are in use (cache_seqlens: None = all, an int, or B ints). k, v
    [B, S_new, H_kv, D] (optional): written into the caches IN PLACE after the rows in use (as
    flash_attn does), then attended too. causal: the S_q query rows are the newest tokens
    (bottom-right alignment). Returns out in q's kind and dtype (and lse [B, H, S_q] float32
    with return_softmax_lse). dtypes: float32, bfloat16 or float16 (torch) / float32, float16
    (numpy), one dtype for q, k_cache, v_cache, k, v (ValueError naming the conversion
    otherwise, on every rank); computed in float32 (16-bit values widened exactly, out rounded
    once), so out is float32 attention over the given values rounded to the input dtype.
    With comm (mpi4py or a torch ProcessGroup): k_cache, v_cache and cache_seqlens are THIS RANK's shard of each
    sequence's cache (ranks in order hold consecutive parts of the sequence); q, k, v are the same
    on every rank; each new token is written on the rank holding the fewest tokens of its
    sequence (ties: the lowest rank), which must have room. Collective over comm.
    num_splits is accepted for compatibility (the splits are the cache's 1024-token chunks).
    Unsupported (NotImplementedError): rotary_cos/sin, cache_batch_idx, cache_leftpad,
    block_table, window_size, softcap, alibi_slopes. Cost: copies the rows in use into a
    DistKVCache per call (O(cache)); for token-by-token generation keep a DistKVCache instead.
    """
    for name, val in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                      ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad),
                      ("block_table", block_table), ("alibi_slopes", alibi_slopes)):
        if val is not None:
            raise NotImplementedError(f"attn_with_kvcache: {name} is not supported")
    if tuple(window_size) != (-1, -1) or softcap != 0.0:
        raise NotImplementedError("attn_with_kvcache: window_size and softcap are not supported")
    error = _dtype_error((("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k),
                          ("v", v)))
    lens = []
    if error is None:     # else every rank raises it from the agreement below
        qa, kc, vc = _array("q", q), _array("k_cache", k_cache), _array("v_cache", v_cache)
        kn = None if k is None else _array("k", k)
        vn = None if v is None else _array("v", v)
        B, S_q, H, D = qa.shape
        sl = cache_seqlens.cpu().numpy() if _is_torch(cache_seqlens) else cache_seqlens
        if sl is None:
            lens = [kc.shape[1]] * B
        elif np.ndim(sl) == 0:
            lens = [int(sl)] * B
        else:
            lens = [int(x) for x in np.asarray(sl).reshape(-1)]
        S_new = 0 if kn is None else kn.shape[1]
        if (kn is None) != (vn is None):
            error = ValueError("attn_with_kvcache: k and v must be given together")
        elif len(lens) != B or kc.ndim != 4 or kc.shape[0] != B or vc.shape != kc.shape:
            error = ValueError(f"attn_with_kvcache: k_cache {kc.shape}, v_cache {vc.shape} and "
                               f"cache_seqlens ({len(lens)}) must match q's batch {B}")
        elif any(n < 0 or n + S_new > kc.shape[1] for n in lens):
            error = ValueError(f"attn_with_kvcache: cache_seqlens {lens} + {S_new} new tokens do "
                               f"not fit in S_cache={kc.shape[1]}")
    all_lens = agree(comm, error, lens)   # [rank][b]
    P = len(all_lens)
    rank = 0 if comm is None else rank_size(comm)[0]
    total = sum(sum(r) for r in all_lens) + B * S_new
    cache = DistKVCache(comm, H, kc.shape[2], D, max(1, total), policy="least_loaded",
                        softmax_scale=softmax_scale, num_threads=num_threads, impl=impl,
                        comm_timeout=comm_timeout)
    ids = list(range(B))
    for b in ids:   # ranks in order hold consecutive parts of sequence b
        offset = sum(all_lens[r][b] for r in range(rank))
        n = lens[b]
        cache.prefill([b], kc[b:b + 1, :n], vc[b:b + 1, :n], range(offset, offset + n),
                      sum(all_lens[r][b] for r in range(P)))
    if kn is not None:
        old = [cache.length(b) for b in ids]
        cache.append(ids, kn, vn)
        for b in ids:   # write this rank's new rows into the dense cache, after its rows in use
            new = [int(p) - old[b] for p in cache.local_positions(b) if p >= old[b]]
            # in the caches' own dtype: k, v share it, so the copy is exact
            k_cache[b, lens[b]:lens[b] + len(new)] = k[b, new]
            v_cache[b, lens[b]:lens[b] + len(new)] = v[b, new]
    out, lse = cache.decode(ids, qa, causal=causal, return_softmax_lse=True)   # float32 numpy
    out, lse = _like(q, out), _lse_like(q, lse)
    return (out, lse) if return_softmax_lse else out
