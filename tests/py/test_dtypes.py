"""bfloat16 / float16 inputs: out and gradients in the input dtype, lse float32, against the
float64 oracle on the SAME rounded inputs (single process and over COMM_WORLD). The gradient
oracle is FlashAttention's backward in float64 from the SAME rounded out that burst saved
(delta = rowsum(dout·out) uses it, as every bf16 flash backward does).

Tolerance per element: |got - ref| <= tol32 + u·|ref|, tol32 the fp32 rule of conftest
(8 x the naive fp32 error + 1e-6) and u the unit roundoff of the output dtype (2^-8 bfloat16,
2^-11 float16): burst computes in fp32 and rounds each result once. bfloat16 on a CPU with
AVX512_BF16 runs the GEMMs on bf16 operands (vdpbf16ps, docs/design.md § bf16 arithmetic): P and
dS are rounded to bf16 before their products, which adds at most u·(|P|·|V|) to out, u·(|P|ᵀ·|dO|)
to dV, u·scale·(|dS|ᵀ·|Q|) to dK and u·scale·(|dS|·|K|) to dQ (first order, per element; computed
in float64 by grads_given_out as pb_*). bfloat16 checks add that term (times 1 + u) wherever
they run, so they hold on either path."""
import math

import numpy as np
import pytest
import torch

import burst
from conftest import TOL_FACTOR, TOL_FLOOR, errors_vs_oracle, make_inputs, only_rank0, visible_reference

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def assert_close_lowp(name, got, ref, err32, u, extra=None):
    got = torch.as_tensor(got).double()
    tol = TOL_FACTOR * err32 + TOL_FLOOR + u * ref.abs()
    if extra is not None:   # the P / dS rounding of bf16 arithmetic (module docstring)
        tol = tol + u * (1 + u) * extra
    bad = (got - ref).abs() > tol
    assert not bad.any(), (f"{name}: {int(bad.sum())} elements off, max |burst - fp64| = "
                           f"{float((got - ref).abs().max()):.3g} (u = {u})")


def grads_given_out(q, k, v, dout, out, visible, scale):
    """float64 dq, dk, dv of softmax(scale·QKᵀ)V given the saved out (FlashAttention-2 Alg. 2):
    P = softmax, dV = PᵀdO, dP = dO·Vᵀ, delta = rowsum(dO∘out), dS = P∘(dP − delta),
    dQ = scale·dS·K, dK = scale·dSᵀ·Q; GQA sums dK, dV over each group."""
    q, k, v, dout, out = (t.double() for t in (q, k, v, dout, out))
    r = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(r, dim=2), v.repeat_interleave(r, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    s = s.masked_fill(~visible, float("-inf"))
    empty = ~visible.any(dim=-1)
    p = torch.softmax(s.masked_fill(empty[:, None], 0.0), dim=-1) * (~empty)[:, None]
    dvv = torch.einsum("bhqk,bqhd->bkhd", p, dout)
    dp = torch.einsum("bqhd,bkhd->bhqk", dout, vv)
    delta = (dout * out).sum(-1).transpose(1, 2)[..., None]          # [B, H, S_q, 1]
    ds = p * (dp - delta)
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, kk) * scale
    dkk = torch.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    B, S_kv, H_kv, D = k.shape
    ads = ds.abs()
    pb_dk = torch.einsum("bhqk,bqhd->bkhd", ads, q.abs()) * scale
    pb_dv = torch.einsum("bhqk,bqhd->bkhd", p, dout.abs())
    return {"dq": dq, "dk": dkk.reshape(B, S_kv, H_kv, r, D).sum(3),
            "dv": dvv.reshape(B, S_kv, H_kv, r, D).sum(3),
            "pb_out": torch.einsum("bhqk,bkhd->bqhd", p, vv.abs()),
            "pb_dq": torch.einsum("bhqk,bkhd->bqhd", ads, kk.abs()) * scale,
            "pb_dk": pb_dk.reshape(B, S_kv, H_kv, r, D).sum(3), "pb_dv": pb_dv.reshape(B, S_kv, H_kv, r, D).sum(3)}


def p_term(dtype, ref, name, index=lambda t: t):
    """The P / dS rounding term of `name` for bfloat16 (module docstring), None for float16."""
    return index(ref["pb_" + name]) if dtype == torch.bfloat16 else None


def rounded(dtype, B, S, H, H_kv, D, seed):
    """Inputs rounded to dtype once, and their exact float32 widening (what the oracle reads)."""
    low = [t.to(dtype) for t in make_inputs(B, S, H, H_kv, D, seed)]
    return low, [t.float() for t in low]


