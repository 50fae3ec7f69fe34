"""Context-parallel attention over COMM_WORLD (1, 2 or 4 ranks) against the float64 oracle on
the whole sequence: every strategy, layouts, masks, GQA, varlen; forward and backward through
torch autograd and the numpy backward."""
import math

import numpy as np
import pytest
import torch

import burst
from mpi4py import MPI
from conftest import (assert_close, errors_vs_oracle, make_inputs, mask_visible,
                      visible_reference)

S_GLOBAL = 64  # divisible by 2P for P in 1, 2, 4 (zigzag) — small enough for seconds


def run_distributed(comm, mask_kwargs, visible, *, strategy, layout, H=4, H_kv=2, D=8, B=2,
                    seed=0, **extra):
    """Runs forward + backward on this rank's shard; returns a list of (name, got, ref, err32)
    checks, or the library's message when it declares the combination unsupported (on every
    rank)."""
    q, k, v, dout = make_inputs(B, S_GLOBAL, H, H_kv, D, seed)
    ref, err32 = errors_vs_oracle(q, k, v, dout, visible, 1.0 / math.sqrt(D))
    mask = mask_kwargs.get("mask")
    pos = torch.from_numpy(burst.positions(S_GLOBAL, comm, layout, mask=mask))
    local = [burst.shard(t, comm, layout, mask=mask).requires_grad_() for t in (q, k, v)]
    try:
        out, lse = burst.attn_func(*local, comm=comm, strategy=strategy, layout=layout,
                                   return_lse=True, **mask_kwargs, **extra)
    except NotImplementedError as e:
        return str(e)
    out.backward(burst.shard(dout, comm, layout, mask=mask))
    checks = [("out", out.detach(), ref["out"][:, pos], err32["out"]),
              ("lse", lse, ref["lse"][:, :, pos], err32["lse"])]
    for n, leaf in zip(("dq", "dk", "dv"), local):
        checks.append((n, leaf.grad, ref[n][:, pos], err32[n]))
    # The gathered output equals the oracle too (unshard is the inverse of shard).
    full = burst.unshard(out.detach(), comm, layout, mask=mask)
    checks.append(("unshard(out)", full, ref["out"], err32["out"]))
    return checks


def verify(checks):
    if isinstance(checks, str):
        pytest.skip(f"reported unsupported by the library: {checks}")
    for name, got, ref, e32 in checks:
        assert_close(name, got, ref, e32)


