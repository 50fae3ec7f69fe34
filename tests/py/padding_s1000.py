"""Lengths that do not divide: S = 1000 tokens on the ranks of COMM_WORLD (ctest: 3 ranks, so
contiguous / striped / balanced pad to 1002 and zigzag to 1002), every strategy and layout.
burst.shard(..., pad=True) appends zero tokens, attn_func(S_global=1000) masks them, and
burst.unshard(..., S_global=1000) strips them. Checked against the float64 oracle on the
unpadded sequence: real tokens match, padding gives out = 0, lse = -inf and zero gradients even
under a non-zero upstream gradient, and nothing is NaN."""
import functools
import math

import numpy as np
import pytest
import torch
from mpi4py import MPI

import burst
from conftest import assert_close, errors_vs_oracle, make_inputs, visible_reference

S, B, H, H_KV, D = 1000, 1, 6, 3, 8


@functools.lru_cache(maxsize=None)
def oracle(causal):
    q, k, v, dout = make_inputs(B, S, H, H_KV, D, 7)
    ref, err32 = errors_vs_oracle(q, k, v, dout, visible_reference(S, S, causal=causal),
                                  1 / math.sqrt(D))
    return (q, k, v, dout), ref, err32


@pytest.mark.parametrize("strategy", burst.strategies())
@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped", "balanced"])
@pytest.mark.parametrize("causal", [True, False])
def test_padded_sequence(strategy, layout, causal):
    comm = MPI.COMM_WORLD
    (q, k, v, dout), ref, err32 = oracle(causal)
    mask = burst.Mask(causal=causal)
    pos = burst.positions(S, comm, layout, mask=mask, pad=True)
    real = torch.from_numpy(pos < S)
    local = [burst.shard(t, comm, layout, mask=mask, pad=True).requires_grad_() for t in (q, k, v)]
    ldout = burst.shard(dout, comm, layout, mask=mask, pad=True)
    ldout[:, ~real] = 1.0          # a gradient arriving at padding must not leak anywhere
    try:
        out, lse = burst.attn_func(*local, causal=causal, comm=comm, strategy=strategy,
                                   layout=layout, S_global=S, return_lse=True)
    except NotImplementedError as e:       # raised on every rank alike
        pytest.skip(f"unsupported: {e}")
    out.backward(ldout)
    rp = torch.from_numpy(pos[pos < S])
    full = burst.unshard(out.detach(), comm, layout, mask=mask, S_global=S)
    grads = [t.grad for t in local]
    for name, t in (("out", out.detach()), ("dq", grads[0]), ("dk", grads[1]), ("dv", grads[2])):
        assert not torch.isnan(t).any(), f"{name} has NaN"
        assert torch.count_nonzero(t[:, ~real]) == 0, f"{name} is non-zero on padding"
    assert torch.all(lse[:, :, ~real] == -math.inf) and not torch.isnan(lse).any()
    assert_close("out", out.detach()[:, real], ref["out"][:, rp], err32["out"])
    assert_close("lse", lse[:, :, real], ref["lse"][:, :, rp], err32["lse"])
    for n, g in zip(("dq", "dk", "dv"), grads):
        assert_close(n, g[:, real], ref[n][:, rp], err32[n])
    assert full.shape == (B, S, H, D)
    assert_close("unshard(out)", full, ref["out"], err32["out"])


def test_padding_geometry():
    P = MPI.COMM_WORLD.Get_size()
    for layout, multiple in (("contiguous", P), ("striped", P), ("zigzag", 2 * P)):
        n = burst.padded_length(S, P, layout)
        assert n % multiple == 0 and S <= n < S + multiple
        got = sorted(np.concatenate([burst.positions(S, None, layout, pad=True, rank=r,
                                                     world_size=P) for r in range(P)]))
        assert np.array_equal(got, np.arange(n))
    with pytest.raises(ValueError):
        burst.positions(S + 1, None, "zigzag", rank=0, world_size=2)   # not padded: refused


def test_distattention_pad_matches_attn_func():
    comm = MPI.COMM_WORLD
    (q, k, v, _), _, _ = oracle(True)
    local = [burst.shard(t, comm, "zigzag", pad=True) for t in (q, k, v)]
    plan = burst.DistAttention(comm, B, S, H, H_KV, D, causal=True, pad=True)
    assert np.array_equal(plan.positions, burst.positions(S, comm, "zigzag", pad=True))
    assert torch.equal(plan(*local), burst.attn_func(*local, causal=True, comm=comm, S_global=S))
