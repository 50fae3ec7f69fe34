"""burst.attn_with_kvcache and burst.DistKVCache against a torch float64 reference: one process
(flash_attn_with_kvcache semantics, in-place cache update) and over COMM_WORLD (each rank holds an
unequal part of every sequence's cache; a prefill through DistAttention's layout, then decode)."""
import math

import numpy as np
import pytest
import torch
from mpi4py import MPI

import burst
from conftest import attention_reference, only_rank0, visible_reference

H, H_KV, D = 4, 2, 8


def reference(q_b, k_b, v_b, causal):
    """(out, lse) of one sequence in float64 and the naive float32 error of the same formula."""
    vis = visible_reference(q_b.shape[1], k_b.shape[1], causal=causal)
    scale = 1.0 / math.sqrt(D)
    ref = attention_reference(q_b.double(), k_b.double(), v_b.double(), vis, scale)
    naive = attention_reference(q_b, k_b, v_b, vis, scale)
    err = max(float((naive[0].double() - ref[0]).abs().max()), 1e-7)
    return ref, err


def check(out, lse, q, k_full, v_full, lens, causal):
    for b, n in enumerate(lens):
        (ref_out, ref_lse), err = reference(q[b:b + 1], k_full[b:b + 1, :n], v_full[b:b + 1, :n], causal)
        assert float((out[b:b + 1].double() - ref_out).abs().max()) <= 8 * err + 1e-6, f"sequence {b}"
        assert float((lse[b:b + 1].double() - ref_lse).abs().max()) <= 8 * err + 1e-6, f"lse {b}"


@only_rank0
@pytest.mark.parametrize("causal", [True, False])
def test_attn_with_kvcache_single_process(causal):
    g = torch.Generator().manual_seed(1)
    B, S_cache, S_new, S_q = 3, 40, 2, 2
    k_cache = torch.randn(B, S_cache, H_KV, D, generator=g)
    v_cache = torch.randn(B, S_cache, H_KV, D, generator=g)
    k, v = torch.randn(B, S_new, H_KV, D, generator=g), torch.randn(B, S_new, H_KV, D, generator=g)
    q = torch.randn(B, S_q, H, D, generator=g)
    seqlens = torch.tensor([5, 30, 0], dtype=torch.int32)
    expect_k = k_cache.clone()
    for b, n in enumerate(seqlens.tolist()):
        expect_k[b, n:n + S_new] = k[b]
    out, lse = burst.attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens, causal=causal,
                                       return_softmax_lse=True)
    assert torch.equal(k_cache, expect_k), "k was not written into k_cache after the rows in use"
    check(out, lse, q, k_cache, v_cache, [n + S_new for n in seqlens.tolist()], causal)


@only_rank0
def test_attn_with_kvcache_rejects_unsupported_and_overflow():
    q = torch.zeros(1, 1, H, D)
    kc = torch.zeros(1, 4, H_KV, D)
    with pytest.raises(NotImplementedError):
        burst.attn_with_kvcache(q, kc, kc.clone(), block_table=torch.zeros(1, 1))
    with pytest.raises(ValueError, match="do not fit"):
        burst.attn_with_kvcache(q, kc, kc.clone(), torch.zeros(1, 2, H_KV, D), torch.zeros(1, 2, H_KV, D),
                                cache_seqlens=3)


def test_attn_with_kvcache_distributed(comm):
    P, rank = comm.Get_size(), comm.Get_rank()
    g = torch.Generator().manual_seed(2)
    B, S_new, S_q = 2, 3, 3
    # Global caches; rank r holds a part of unequal length of each sequence (consecutive parts).
    parts = [[3 + r, 10 + 2 * r] for r in range(P)]
    lens = [sum(p[b] for p in parts) for b in range(B)]
    k_full = torch.randn(B, max(lens) + S_new, H_KV, D, generator=g)
    v_full = torch.randn(B, max(lens) + S_new, H_KV, D, generator=g)
    k, v = torch.randn(B, S_new, H_KV, D, generator=g), torch.randn(B, S_new, H_KV, D, generator=g)
    q = torch.randn(B, S_q, H, D, generator=g)
    for b in range(B):
        k_full[b, lens[b]:lens[b] + S_new] = k[b]
        v_full[b, lens[b]:lens[b] + S_new] = v[b]
    k_local = torch.zeros(B, 16 + S_new, H_KV, D)
    v_local = torch.zeros(B, 16 + S_new, H_KV, D)
    for b in range(B):
        lo = sum(parts[r][b] for r in range(rank))
        n = parts[rank][b]
        k_local[b, :n], v_local[b, :n] = k_full[b, lo:lo + n], v_full[b, lo:lo + n]
    out, lse = burst.attn_with_kvcache(q, k_local, v_local, k, v, cache_seqlens=parts[rank], causal=True,
                                       return_softmax_lse=True, comm=comm)
    check(out, lse, q, k_full, v_full, [n + S_new for n in lens], True)


def test_dist_kv_cache_prefill_then_decode(comm):
    """Prefill through DistAttention (zigzag), then generate: append each token and decode its
    query; equals the float64 causal attention over the whole sequence."""
    g = torch.Generator().manual_seed(3)
    S0, extra = 32, 3
    S = S0 + extra
    q = torch.randn(1, S, H, D, generator=g)
    k = torch.randn(1, S, H_KV, D, generator=g)
    v = torch.randn(1, S, H_KV, D, generator=g)
    (ref_out, _), err = reference(q, k, v, True)
    pos = burst.positions(S0, comm, "zigzag")
    cache = burst.DistKVCache(comm, H, H_KV, D, capacity_per_rank=1024, chunk_tokens=64)
    cache.prefill([0], k[:, pos], v[:, pos], pos, S0)
    assert list(cache.local_positions(0)) == list(pos)
    for t in range(S0, S):
        cache.append([0], k[:, t:t + 1], v[:, t:t + 1])
        out = cache.decode([0], q[:, t:t + 1])
        assert float((out.double() - ref_out[:, t:t + 1]).abs().max()) <= 8 * err + 1e-6, f"token {t}"
    assert cache.length(0) == S
    counts = cache.rank_lengths(0)
    assert max(counts) - min(counts) <= 1
    assert cache.last_stats()["bytes_sent"] == H * (D + 1) * 4 * (comm.Get_size() - 1)


def test_dist_kv_cache_errors_on_every_rank(comm):
    cache = burst.DistKVCache(comm, H, H_KV, D, capacity_per_rank=8, chunk_tokens=64)
    cache.append([0], np.zeros((1, 4, H_KV, D), np.float32), np.zeros((1, 4, H_KV, D), np.float32))
    with pytest.raises(ValueError, match="unknown sequence id 5"):
        cache.decode([5], np.zeros((1, 1, H, D), np.float32))
    with pytest.raises(ValueError, match="q "):
        cache.decode([0], np.zeros((1, 1, H + 1, D), np.float32))
    big = np.zeros((1, 9 * comm.Get_size(), H_KV, D), np.float32)
    with pytest.raises(ValueError, match="overflow"):
        cache.append([0], big, big)
    assert cache.length(0) == 4
