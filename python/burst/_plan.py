"""A reusable context-parallel attention plan for one layer shape (burst::DistAttention).

attn_func(comm=...) keeps its plans in a cache (_cache.py: one lookup allreduce per call); a
model that wants the plan in its own hands, with no lookup, builds it once:

    attn = burst.DistAttention(comm, B, S_global, H, H_kv, D, causal=True)
    out = attn(q_local, k_local, v_local)          # torch: differentiable; numpy: arrays
"""
from ._masks import build_mask
from ._numpy import (backward_numpy, check_comm, check_extra, check_operands, dist_runner,
                     canonical_dtype, dtype_name, forward_numpy)


class DistAttention:
    """Exact attention over a sequence of S_global tokens split across comm's ranks.

    Construction is collective over comm (identical arguments on every rank). Shapes: local
    q [B, S_local, H, D], k, v [B, S_local, H_kv, D] holding the tokens ``positions`` in order;
    mask on global positions (causal / window_size / mask= as in attn_func). dtype: the operands'
    dtype ("fp32", "bf16", "fp16" or a torch / numpy dtype; burst and ring move Q, K, V, dO in
    it; out and gradients come back in it, lse float32). pad: S_global need not split as the
    layout needs; local tensors then hold the padded layout's tokens (burst.shard(..., pad=True);
    padding is masked). extra: attn_func's extras, e.g. partials_dtype="bf16" (burst, ring: the
    backward's write-ring partials in bf16; docs/strategies.md § bf16 write-ring partials). Raises ValueError / NotImplementedError on every rank for invalid or
    unsupported combinations.
    """

    def __init__(self, comm, B, S_global, H, H_kv, D, softmax_scale=None, causal=False,
                 window_size=(-1, -1), mask=None, strategy="burst", layout="zigzag", dtype="fp32",
                 pad=False, **extra):
        check_comm(comm)
        if comm is None:
            raise ValueError("DistAttention needs an mpi4py communicator or a torch ProcessGroup; use "
                             "attn_func(comm=None) "
                             "for one process")
        check_extra(extra)
        self.comm = comm
        self.extra = dict(extra)
        self.dims = (int(B), int(H), int(H_kv), int(D))
        self.mask = build_mask(mask, causal, window_size, int(S_global))
        self.dtype = canonical_dtype(dtype)
        self._runner = dist_runner(comm, self.dims, int(S_global), self.mask, softmax_scale,
                                   strategy, layout, dict(extra), dtype=self.dtype, pad=pad)

    @property
    def positions(self):
        """Global positions (int64) of this rank's tokens, increasing — RoPE position ids."""
        return self._runner.dist.positions

    @property
    def local_length(self):
        return self._runner.dist.local_length

    def last_stats(self):
        """This rank's counters of the last pass: bytes/messages sent, seconds, compute and
        exposed communication seconds, visible pairs, peak buffer bytes, backward side."""
        return self._runner.dist.last_stats()

    def _check(self, q, k, v):
        dims, _ = check_operands(q, k, v, self.comm, False, extra=self.extra)
        if dims != self.dims:
            raise ValueError(f"operands have (B, H, H_kv, D) = {dims}, the plan was built for "
                             f"{self.dims}")
        if dtype_name(q) != self.dtype:
            raise ValueError(f"operands are {q.dtype}, the plan was built for dtype={self.dtype!r}")

    def __call__(self, q, k, v, return_lse=False):
        """Forward on local shards; torch tensors give a differentiable out. Collective."""
        self._check(q, k, v)
        if type(q).__module__.startswith("torch"):
            from ._torch import AttnFunction
            out, lse = AttnFunction.apply(q, k, v, self._runner, False)
        else:
            out, lse = forward_numpy(self._runner, q, k, v, False)
        return (out, lse) if return_lse else out

    def backward(self, dout, q, k, v, out, lse):
        """numpy backward: (dq, dk, dv) from the forward's out and lse. Collective."""
        self._check(q, k, v)
        return backward_numpy(self._runner, dout, q, k, v, out, lse)

