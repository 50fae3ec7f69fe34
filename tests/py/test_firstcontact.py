"""What a flash_attn / ring-flash-attention user meets first, against the float64 oracle:
the Llama-3 all-gather shims (llama3_flash_attn_prepare_cu_seqlens + llama3_flash_attn_varlen_func,
documents crossing ranks), flash_attn_with_kvcache on bf16 / fp16, and the errors for the other
cu_seqlens convention, a bf16 cache with fp32 q, padded shards without S_global and shards that
do not fit their layout — each raised on every rank."""
import math

import numpy as np
import pytest
import torch
from mpi4py import MPI

import burst
import burst.flash_attn_compat as flash_attn
import burst.ring_flash_attn as rfa
from conftest import assert_close, errors_vs_oracle, make_inputs, only_rank0, visible_reference


def doc_visible(cu, causal, T):
    vis = torch.zeros(T, T, dtype=torch.bool)
    for a, b in zip(cu, cu[1:]):
        vis[a:b, a:b] = visible_reference(b - a, b - a, causal=causal)
    return vis


# ---- llama3_flash_attn_prepare_cu_seqlens: upstream's outputs (the docs/api.md § 5 example) ----

@only_rank0
def test_prepare_cu_seqlens_matches_the_documented_example():
    cu = torch.tensor([0, 6, 16, 24], dtype=torch.int32)
    cu_q, cu_k, max_q, max_k, k_slice = rfa.llama3_flash_attn_prepare_cu_seqlens(
        cu, causal=True, rank=1, world_size=2)
    assert cu_q.tolist() == [0, 4, 12] and cu_k.tolist() == [0, 10, 18]
    assert (max_q, max_k, k_slice) == (8, 10, slice(6, 24)) and cu_q.dtype == torch.int32
    # non-causal: the keys run to the end of the last document touching the rank
    cu_q, cu_k, _, _, k_slice = rfa.llama3_flash_attn_prepare_cu_seqlens(cu, False, 0, 2)
    assert cu_q.tolist() == [0, 6, 12] and cu_k.tolist() == [0, 6, 16] and k_slice == slice(0, 16)
    with pytest.raises(ValueError, match="divide"):
        rfa.llama3_flash_attn_prepare_cu_seqlens(torch.tensor([0, 5]), True, 0, 2)


# ---- llama3_flash_attn_varlen_func: exact at every rank count, documents crossing ranks ----

