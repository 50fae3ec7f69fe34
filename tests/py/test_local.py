"""Single-process attention (comm=None) against the float64 torch oracle: numpy and torch paths,
forward and backward, flash_attn masks, benchmark masks, slices, GQA, varlen, odd sizes."""
import math

import numpy as np
import pytest
import torch

import burst
from conftest import (assert_close, only_rank0, errors_vs_oracle, make_inputs, mask_visible,
                      visible_reference)

pytestmark = only_rank0

# (name, attn_func kwargs, visibility builder over S) — shorthands use the independent reference.
SHORTHANDS = [
    ("full", {}, lambda S: visible_reference(S, S)),
    ("causal", {"causal": True}, lambda S: visible_reference(S, S, causal=True)),
    ("window", {"window_size": (7, 3)}, lambda S: visible_reference(S, S, window=(7, 3))),
    ("causal_window", {"causal": True, "window_size": (5, -1)},
     lambda S: visible_reference(S, S, causal=True, window=(5, -1))),
]


def check(kwargs, visible, B=2, S=37, H=4, H_kv=2, D=16, seed=0, impl="tiled"):
    q, k, v, dout = make_inputs(B, S, H, H_kv, D, seed)
    scale = kwargs.get("softmax_scale") or 1.0 / math.sqrt(D)
    ref, err32 = errors_vs_oracle(q, k, v, dout, visible, scale)
    # torch autograd path
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = burst.attn_func(*leaves, return_lse=True, impl=impl, **kwargs)
    out.backward(dout)
    assert_close("out", out.detach(), ref["out"], err32["out"])
    assert_close("lse", lse, ref["lse"], err32["lse"])
    for n, leaf in zip(("dq", "dk", "dv"), leaves):
        assert_close(n, leaf.grad, ref[n], err32[n])
    # numpy path, same problem
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    out_n, lse_n = burst.attn_func(qn, kn, vn, return_lse=True, impl=impl, **kwargs)
    assert isinstance(out_n, np.ndarray) and out_n.dtype == np.float32
    assert_close("numpy out", out_n, ref["out"], err32["out"])
    dq, dk, dv = burst.attn_backward(dout.numpy(), qn, kn, vn, out_n, lse_n, impl=impl, **kwargs)
    for n, g in zip(("dq", "dk", "dv"), (dq, dk, dv)):
        assert_close("numpy " + n, g, ref[n], err32[n])


@pytest.mark.parametrize("impl", ["tiled", "reference"])
@pytest.mark.parametrize("name,kwargs,vis", SHORTHANDS, ids=[s[0] for s in SHORTHANDS])
def test_shorthand_masks(name, kwargs, vis, impl):
    check(kwargs, vis(37), impl=impl)


@pytest.mark.parametrize("H_kv", [4, 2, 1])
def test_gqa_and_mqa(H_kv):
    check({"causal": True}, visible_reference(33, 33, causal=True), S=33, H=4, H_kv=H_kv)


@pytest.mark.parametrize("S", [1, 15, 16, 17, 64, 65, 130])
def test_edge_lengths(S):
    check({"causal": True}, visible_reference(S, S, causal=True), B=1, S=S, seed=S)


@pytest.mark.parametrize("name", ["causal_document", "share_question", "sliding_window_causal",
                                  "global_sliding_window", "qk_sparse", "prefix_lm_causal"])
def test_benchmark_masks(name):
    S = 64
    mask = burst.benchmark_mask(name, S, num_documents=3, block=8, seed=1)
    check({"mask": mask}, mask_visible(mask, S), S=S)
    # The name alone builds the same mask with default parameters.
    check({"mask": name}, mask_visible(burst.benchmark_mask(name, S), S), S=S)


def test_slices_with_empty_rows():
    # Rows 20..29 see nothing: out = 0, lse = -inf, zero gradients, never NaN.
    slices = [(0, 20, 0, 20, "causal"), (30, 40, 0, 40), (30, 40, 10, 20, "full", 2, 2)]
    mask = burst._masks.build_mask(slices, False, (-1, -1), 40)
    vis = mask_visible(mask, 40)
    assert not vis[20:30].any()
    check({"mask": slices}, vis, S=40)


