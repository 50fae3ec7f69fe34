"""The array-level core of the Python API: validation agreed across ranks, runners, numpy I/O.

Everything here works on numpy arrays of float32 or float16, or bfloat16 bit patterns as uint16
(numpy has no bfloat16; torch tensors reach it as numpy views of the same memory, see
_torch.py). q, k, v share one dtype; out and the gradients come back in it, lse in float32. A *runner* binds one problem (mask, scale, and either single-process
kernel parameters or a distributed plan) and exposes ``forward(q, k, v, out, lse)`` and
``backward(dout, q, k, v, out, lse, dq, dk, dv)`` writing into preallocated arrays, so the torch
autograd Function reuses the same plan for its backward.
"""

import numpy as np

from . import _C
from ._comm import comm_timeout, rank_size
from ._device import check_local
from ._layout import padding_error
from ._masks import build_mask, document_slices

_KNOWN_KW = ("num_threads", "impl", "backward_side", "ulysses_degree", "usp_ring", "ranks_per_node",
             "double_ring", "overlap", "mask_aware", "comm_timeout", "partials_dtype")


def check_unsupported(dropout_p, softcap, alibi_slopes):
    """Rejects flash_attn features burst does not implement (same verdict on every rank: these
    are arguments, identical by contract)."""
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p}: burst computes exact attention without "
                                  f"dropout (apply dropout outside attention)")
    if softcap != 0.0:
        raise NotImplementedError(f"softcap={softcap}: tanh soft-capping is not implemented")
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes: ALiBi biases are not implemented")


def local_error(check, *args):
    """The ValueError / TypeError / NotImplementedError check(*args) raises, else None: a local
    check's verdict to carry into the agreement (make_runner's local_error), so that every rank
    raises it rather than only the rank that found it."""
    try:
        check(*args)
    except (ValueError, TypeError, NotImplementedError) as e:
        return e
    return None


def check_extra(extra):
    unknown = sorted(set(extra) - set(_KNOWN_KW))
    if unknown:
        raise TypeError(f"unexpected keyword arguments {unknown}; known extras: {list(_KNOWN_KW)}")


def agree(comm, local_error, payload, timeout=None, activity="argument agreement"):
    """Collective over comm (when not None): exchanges this rank's validation error (or None) and a
    small payload; every rank raises the first error found (same type, message tagged with the
    rank), so no rank enters a collective its peers skip. Returns all ranks' payloads. Runs under
    the watchdog (_comm.py): timeout seconds (None: $BURST_COMM_TIMEOUT or 300), then a job
    abort naming the ranks that never arrived."""
    if comm is None:
        if local_error is not None:
            raise local_error
        return [payload]
    from . import _comm
    timeout = comm_timeout({}) if timeout is None else timeout
    reports = _comm.allgather(comm, (None if local_error is None else
                                     (type(local_error), str(local_error)), payload),
                              timeout, "burst Python: " + activity)
    for rank, (err, _) in enumerate(reports):
        if err is not None:
            kind, msg = err
            raise kind(f"rank {rank}: {msg}")
    return [p for _, p in reports]


_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def canonical_dtype(dt):
    """burst's name ("fp32", "fp16", "bf16") of a dtype given by name, numpy or torch dtype."""
    name = str(dt).replace("torch.", "")
    if name in _DTYPES.values():
        return name
    if name not in _DTYPES:
        try:
            name = np.dtype(dt).name   # numpy scalar types (np.float16)
        except TypeError:
            pass
    if name not in _DTYPES:
        raise ValueError(f"dtype {dt}: expected float32, bfloat16 or float16 (fp32, bf16, fp16)")
    return _DTYPES[name]


def dtype_name(t):
    """canonical_dtype of an array's / tensor's dtype."""
    return canonical_dtype(t.dtype)


def check_dtype(name, t):
    """float32, float16 or bfloat16 (computed in float32 either way). float64 is
    NotImplementedError naming the conversion; anything else ValueError."""
    dt = str(t.dtype).replace("torch.", "")
    if dt in _DTYPES:
        return
    if dt == "float64":
        raise NotImplementedError(f"{name}: dtype float64 is not computed by burst; convert with "
                                  f"{name}.float() (torch) or {name}.astype(numpy.float32), or use "
                                  f"bfloat16/float16")
    raise ValueError(f"{name}: expected float32, float16 or bfloat16 values, got dtype {dt}")


def _kind(t):
    if isinstance(t, np.ndarray):
        return "numpy"
    if type(t).__module__.startswith("torch") and hasattr(t, "numpy"):
        return "torch"
    return None