@only_rank0
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("H_kv", [4, 2])
def test_local_torch_and_numpy(dtype, H_kv):
    B, S, H, D = 2, 37, 4, 16
    low, wide = rounded(dtype, B, S, H, H_kv, D, seed=3)
    vis = visible_reference(S, S, causal=True)
    ref, err32 = errors_vs_oracle(*wide, vis, 1.0 / math.sqrt(D))
    u = UNIT_ROUNDOFF[dtype]
    leaves = [t.clone().requires_grad_() for t in low[:3]]
    out, lse = burst.attn_func(*leaves, causal=True, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    out.backward(low[3])
    ref.update(grads_given_out(*wide, out.detach(), vis, 1.0 / math.sqrt(D)))
    assert_close_lowp("out", out.detach(), ref["out"], err32["out"], u, p_term(dtype, ref, "out"))
    assert_close_lowp("lse", lse, ref["lse"], err32["lse"], 0.0)
    for n, leaf in zip(("dq", "dk", "dv"), leaves):
        assert leaf.grad.dtype == dtype
        assert_close_lowp(n, leaf.grad, ref[n], err32[n], u, p_term(dtype, ref, n))
    if dtype == torch.float16:   # numpy float16 arrays, same problem
        qn, kn, vn = (t.numpy() for t in low[:3])
        out_n, lse_n = burst.attn_func(qn, kn, vn, causal=True, return_lse=True)
        assert out_n.dtype == np.float16 and lse_n.dtype == np.float32
        assert_close_lowp("numpy out", out_n.astype(np.float64), ref["out"], err32["out"], u)
        grads = burst.attn_backward(low[3].numpy(), qn, kn, vn, out_n, lse_n, causal=True)
        ref.update(grads_given_out(*wide, torch.from_numpy(out_n), vis, 1.0 / math.sqrt(D)))
        for n, g in zip(("dq", "dk", "dv"), grads):
            assert g.dtype == np.float16
            assert_close_lowp("numpy " + n, g.astype(np.float64), ref[n], err32[n], u)


@only_rank0
def test_varlen_bf16():
    T, H, D = 40, 2, 8
    cu = [0, 15, 40]
    low, wide = rounded(torch.bfloat16, 1, T, H, H, D, seed=5)
    leaves = [t[0].clone().requires_grad_() for t in low[:3]]
    out = burst.attn_varlen_func(*leaves, cu, cu, 25, 25, causal=True)
    assert out.dtype == torch.bfloat16
    out.backward(low[3][0])
    for b in range(2):   # each sequence against the oracle on its own rows
        s = slice(cu[b], cu[b + 1])
        n = cu[b + 1] - cu[b]
        vis = visible_reference(n, n, causal=True)
        ref, err32 = errors_vs_oracle(*(t[:, s] for t in wide), vis, 1.0 / math.sqrt(D))
        ref.update(grads_given_out(*(t[:, s] for t in wide), out.detach()[s][None], vis, 1.0 / math.sqrt(D)))
        assert_close_lowp("out", out.detach()[s][None], ref["out"], err32["out"], 2.0 ** -8,
                          p_term(torch.bfloat16, ref, "out"))
        for name, leaf in zip(("dq", "dk", "dv"), leaves):
            assert_close_lowp(name, leaf.grad[s][None], ref[name], err32[name], 2.0 ** -8,
                              p_term(torch.bfloat16, ref, name))


@only_rank0
def test_mixed_dtypes_and_float64_name_the_fix():
    low, _ = rounded(torch.bfloat16, 1, 8, 2, 2, 8, seed=1)
    with pytest.raises(ValueError, match="mixed dtypes"):
        burst.attn_func(low[0], low[1].float(), low[2])
    with pytest.raises(NotImplementedError, match=r"q\.float\(\)"):
        burst.attn_func(low[0].double(), low[1].double(), low[2].double())


@pytest.mark.parametrize("strategy", ["burst", "ring", "allgather", "ulysses", "zigzag_ring_shim"])
def test_distributed_bf16(comm, strategy):
    B, H, H_kv, D, S = 1, 4, 4, 8, 64
    layout = "zigzag" if strategy in ("burst", "ring", "zigzag_ring_shim") else "contiguous"
    low, wide = rounded(torch.bfloat16, B, S, H, H_kv, D, seed=7)
    vis = visible_reference(S, S, causal=True)
    ref, err32 = errors_vs_oracle(*wide, vis, 1.0 / math.sqrt(D))
    pos = torch.from_numpy(burst.positions(S, comm, layout))
    # Shard the widened values (exact) and round back: the shard's bf16 bits are the global ones.
    local = [burst.shard(t, comm, layout).to(torch.bfloat16).requires_grad_() for t in wide[:3]]
    try:
        if strategy == "zigzag_ring_shim":   # ring-flash-attention's signature, out only
            out = burst.zigzag_ring_flash_attn_func(*local, causal=True, group=comm)
            lse = burst.attn_func(*(t.detach() for t in local), comm=comm, strategy="ring", layout=layout,
                                  causal=True, return_lse=True)[1]
        else:
            out, lse = burst.attn_func(*local, comm=comm, strategy=strategy, layout=layout,
                                       causal=True, return_lse=True)
    except NotImplementedError as e:
        pytest.skip(f"reported unsupported by the library: {e}")
    out.backward(burst.shard(wide[3], comm, layout).to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    out_global = burst.unshard(out.detach(), comm, layout)   # the rounded out every rank saved
    ref.update(grads_given_out(*wide, out_global, vis, 1.0 / math.sqrt(D)))
    at_pos = lambda t: t[:, pos]   # noqa: E731
    assert_close_lowp("out", out.detach(), ref["out"][:, pos], err32["out"], 2.0 ** -8,
                      p_term(torch.bfloat16, ref, "out", at_pos))
    assert_close_lowp("lse", lse, ref["lse"][:, :, pos], err32["lse"], 0.0)
    for n, leaf in zip(("dq", "dk", "dv"), local):
        assert leaf.grad.dtype == torch.bfloat16
        assert_close_lowp(n, leaf.grad, ref[n][:, pos], err32[n], 2.0 ** -8, p_term(torch.bfloat16, ref, n, at_pos))
