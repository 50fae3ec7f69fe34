"""ring-flash-attention and flash_attn drop-in forms against the float64 oracle: group=None means
COMM_WORLD, the packed forms, the varlen forms with LOCAL cu_seqlens cut the way upstream's
tests cut them (extract_local), and the plan cache (one plan per problem, reused)."""
import math

import numpy as np
import pytest
import torch
from mpi4py import MPI

import burst
import burst.flash_attn_compat as flash_attn
import burst.ring_flash_attn as rfa
from conftest import assert_close, errors_vs_oracle, make_inputs, only_rank0, visible_reference

S_GLOBAL = 48   # divisible by 2P for P in 1, 2, 3, 4
PREFIXES = {"ring_flash_attn": "contiguous", "zigzag_ring_flash_attn": "zigzag",
            "stripe_flash_attn": "striped"}


def upstream_extract_local(x, cu, rank, P, layout):
    """ring-flash-attention's test helper, per layout: each packed sequence cut on its own."""
    parts = []
    for a, b in zip(cu, cu[1:]):
        seq = x[a:b]
        if layout == "contiguous":
            parts.append(seq.chunk(P, dim=0)[rank])
        elif layout == "zigzag":
            c = seq.chunk(2 * P, dim=0)
            parts += [c[rank], c[2 * P - 1 - rank]]
        else:
            parts.append(seq[rank::P])
    return torch.cat(parts, dim=0).contiguous()


@pytest.mark.parametrize("prefix", list(PREFIXES))
def test_group_none_is_world_and_packed_forms(comm, prefix):
    layout = PREFIXES[prefix]
    B, H, D = 1, 4, 8
    q, k, v, dout = make_inputs(B, S_GLOBAL, H, H, D, 31)
    ref, err32 = errors_vs_oracle(q, k, v, dout, visible_reference(S_GLOBAL, S_GLOBAL, True),
                                  1 / math.sqrt(D))
    pos = torch.from_numpy(burst.positions(S_GLOBAL, comm, layout))
    qkv = torch.stack([burst.shard(t, comm, layout) for t in (q, k, v)], dim=2)
    # upstream's call: no group= (it means the whole world)
    plain = getattr(rfa, prefix + "_func")(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    leaf = qkv.clone().requires_grad_()
    out = getattr(rfa, prefix + "_qkvpacked_func")(leaf, causal=True)
    out.backward(burst.shard(dout, comm, layout))
    q_l = qkv[:, :, 0].clone().requires_grad_()
    kv_l = qkv[:, :, 1:].clone().requires_grad_()
    out_kv, lse, probs = getattr(rfa, prefix + "_kvpacked_func")(q_l, kv_l, causal=True,
                                                                 return_attn_probs=True)
    out_kv.backward(burst.shard(dout, comm, layout))
    assert probs is None and lse.shape == (B, H, len(pos))
    for name, got in (("func", plain), ("qkvpacked", out.detach()), ("kvpacked", out_kv.detach())):
        assert_close(f"{prefix} {name} out", got, ref["out"][:, pos], err32["out"])
    assert_close("lse", lse, ref["lse"][:, :, pos], err32["lse"])
    for i, n in enumerate(("dq", "dk", "dv")):
        assert_close(f"qkvpacked {n}", leaf.grad[:, :, i], ref[n][:, pos], err32[n])
    assert_close("kvpacked dq", q_l.grad, ref["dq"][:, pos], err32["dq"])
    assert_close("kvpacked dk", kv_l.grad[:, :, 0], ref["dk"][:, pos], err32["dk"])
    assert_close("kvpacked dv", kv_l.grad[:, :, 1], ref["dv"][:, pos], err32["dv"])


@pytest.mark.parametrize("prefix", list(PREFIXES))
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_local_cu_seqlens(comm, prefix, causal):
    layout, P, rank = PREFIXES[prefix], comm.Get_size(), comm.Get_rank()
    H, D = 2, 8
    cu = [0, 2 * 2 * P, 2 * 5 * P, 2 * 9 * P]     # every sequence divides by 2P, as upstream asks
    T = cu[-1]
    q, k, v, dout = (t[0] for t in make_inputs(1, T, H, H, D, 41))
    vis = torch.zeros(T, T, dtype=torch.bool)
    for a, b in zip(cu, cu[1:]):
        vis[a:b, a:b] = visible_reference(b - a, b - a, causal=causal)
    ref, err32 = errors_vs_oracle(q[None], k[None], v[None], dout[None], vis, 1 / math.sqrt(D))
    local_cu = torch.tensor(cu, dtype=torch.int32) // P
    qkv = upstream_extract_local(torch.stack([q, k, v], dim=1), cu, rank, P, layout)
    leaf = qkv.clone().requires_grad_()
    out, lse, _ = getattr(rfa, prefix + "_varlen_qkvpacked_func")(
        leaf, local_cu, int((local_cu[1:] - local_cu[:-1]).max()), causal=causal,
        return_attn_probs=True)
    out.backward(upstream_extract_local(dout, cu, rank, P, layout))
    q_l = qkv[:, 0].clone().requires_grad_()
    out_kv = getattr(rfa, prefix + "_varlen_kvpacked_func")(q_l, qkv[:, 1:], local_cu, None,
                                                            causal=causal)
    out_v = getattr(rfa, prefix + "_varlen_func")(qkv[:, 0], qkv[:, 1], qkv[:, 2], local_cu, None,
                                                  causal=causal)
    pos = np.concatenate([np.asarray(p) for p in rfa.varlen_positions(local_cu, P, layout)[rank:rank + 1]])
    want = upstream_extract_local(ref["out"][0], cu, rank, P, layout)
    assert np.array_equal(upstream_extract_local(torch.arange(T), cu, rank, P, layout).numpy(), pos)
    for name, got in (("qkvpacked", out.detach()), ("kvpacked", out_kv), ("func", out_v)):
        assert_close(f"{prefix} varlen {name} out", got, want, err32["out"])
    assert_close("varlen lse", lse, ref["lse"][0][:, pos], err32["lse"])
    for i, n in enumerate(("dq", "dk", "dv")):
        assert_close(f"varlen {n}", leaf.grad[:, i],
                     upstream_extract_local(ref[n][0], cu, rank, P, layout), err32[n])


def test_varlen_odd_zigzag_chunk_is_refused_on_every_rank(comm):
    P = comm.Get_size()
    if P == 1:
        pytest.skip("one rank: a zigzag split of one chunk pair is the identity")
    x = torch.zeros(3, 2, 8)
    with pytest.raises(ValueError, match="odd"):
        rfa.zigzag_ring_flash_attn_varlen_func(x, x, x, torch.tensor([0, 3]), 3)


@only_rank0
def test_flash_attn_compat_packed_forms_match_attn_func():
    B, S, H, D = 2, 24, 4, 8
    q, k, v, _ = make_inputs(B, S, H, H, D, 5)
    want = burst.attn_func(q, k, v, causal=True)
    qkv = torch.stack([q, k, v], dim=2)
    assert torch.equal(flash_attn.flash_attn_qkvpacked_func(qkv, causal=True), want)
    assert torch.equal(flash_attn.flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True), want)
    cu = torch.tensor([0, 10, S], dtype=torch.int32)
    want_v = burst.attn_varlen_func(q[0], k[0], v[0], cu, cu, 14, 14, causal=True)
    assert torch.equal(flash_attn.flash_attn_varlen_qkvpacked_func(qkv[0], cu, 14, causal=True),
                       want_v)
    assert torch.equal(flash_attn.flash_attn_varlen_kvpacked_func(q[0], qkv[0, :, 1:], cu, cu, 14,
                                                                  14, causal=True), want_v)
    assert not torch.equal(want_v, burst.attn_varlen_func(q[0], k[0], v[0], cu, cu, 14, 14))