def seq_shape(q, k, v, varlen):
    """(S_q, S_kv, H, H_kv, D, B) from local q, k, v; ValueError on wrong ndim or dtype."""
    want = 3 if varlen else 4
    kinds = {_kind(t) for t in (q, k, v)}
    if len(kinds) != 1 or None in kinds:
        raise ValueError("q, k, v must all be numpy arrays or all CPU torch tensors, got "
                         f"{type(q).__name__}, {type(k).__name__}, {type(v).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dtype(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"mixed dtypes q {q.dtype}, k {k.dtype}, v {v.dtype}: q, k and v must share one "
                         f"dtype")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != want:
            layout = "THD [total_tokens, H, D]" if varlen else "BSHD [B, S, H, D]"
            raise ValueError(f"{name}: expected {want} dims ({layout}), got shape {tuple(t.shape)}")
    if varlen:
        return q.shape[0], k.shape[0], q.shape[1], k.shape[1], q.shape[2], 1
    return q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], q.shape[0]


class LocalRunner:
    """Single process: burst::attention_forward / attention_backward."""

    def __init__(self, mask, softmax_scale, deterministic, num_threads=0, impl="tiled",
                 cu_seqlens_q=None, cu_seqlens_k=None):
        self.kw = dict(mask=mask, softmax_scale=softmax_scale, deterministic=deterministic,
                       num_threads=num_threads, impl=impl)
        if cu_seqlens_q is not None:
            self.kw["cu_seqlens_q"] = [int(c) for c in cu_seqlens_q]
            self.kw["cu_seqlens_kv"] = [int(c) for c in cu_seqlens_k]

    def forward(self, q, k, v, out, lse):
        _C.attention_forward(q, k, v, out, lse, **self.kw)

    def backward(self, dout, q, k, v, out, lse, dq, dk, dv):
        _C.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, **self.kw)

    def forward_device(self, q, k, v, out, lse):
        """The GPU path: operands as (data_ptr, shape, strides, dtype, device) (_torch.py)."""
        _C.attention_forward_device(q, k, v, out, lse, **self.kw)

    def backward_device(self, dout, q, k, v, out, lse, dq, dk, dv):
        _C.attention_backward_device(dout, q, k, v, out, lse, dq, dk, dv, **self.kw)


class DistRunner:
    """Context parallel: a burst::DistAttention plan over an mpi4py communicator or a torch
    ProcessGroup. Varlen
    (packed THD) problems run as B = 1 with a document mask; arrays are viewed accordingly."""

    def __init__(self, dist, varlen):
        self.dist = dist
        self.varlen = varlen

    def _v(self, *arrays):
        return [a[None] for a in arrays] if self.varlen else list(arrays)

    def forward(self, q, k, v, out, lse):
        self.dist.forward(*self._v(q, k, v, out, lse))

    def backward(self, dout, q, k, v, out, lse, dq, dk, dv):
        self.dist.backward(*self._v(dout, q, k, v, out, lse, dq, dk, dv))

    def _d(self, *descs):
        """Device descriptors (data_ptr, shape, strides, dtype, device); varlen: a leading B = 1."""
        if not self.varlen:
            return list(descs)
        return [(p, [1] + list(shape), [shape[0] * strides[0]] + list(strides), dt, dev)
                for p, shape, strides, dt, dev in descs]

    def forward_device(self, q, k, v, out, lse):
        """The plan's passes on this rank's GPU (a plan built with device="cuda:N", _torch.py)."""
        self.dist.forward_device(*self._d(q, k, v, out, lse))

    def backward_device(self, dout, q, k, v, out, lse, dq, dk, dv):
        self.dist.backward_device(*self._d(dout, q, k, v, out, lse, dq, dk, dv))


def check_comm(comm):
    from ._comm import check
    check(comm)