@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama3_varlen_against_fp64(comm, causal, dtype):
    P, rank = comm.Get_size(), comm.Get_rank()
    H, H_kv, D, L = 4, 2, 8, 24
    T = L * P
    # document boundaries off the rank boundaries: every interior rank boundary cuts a document
    cu = sorted({0, T} | {min(T, 7 + 17 * i) for i in range(T // 17 + 1)})
    q, k, v, dout = (t[0].to(dtype).float() for t in make_inputs(1, T, H, H_kv, D, 77))
    ref, err32 = errors_vs_oracle(q[None], k[None], v[None], dout[None],
                                  doc_visible(cu, causal, T), 1 / math.sqrt(D))
    cu_t = torch.tensor(cu, dtype=torch.int32)
    cu_q, cu_k, max_q, max_k, k_slice = rfa.llama3_flash_attn_prepare_cu_seqlens(
        cu_t, causal=causal, rank=rank, world_size=P)
    mine = slice(rank * L, (rank + 1) * L)
    leaves = [t[mine].to(dtype).clone().requires_grad_() for t in (q, k, v)]
    out, lse, probs = rfa.llama3_flash_attn_varlen_func(
        *leaves, cu_q, cu_k, max_q, max_k, heads_k_stride=1, local_k_slice=k_slice,
        causal=causal, return_attn_probs=True)
    out.backward(dout[mine].to(dtype))
    assert out.dtype == dtype and lse.dtype == torch.float32 and probs is None
    # bf16: the oracle runs on the same rounded inputs; out and the P / dS operands are rounded
    # to bf16 (2^-8 relative), so the bound is 2^-7 of the largest value instead of fp32's
    if dtype == torch.bfloat16:
        for name, got, want in (("out", out, ref["out"][0, mine]), ("dq", leaves[0].grad, ref["dq"][0, mine]),
                                ("dk", leaves[1].grad, ref["dk"][0, mine])):
            err = float((got.double() - want).abs().max() / want.abs().max())
            assert err < 2 ** -7 * 4, f"{name}: {err}"
        return
    assert_close("llama3 out", out, ref["out"][0, mine], err32["out"])
    assert_close("llama3 lse", lse, ref["lse"][0][:, mine], err32["lse"])
    for i, n in enumerate(("dq", "dk", "dv")):
        assert_close(f"llama3 {n}", leaves[i].grad, ref[n][0, mine], err32[n])


def test_llama3_packed_forms_equal_the_plain_form(comm):
    P, rank = comm.Get_size(), comm.Get_rank()
    H, D, L = 2, 8, 16
    cu = torch.tensor([0, 5, L * P], dtype=torch.int32)
    q, k, v, _ = (t[0] for t in make_inputs(1, L * P, H, H, D, 5))
    args = rfa.llama3_flash_attn_prepare_cu_seqlens(cu, True, rank, P)
    mine = slice(rank * L, (rank + 1) * L)
    plain = rfa.llama3_flash_attn_varlen_func(q[mine], k[mine], v[mine], *args[:4], 1, args[4],
                                              causal=True)
    kv = rfa.llama3_flash_attn_varlen_kvpacked_func(q[mine], torch.stack([k[mine], v[mine]], 1),
                                                    *args[:4], 1, args[4], causal=True)
    qkv = rfa.llama3_flash_attn_varlen_qkvpacked_func(torch.stack([q[mine], k[mine], v[mine]], 1),
                                                      *args[:4], 1, args[4], causal=True)
    assert torch.equal(plain, kv) and torch.equal(plain, qkv)


def test_llama3_global_cu_seqlens_is_an_error_on_every_rank(comm):
    P, rank = comm.Get_size(), comm.Get_rank()
    L = 16
    cu = torch.tensor([0, 5, L * P], dtype=torch.int32)
    q = torch.randn(L, 2, 8)
    _, cu_k, max_q, max_k, k_slice = rfa.llama3_flash_attn_prepare_cu_seqlens(cu, True, rank, P)
    if P == 1:
        pytest.skip("at one rank the global and the local offsets are the same")
    with pytest.raises(ValueError, match="llama3_flash_attn_prepare_cu_seqlens"):
        rfa.llama3_flash_attn_varlen_func(q, q, q, cu, cu_k, max_q, max_k, 1, k_slice, causal=True)
    # only rank 0 is wrong: every rank still raises
    bad_slice = slice(k_slice.start + 1, k_slice.stop) if rank == 0 else k_slice
    args = rfa.llama3_flash_attn_prepare_cu_seqlens(cu, True, rank, P)
    with pytest.raises(ValueError, match="rank 0"):
        rfa.llama3_flash_attn_varlen_func(q, q, q, *args[:4], 1, bad_slice, causal=True)


def test_varlen_cu_seqlens_in_the_other_convention(comm):
    """attn_varlen_func takes GLOBAL offsets; the ring shims' LOCAL ones are refused, and the
    other way round, with the convention named, on every rank."""
    P = comm.Get_size()
    if P == 1:
        pytest.skip("at one rank the two conventions coincide")
    T_local = 8
    q = torch.randn(T_local, 2, 8)
    local_cu = torch.tensor([0, T_local], dtype=torch.int32)
    with pytest.raises(ValueError, match="GLOBAL offsets"):
        burst.attn_varlen_func(q, q, q, local_cu, local_cu, T_local, T_local, causal=True,
                               comm=comm, layout="contiguous")
    global_cu = local_cu * P
    with pytest.raises(ValueError, match="LOCAL offsets"):
        rfa.ring_flash_attn_varlen_func(q, q, q, global_cu, T_local * P, causal=True)


# ---- flash_attn_with_kvcache: bf16 / fp16 in, same dtype out ----

@only_rank0
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kvcache_16bit_returns_the_input_dtype(dtype):
    g = torch.Generator().manual_seed(3)
    B, S_cache, S_new, H, H_kv, D = 2, 48, 1, 4, 2, 16
    k_cache = torch.randn(B, S_cache, H_kv, D, generator=g).to(dtype)
    v_cache = torch.randn(B, S_cache, H_kv, D, generator=g).to(dtype)
    k_new = torch.randn(B, S_new, H_kv, D, generator=g).to(dtype)
    v_new = torch.randn(B, S_new, H_kv, D, generator=g).to(dtype)
    q = torch.randn(B, S_new, H, D, generator=g).to(dtype)
    lens = [20, 47]
    out, lse = flash_attn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                                  cache_seqlens=torch.tensor(lens, dtype=torch.int32),
                                                  causal=True, return_softmax_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32 and out.shape == q.shape
    for b, n in enumerate(lens):
        assert torch.equal(k_cache[b, n:n + S_new], k_new[b]), "new k not written in place"
        kk = k_cache[b:b + 1, :n + S_new].double().repeat_interleave(H // H_kv, 2)
        vv = v_cache[b:b + 1, :n + S_new].double().repeat_interleave(H // H_kv, 2)
        p = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q[b:b + 1].double(), kk) / math.sqrt(D), -1)
        ref = torch.einsum("bhqk,bkhd->bqhd", p, vv)
        # computed in float32 over the exact 16-bit inputs, rounded once: half an ulp of dtype
        ulp = 2 ** -8 if dtype == torch.bfloat16 else 2 ** -11
        err = float((out[b:b + 1].double() - ref).abs().max() / ref.abs().max())
        assert err <= ulp, f"{dtype} sequence {b}: {err}"


def test_kvcache_bf16_cache_with_fp32_q_names_the_fix(comm):
    k_cache = torch.zeros(1, 8, 2, 8, dtype=torch.bfloat16)
    q = torch.zeros(1, 1, 2, 8)
    with pytest.raises(ValueError, match=r"q\.to\("):
        burst.attn_with_kvcache(q, k_cache, k_cache.clone(), cache_seqlens=4, comm=comm)
    # one rank alone holds the wrong q: every rank raises
    q_r = q if comm.Get_rank() == 0 else q.to(torch.bfloat16)
    with pytest.raises(ValueError, match="rank 0"):
        burst.attn_with_kvcache(q_r, k_cache, k_cache.clone(), cache_seqlens=4, comm=comm)


# ---- padded shards and shards that do not fit their layout ----

def test_padded_shards_without_S_global_are_an_error(comm):
    """A non-causal mask would attend the padding: the call must name the real length."""
    P = comm.Get_size()
    S = 4 * P + 1                                     # never divides: zigzag pads to 2P
    q, k, v, _ = make_inputs(1, S, 2, 2, 8, 9)
    ql, kl, vl = (burst.shard(t, comm, "zigzag", pad=True) for t in (q, k, v))
    with pytest.raises(ValueError, match=f"S_global={S}"):
        burst.attn_func(ql, kl, vl, causal=False, comm=comm, layout="zigzag")
    out = burst.attn_func(ql, kl, vl, causal=False, comm=comm, layout="zigzag", S_global=S)
    ref, err32 = errors_vs_oracle(q, k, v, torch.zeros(q.shape), visible_reference(S, S), 1 / math.sqrt(8))
    full = burst.unshard(out, comm, "zigzag", S_global=S)
    assert_close("padded non-causal out", full, ref["out"], err32["out"])


def test_shard_that_does_not_fit_the_layout(comm):
    P = comm.Get_size()
    if P == 1:
        pytest.skip("one rank: every length fits")
    q = torch.randn(1, 3, 2, 8)                       # 3 P tokens: zigzag needs a multiple of 2P
    with pytest.raises(ValueError, match="pad=True"):
        burst.attn_func(q, q, q, causal=True, comm=comm, layout="zigzag")
    uneven = torch.randn(1, 4 + (comm.Get_rank() == 0), 2, 8)   # rank 0 holds one token more
    with pytest.raises(ValueError):
        burst.attn_func(uneven, uneven, uneven, causal=True, comm=comm, layout="contiguous")


def test_version():
    assert burst.__version__ == burst._C.__version__ and burst.__version__.count(".") == 2