@pytest.mark.parametrize("strategy", burst.strategies())
@pytest.mark.parametrize("H_kv", [4, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_every_strategy(comm, strategy, H_kv, causal):
    layout = "zigzag" if strategy in ("burst", "ring") else "contiguous"
    vis = visible_reference(S_GLOBAL, S_GLOBAL, causal=causal)
    verify(run_distributed(comm, {"causal": causal}, vis, strategy=strategy, layout=layout,
                           H_kv=H_kv))


@pytest.mark.parametrize("usp_ring", ["ring", "burst"])
def test_usp_ring(comm, usp_ring):
    """usp with either ring across its Ulysses groups (burst: BurstEngine's hybrid, query-side
    backward); u = 2 where the ranks allow a ring of P/2 groups."""
    u = 2 if comm.Get_size() % 2 == 0 else 1
    vis = visible_reference(S_GLOBAL, S_GLOBAL, causal=True)
    verify(run_distributed(comm, {"causal": True}, vis, strategy="usp", layout="zigzag",
                           ulysses_degree=u, usp_ring=usp_ring))


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped", "balanced"])
@pytest.mark.parametrize("strategy", ["burst", "ring"])
def test_layouts(comm, strategy, layout):
    vis = visible_reference(S_GLOBAL, S_GLOBAL, causal=True)
    # The balanced layout depends on the mask: state it once, for shard and attention alike.
    mask_kwargs = {"mask": burst.Mask(causal=True)} if layout == "balanced" else {"causal": True}
    verify(run_distributed(comm, mask_kwargs, vis, strategy=strategy, layout=layout))


@pytest.mark.parametrize("name", ["causal_document", "sliding_window_causal", "share_question",
                                  "qk_sparse"])
def test_benchmark_masks(comm, name):
    mask = burst.benchmark_mask(name, S_GLOBAL, num_documents=3, block=8, seed=2)
    verify(run_distributed(comm, {"mask": mask}, mask_visible(mask, S_GLOBAL), strategy="burst",
                           layout="zigzag"))


@pytest.mark.parametrize("strategy", burst.strategies())
@pytest.mark.parametrize("name", ["causal_document", "sliding_window_causal"])
def test_general_masks_every_strategy(comm, strategy, name):
    mask = burst.benchmark_mask(name, S_GLOBAL, num_documents=3, seed=3)
    layout = "contiguous" if strategy == "distflash" else "zigzag"   # distflash owns its schedule
    verify(run_distributed(comm, {"mask": mask}, mask_visible(mask, S_GLOBAL), strategy=strategy,
                           layout=layout, H_kv=2))


def test_window_shorthand(comm):
    vis = visible_reference(S_GLOBAL, S_GLOBAL, causal=True, window=(9, -1))
    verify(run_distributed(comm, {"causal": True, "window_size": (9, -1)}, vis,
                           strategy="burst", layout="zigzag"))


def test_numpy_backward(comm):
    q, k, v, dout = make_inputs(1, S_GLOBAL, 2, 2, 8, 4)
    ref, err32 = errors_vs_oracle(q, k, v, dout, visible_reference(S_GLOBAL, S_GLOBAL, True),
                                  1 / math.sqrt(8))
    qn, kn, vn, dn = (burst.shard(t.numpy(), comm, "zigzag") for t in (q, k, v, dout))
    pos = burst.positions(S_GLOBAL, comm, "zigzag")
    out, lse = burst.attn_func(qn, kn, vn, causal=True, comm=comm, return_lse=True)
    dq, dk, dv = burst.attn_backward(dn, qn, kn, vn, out, lse, causal=True, comm=comm)
    assert_close("out", out, ref["out"][:, pos], err32["out"])
    for n, g in zip(("dq", "dk", "dv"), (dq, dk, dv)):
        assert_close(n, g, ref[n][:, pos], err32[n])


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_packed_documents(comm, causal):
    cu = [0, 7, 30, 31, S_GLOBAL]
    H, H_kv, D = 4, 2, 8
    q, k, v, dout = (t[0] for t in make_inputs(1, S_GLOBAL, H, H_kv, D, 12))
    vis = torch.zeros(S_GLOBAL, S_GLOBAL, dtype=torch.bool)
    for a, b in zip(cu, cu[1:]):
        vis[a:b, a:b] = visible_reference(b - a, b - a, causal=causal)
    ref, err32 = errors_vs_oracle(q[None], k[None], v[None], dout[None], vis, 1 / math.sqrt(D))
    pos = torch.from_numpy(burst.positions(S_GLOBAL, comm, "zigzag"))
    local = [burst.shard(t, comm, "zigzag", dim=0).requires_grad_() for t in (q, k, v)]
    cu_t = torch.tensor(cu, dtype=torch.int32)
    out, lse = burst.attn_varlen_func(*local, cu_t, cu_t, 33, 33, causal=causal, comm=comm,
                                      return_lse=True)
    out.backward(burst.shard(dout, comm, "zigzag", dim=0))
    assert lse.shape == (H, len(pos))
    assert_close("out", out.detach(), ref["out"][0][pos], err32["out"])
    assert_close("lse", lse, ref["lse"][0][:, pos], err32["lse"])
    for n, leaf in zip(("dq", "dk", "dv"), local):
        assert_close(n, leaf.grad, ref[n][0][pos], err32[n])


def test_reusable_plan_and_ring_flash_attn_names(comm):
    """burst.DistAttention (plan built once, called repeatedly) and the ring-flash-attention
    drop-in names give the oracle's result; the plan rejects operands of another shape."""
    B, H, H_kv, D = 1, 4, 2, 8
    q, k, v, dout = make_inputs(B, S_GLOBAL, H, H_kv, D, 21)
    ref, err32 = errors_vs_oracle(q, k, v, dout, visible_reference(S_GLOBAL, S_GLOBAL, True),
                                  1 / math.sqrt(D))
    attn = burst.DistAttention(comm, B, S_GLOBAL, H, H_kv, D, causal=True, layout="striped",
                               strategy="ring")
    pos = torch.from_numpy(attn.positions)
    assert np.array_equal(attn.positions, burst.positions(S_GLOBAL, comm, "striped"))
    for _ in range(2):
        local = [burst.shard(t, comm, "striped").requires_grad_() for t in (q, k, v)]
        out = attn(*local)
        out.backward(burst.shard(dout, comm, "striped"))
        assert_close("plan out", out.detach(), ref["out"][:, pos], err32["out"])
        assert_close("plan dk", local[1].grad, ref["dk"][:, pos], err32["dk"])
    assert attn.last_stats()["seconds"] >= 0
    with pytest.raises(ValueError):
        attn(*(burst.shard(t, comm, "striped")[:, :, :2] for t in (q, q, q)))
    for fn, layout in ((burst.ring_flash_attn_func, "contiguous"),
                       (burst.zigzag_ring_flash_attn_func, "zigzag"),
                       (burst.stripe_flash_attn_func, "striped")):
        local = [burst.shard(t, comm, layout) for t in (q, k, v)]
        out, lse, probs = fn(*local, causal=True, return_attn_probs=True, group=comm)
        p = torch.from_numpy(burst.positions(S_GLOBAL, comm, layout))
        assert probs is None
        assert_close(fn.__name__, out, ref["out"][:, p], err32["out"])
        assert_close(fn.__name__ + " lse", lse, ref["lse"][:, :, p], err32["lse"])


def test_partials_dtype_kwarg(comm):
    """partials_dtype="bf16" (burst, ring): the backward's write-ring partials travel in bf16 —
    fewer bytes at P > 1, gradients within P roundings to bf16 (u = 2^-8) of the fp32-partials
    run's (docs/strategies.md § bf16 write-ring partials); other strategies refuse it."""
    P = comm.Get_size()
    q, k, v, dout = make_inputs(1, S_GLOBAL, 4, 4, 8, 9)
    local = [burst.shard(t, comm, "zigzag") for t in (q, k, v, dout)]
    grads, sent = {}, {}
    for partials in ("fp32", "bf16"):
        attn = burst.DistAttention(comm, 1, S_GLOBAL, 4, 4, 8, causal=True, strategy="burst",
                                   backward_side="query", partials_dtype=partials)
        leaves = [t.clone().requires_grad_() for t in local[:3]]
        attn(*leaves).backward(local[3])
        grads[partials] = leaves[0].grad
        sent[partials] = comm.allreduce(attn.last_stats()["bytes_sent"])
    diff = (grads["bf16"] - grads["fp32"]).abs().max().item()
    assert diff <= P * 2.0 ** -8 * grads["fp32"].abs().max().item() * 4, diff
    if P > 1:
        assert sent["bf16"] < sent["fp32"]
        assert comm.allreduce(diff, op=MPI.MAX) > 0, "bf16 partials changed nothing"
    else:
        assert diff == 0 and sent["bf16"] == sent["fp32"] == 0
    with pytest.raises((NotImplementedError, ValueError, RuntimeError), match="burst or ring"):
        burst.DistAttention(comm, 1, S_GLOBAL, 4, 4, 8, strategy="ulysses", layout="contiguous",
                            partials_dtype="bf16")