def test_softmax_scale_and_noncontiguous_inputs():
    B, S, H, D = 1, 24, 2, 8
    q, k, v, dout = make_inputs(B, S, H, H, D, 3)
    vis = visible_reference(S, S, causal=True)
    ref, err32 = errors_vs_oracle(q, k, v, dout, vis, 0.3)
    # BHSD memory viewed as BSHD (SDPA layout): strided, D contiguous, no copy needed.
    leaves = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
    out = burst.attn_func(*(t.transpose(1, 2) for t in leaves), softmax_scale=0.3, causal=True)
    out.backward(dout)
    assert_close("out", out.detach(), ref["out"], err32["out"])
    assert_close("dq", leaves[0].grad.transpose(1, 2), ref["dq"], err32["dq"])


def test_cross_attention_bottom_right_causal():
    # S_q != S_kv: flash_attn's bottom-right aligned causal mask.
    q, _, _, dout = make_inputs(1, 12, 2, 2, 8, 5)
    _, k, v, _ = make_inputs(1, 20, 2, 2, 8, 6)
    vis = visible_reference(12, 20, causal=True)
    ref, err32 = errors_vs_oracle(q, k, v, dout, vis, 1 / math.sqrt(8))
    out, lse = burst.attn_func(q, k, v, causal=True, return_lse=True)
    assert_close("out", out, ref["out"], err32["out"])
    assert_close("lse", lse, ref["lse"], err32["lse"])


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_per_sequence(causal):
    cu = [0, 5, 5, 21, 40]
    T, H, H_kv, D = cu[-1], 4, 2, 8
    q, k, v, dout = (t[0] for t in make_inputs(1, T, H, H_kv, D, 11))
    vis = torch.zeros(T, T, dtype=torch.bool)
    for a, b in zip(cu, cu[1:]):
        vis[a:b, a:b] = visible_reference(b - a, b - a, causal=causal)
    ref, err32 = errors_vs_oracle(q[None], k[None], v[None], dout[None], vis, 1 / math.sqrt(D))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    cu_t = torch.tensor(cu, dtype=torch.int32)
    out, lse, _ = burst.attn_varlen_func(*leaves, cu_t, cu_t, 19, 19, causal=causal,
                                         return_attn_probs=True)
    assert lse.shape == (H, T)
    out.backward(dout)
    assert_close("out", out.detach(), ref["out"][0], err32["out"])
    assert_close("lse", lse, ref["lse"][0], err32["lse"])
    for n, leaf in zip(("dq", "dk", "dv"), leaves):
        assert_close(n, leaf.grad, ref[n][0], err32[n])
    # numpy twin: attn_varlen_func + attn_varlen_backward
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    out_n, lse_n = burst.attn_varlen_func(qn, kn, vn, cu, cu, 19, 19, causal=causal,
                                          return_lse=True)
    grads = burst.attn_varlen_backward(dout.numpy(), qn, kn, vn, out_n, lse_n, cu, cu,
                                       causal=causal)
    assert_close("numpy out", out_n, ref["out"][0], err32["out"])
    for n, g in zip(("dq", "dk", "dv"), grads):
        assert_close("numpy " + n, g, ref[n][0], err32[n])


def test_deterministic_repeat():
    q, k, v, _ = make_inputs(2, 50, 4, 2, 16, 9)
    a = burst.attn_func(q.numpy(), k.numpy(), v.numpy(), causal=True)
    b = burst.attn_func(q.numpy(), k.numpy(), v.numpy(), causal=True)
    assert np.array_equal(a, b)


def test_memory_policy_calls_keep_results_identical():
    """release_kernel_workspace changes where memory comes from, never the result: the same call
    before and after releasing is bitwise equal."""
    q, k, v, _ = make_inputs(1, 53, 2, 1, 16, 3)
    first = burst.attn_func(q, k, v, causal=True)
    again = burst.attn_func(q, k, v, causal=True)
    burst.release_kernel_workspace()
    after_release = burst.attn_func(q, k, v, causal=True)
    assert torch.equal(first, again) and torch.equal(first, after_release)
