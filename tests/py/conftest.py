"""Shared fixtures and the float64 oracle for the burst Python tests.

Run under MPI (every test is rank-count agnostic; distributed tests use COMM_WORLD):
    mpiexec -n 2 --oversubscribe python3 -m pytest -q tests/py   (PYTHONPATH=<build>/python; python3:
    the interpreter the build was configured with)
Every rank builds the same global tensors from the same seed, runs on its shard and compares its
shard with the oracle, so a wrong token on any rank fails that rank (and mpiexec's exit code).
Collectives are never skipped by one rank alone: assertions come after a test's last collective.
"""
import numpy as np
import pytest
import torch
from mpi4py import MPI

import burst


# Single-process tests compute the same thing on every rank: run them once, on rank 0.
only_rank0 = pytest.mark.skipif(MPI.COMM_WORLD.Get_rank() > 0,
                                reason="single-process test: runs on rank 0 only")


@pytest.fixture
def comm():
    return MPI.COMM_WORLD


def visible_reference(S_q, S_kv, causal=False, window=(-1, -1)):
    """flash_attn's mask written independently of burst: bottom-right aligned diagonal
    diag(i) = i + S_kv - S_q; causal: j <= diag; window (l, r): diag - l <= j <= diag + r."""
    i = torch.arange(S_q)[:, None]
    j = torch.arange(S_kv)[None, :]
    diag = i + S_kv - S_q
    vis = torch.ones(S_q, S_kv, dtype=torch.bool)
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    return vis


def attention_reference(q, k, v, visible, scale):
    """softmax(scale·QKᵀ with the mask)·V by torch autograd in q's dtype. q [B,S_q,H,D],
    k, v [B,S_kv,H_kv,D], visible [S_q,S_kv] bool. Rows with no visible key give out = 0,
    lse = -inf and zero gradients. Returns (out, lse [B,H,S_q])."""
    r = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(r, dim=2), v.repeat_interleave(r, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    s = s.masked_fill(~visible, float("-inf"))
    empty = ~visible.any(dim=-1)                               # [S_q]
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s.masked_fill(empty[:, None], 0.0), dim=-1) * (~empty)[:, None]
    out = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    return out, lse


def errors_vs_oracle(q, k, v, dout, visible, scale):
    """Forward and backward of the oracle in float64 and of the same naive formula in float32.
    Returns (ref64 dict, naive-fp32 error dict): the fp32 error sets each tolerance (STYLE §9)."""
    def run(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out, lse = attention_reference(*leaves, visible, scale)
        out.backward(dout.to(dtype))
        return {"out": out.detach(), "lse": lse.detach(), "dq": leaves[0].grad,
                "dk": leaves[1].grad, "dv": leaves[2].grad}
    ref = run(torch.float64)
    naive = run(torch.float32)
    err32 = {n: _maxdiff(naive[n], ref[n]) for n in ref}
    return ref, err32


def _maxdiff(a, b):
    a = torch.as_tensor(np.asarray(a) if not torch.is_tensor(a) else a).double()
    b = torch.as_tensor(np.asarray(b) if not torch.is_tensor(b) else b).double()
    finite = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), finite):
        return float("inf")
    if not finite.all() and not torch.equal(a[~finite], b[~finite]):
        return float("inf")
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


# The blocked online softmax (and, across ranks, the lse merge) rounds differently from the naive
# formula but not worse in order of magnitude: allow 8x the naive fp32 error plus an absolute
# floor of 1e-6 for outputs whose naive error happens to be ~0 (e.g. all-masked rows).
TOL_FACTOR, TOL_FLOOR = 8.0, 1e-6


def assert_close(name, got, ref, err32):
    err = _maxdiff(got, ref)
    tol = TOL_FACTOR * err32 + TOL_FLOOR
    assert err <= tol, f"{name}: max |burst - fp64| = {err:.3g} > tol {tol:.3g} (naive fp32 {err32:.3g})"


def make_inputs(B, S, H, H_kv, D, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=g)
    k = torch.randn(B, S, H_kv, D, generator=g)
    v = torch.randn(B, S, H_kv, D, generator=g)
    dout = torch.randn(B, S, H, D, generator=g)
    return q, k, v, dout


def mask_visible(mask, S):
    """Dense visibility of a burst.Mask over [0,S)^2 (the library's own mask semantics; checked
    against visible_reference for the flash_attn shorthands in test_masks.py)."""
    return torch.from_numpy(burst._C.visible(mask, S, S))