def check_operands(q, k, v, comm, varlen, cu_seqlens_q=None, cu_seqlens_k=None, extra=None,
                   local_error=None):
    """Validates the local operands and agrees over comm (one allgather): every rank raises the
    same error if any rank's input is bad (or it brings a local_error found earlier) or ranks
    disagree on (B, H, H_kv, D). Returns ((B, H, H_kv, D), [S_local of every rank]) — one entry
    when comm is None."""
    check_comm(comm)
    error, S_local, dims, kind = None, 0, None, "cpu"
    try:
        if local_error is not None:
            raise local_error
        # On the host, or on the operands' GPU (_device.py; with comm, each rank its own GPU).
        device = check_local("burst attention", q=q, k=k, v=v)
        if device != "cpu":
            _C.check_gpu(device)
            kind = "cuda"
        check_extra(extra or {})
        S_q, S_kv, H, H_kv, D, B = seq_shape(q, k, v, varlen)
        S_local, dims = S_q, (B, H, H_kv, D)
        if comm is not None and S_q != S_kv:
            raise ValueError(f"context parallel attention needs local S_q == S_kv, got S_q={S_q} "
                             f"S_kv={S_kv}")
        if varlen:
            for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
                cu = [int(c) for c in cu]
                if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
                    raise ValueError(f"{name}={cu}: expected int offsets with cu[0] = 0, "
                                     f"non-decreasing, length batch + 1 >= 2")
            if comm is not None and [int(c) for c in cu_seqlens_q] != [int(c) for c in cu_seqlens_k]:
                raise ValueError("context parallel varlen attention is self-attention: "
                                 "cu_seqlens_q must equal cu_seqlens_k")
    except (ValueError, TypeError, NotImplementedError) as e:
        error = e
    reports = agree(comm, error, (S_local, dims, kind), comm_timeout(extra or {}),
                    "attention arguments (shapes, dtypes, devices, cu_seqlens)")
    if any(d != reports[0][2] for _, _, d in reports):
        raise ValueError("ranks disagree on where the operands are: " +
                         ", ".join(f"rank {r}: {d}" for r, (_, _, d) in enumerate(reports)) +
                         "; every rank passes host tensors, or every rank CUDA tensors of its GPU")
    if any(d != reports[0][1] for _, d, _ in reports):
        raise ValueError("ranks disagree on (B, H, H_kv, D): " +
                         ", ".join(f"rank {r}: {d}" for r, (_, d, _) in enumerate(reports)) +
                         "; every rank must pass its shard of the same problem (the call is collective)")
    return reports[0][1], [s for s, _, _ in reports]


def check_fits_layout(sizes, layout, mask):
    """ValueError naming the fix when the ranks' local lengths (agreed, so every rank reaches the
    same verdict) are not the layout's split of their sum: a length the layout cannot split
    (zigzag: 2P | S, the others P | S) or shards cut some other way."""
    P, S = len(sizes), int(sum(sizes))
    fix = (f"cut the global tensor with burst.shard(x, comm, \"{layout}\", pad=True) and pass "
           f"S_global=<the real length>")
    if layout not in ("contiguous", "zigzag", "striped", "balanced"):
        return      # the library names the known layouts
    if int(_C.padded_length(layout, P, S)) != S:
        raise ValueError(f"the ranks hold {sizes} tokens, {S} in all, which the {layout} layout "
                         f"cannot split over {P} ranks: {fix}")
    want = [len(p) for p in _C.make_layout(layout, P, S, mask)]
    if list(sizes) != want:
        raise ValueError(f"the ranks hold {sizes} tokens but the {layout} layout of S={S} over "
                         f"{P} ranks gives them {want}: {fix}")


def dist_runner(comm, dims, S_global, mask, softmax_scale, strategy, layout, extra, varlen=False,
                pad=False, positions=None, dtype="fp32", device="cpu"):
    """Builds the burst::DistAttention plan (collective: MPI_Comm_dup + agreement). pad: S_global
    is the real length and the shards hold the padded layout; positions: an explicit layout
    (one increasing int array per rank); dtype: the storage dtype of q, k, v, dout ("fp32",
    "bf16", "fp16"); burst and ring move them in it; device: "cpu", or this rank's "cuda:N" (the
    passes on that GPU, messages through pinned host memory)."""
    B, H, H_kv, D = dims
    explicit = [] if positions is None else [[int(p) for p in pos] for pos in positions]
    from . import _comm
    timeout = comm_timeout(extra)
    dist = _C.DistAttention(_comm.watched(comm, timeout, "DistAttention set-up"), strategy, layout, B, S_global, H, H_kv, D, mask,
                            dtype=dtype, pad=bool(pad), positions=explicit,
                            softmax_scale=softmax_scale,
                            backward_side=extra.get("backward_side", "auto"),
                            ulysses_degree=int(extra.get("ulysses_degree", 0)),
                            usp_ring=str(extra.get("usp_ring", "ring")),
                            ranks_per_node=int(extra.get("ranks_per_node", 0)),
                            double_ring=bool(extra.get("double_ring", True)),
                            overlap=bool(extra.get("overlap", True)),
                            mask_aware=bool(extra.get("mask_aware", True)),
                            partials_dtype=str(extra.get("partials_dtype", "fp32")),
                            num_threads=int(extra.get("num_threads", 0)),
                            impl=extra.get("impl", "tiled"),
                            comm_timeout=timeout, device=device)
    return DistRunner(dist, varlen)