def test_plan_cache_builds_once(comm):
    """After the first call with a problem: no new plan (no MPI_Comm_split / dup, no setup
    agreement), one lookup allreduce per call; another shape builds a second plan."""
    B, H, D = 1, 2, 8
    q, k, v, dout = make_inputs(B, S_GLOBAL, H, H, D, 3)
    local = [burst.shard(t, comm, "zigzag") for t in (q, k, v)]
    burst.clear_plan_cache()
    before = burst.plan_cache_stats()
    outs = [burst.attn_func(*local, causal=True, comm=comm) for _ in range(3)]
    mid = burst.plan_cache_stats()
    other = burst.attn_func(*(t[:, :, :1] for t in local), causal=True, comm=comm)
    after = burst.plan_cache_stats()
    assert mid["plans_built"] - before["plans_built"] == 1
    assert mid["hits"] - before["hits"] == 2 and mid["lookups"] - before["lookups"] == 3
    assert after["plans_built"] - mid["plans_built"] == 1 and after["cached"] == 2
    assert all(torch.equal(o, outs[0]) for o in outs) and other.shape[2] == 1
    # A rank whose call differs from its peers' (another sequence length on rank 0 only) makes
    # every rank take the full path, which raises the same error everywhere.
    if comm.Get_size() > 1:
        mine = [t[:, :-2] if comm.Get_rank() == 0 else t for t in local]
        with pytest.raises(ValueError):
            burst.attn_func(*mine, causal=True, comm=comm)
    burst.clear_plan_cache()
    assert burst.plan_cache_stats()["cached"] == 0