def make_runner(q, k, v, *, softmax_scale, causal, window_size, deterministic, comm, strategy,
                layout, mask, varlen=False, cu_seqlens_q=None, cu_seqlens_k=None, extra=None,
                S_global=None, positions=None, doc_offsets=None, local_error=None):
    """Validates arguments (agreed over comm) and builds the runner for one attention problem.
    q, k, v are anything with .ndim / .shape (numpy arrays or torch tensors).
    With comm: the runner is cached (_cache.py), so after the first call with a problem the only
    collective is one control exchange of the plan id; the first call is collective (the
    agreement's all-gather + MPI_Comm_split and dups + plan), all under the watchdog (_comm.py). S_global: the real length when the shards carry padding (pad);
    positions: an explicit layout, with doc_offsets the GLOBAL varlen offsets it was cut from."""
    extra = dict(extra or {})
    key = None
    if comm is not None:
        from . import _cache
        check_comm(comm)
        if local_error is None and S_global is None and not varlen and positions is None:
            r, P = rank_size(comm)
            local_error = padding_error(layout, P, r,
                                        q.shape[1] if getattr(q, "ndim", 0) == 4 else -1)
        key = _cache.plan_key(q, k, v, scale=softmax_scale, causal=causal, window=window_size,
                              strategy=strategy, layout=layout, mask=mask, varlen=varlen,
                              cu_q=cu_seqlens_q, cu_k=cu_seqlens_k, extra=extra, S=S_global,
                              pos=positions, docs=doc_offsets)
        runner = _cache.lookup(comm, None if local_error is not None else key, comm_timeout(extra))
        if runner is not None:
            return runner
    dims, sizes = check_operands(q, k, v, comm, varlen, cu_seqlens_q, cu_seqlens_k, extra,
                                 local_error)
    if comm is None:
        m = build_mask(mask, causal, window_size, sizes[0])
        cu = (cu_seqlens_q, cu_seqlens_k) if varlen else (None, None)
        return LocalRunner(m, softmax_scale, deterministic, int(extra.get("num_threads", 0)),
                           extra.get("impl", "tiled"), *cu)
    S_run = int(sum(sizes))
    S_real = S_run if S_global is None else int(S_global)
    if varlen:
        cu = [int(c) for c in (cu_seqlens_q if doc_offsets is None else doc_offsets)]
        if cu[-1] != S_run and doc_offsets is not None:     # the ring shims: LOCAL offsets
            raise ValueError(f"cu_seqlens[-1]={cu[-1] // len(sizes)} but the ranks hold "
                             f"{sizes} tokens: ring-flash-attention's varlen functions take "
                             f"the LOCAL offsets, cu_seqlens_global // world_size (the global "
                             f"ones go to burst.attn_varlen_func(..., comm=); docs/api.md § 5)")
        if cu[-1] != S_run:
            raise ValueError(f"cu_seqlens_q[-1]={cu[-1]} must equal the global token count "
                             f"{S_run} (sum of every rank's local tokens): attn_varlen_func(comm=) "
                             f"takes the GLOBAL offsets of the whole packed sequence, not a "
                             f"rank's local ones (docs/api.md § 5)")
        m = _C.Mask(slices=document_slices(cu, causal, window_size))
    else:
        m = build_mask(mask, causal, window_size, S_real)
        if S_global is None and positions is None:
            check_fits_layout(sizes, layout, m)
    runner = dist_runner(comm, dims, S_real, m, softmax_scale, strategy, layout, extra, varlen,
                         pad=S_global is not None, positions=positions, dtype=dtype_name(q),
                         device=check_local("burst attention", q=q, k=k, v=v))
    _cache.store(comm, key, runner)
    return runner


def lse_shape(q, varlen):
    """lse is [B, H, S] (BSHD) or [H, T] (varlen THD), fp32 natural log."""
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


def as_array(x, name):
    """A numpy view of x (no copy for numpy arrays); D must be contiguous for the kernels, so an
    array whose last stride is not the item size is copied."""
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array or torch tensor, got {type(x).__name__}")
    if x.ndim and x.strides[-1] != x.itemsize:
        x = np.ascontiguousarray(x)
    return x


def forward_numpy(runner, q, k, v, varlen):
    q, k, v = as_array(q, "q"), as_array(k, "k"), as_array(v, "v")
    out = np.empty(q.shape, dtype=q.dtype)
    lse = np.empty(lse_shape(q, varlen), dtype=np.float32)
    runner.forward(q, k, v, out, lse)
    return out, lse


def backward_numpy(runner, dout, q, k, v, out, lse):
    arrays = [as_array(x, n) for x, n in ((dout, "dout"), (q, "q"), (k, "k"), (v, "v"),
                                         (out, "out"), (lse, "lse"))]
    dq = np.empty(arrays[1].shape, dtype=arrays[1].dtype)
    dk = np.empty(arrays[2].shape, dtype=arrays[2].dtype)
    dv = np.empty(arrays[3].shape, dtype=arrays[3].dtype)
    runner.backward(*arrays, dq, dk, dv)
    return dq, dk, dv
