"""Bad input raises the documented Python exception — under comm, on every rank, even when only
one rank's input is bad (no rank may be left waiting in a collective)."""
import numpy as np
import pytest
import torch

import burst
from conftest import make_inputs


def np_inputs(S=16, H=2, H_kv=2, D=8):
    return [t.numpy() for t in make_inputs(1, S, H, H_kv, D, 0)[:3]]


@pytest.mark.parametrize("use_comm", [False, True])
def test_rejected_features(comm, use_comm):
    q, k, v = np_inputs()
    c = comm if use_comm else None
    with pytest.raises(NotImplementedError, match="dropout_p"):
        burst.attn_func(q, k, v, 0.1, comm=c)
    with pytest.raises(NotImplementedError, match="softcap"):
        burst.attn_func(q, k, v, softcap=30.0, comm=c)
    with pytest.raises(NotImplementedError, match="alibi"):
        burst.attn_func(q, k, v, alibi_slopes=np.ones(2, np.float32), comm=c)
    with pytest.raises(NotImplementedError, match="float64"):
        burst.attn_func(q.astype(np.float64), k, v, comm=c)
    with pytest.raises(NotImplementedError, match="float64"):
        burst.attn_func(torch.from_numpy(q).double(), torch.from_numpy(k), torch.from_numpy(v),
                        comm=c)


def test_invalid_arguments_single_process():
    q, k, v = np_inputs()
    with pytest.raises(ValueError, match="4 dims"):
        burst.attn_func(q[0], k, v)
    with pytest.raises(ValueError):                       # H % H_kv != 0 (checked by the library)
        burst.attn_func(np_inputs(H=3)[0], *np_inputs(H_kv=2)[1:])
    with pytest.raises(ValueError):                       # k, v lengths differ
        burst.attn_func(q, k, v[:, :5])
    with pytest.raises(ValueError):                       # D mismatch
        burst.attn_func(q, k[..., :4], v)
    with pytest.raises(ValueError, match="int32|float32"):
        burst.attn_func(q.astype(np.int32), k, v)
    with pytest.raises(ValueError, match="numpy arrays or all CPU torch"):
        burst.attn_func(torch.from_numpy(q), k, v)
    with pytest.raises(ValueError, match="numpy arrays or all CPU torch"):
        burst.attn_func(q.tolist(), k, v)
    with pytest.raises(ValueError, match="state the whole mask"):
        burst.attn_func(q, k, v, causal=True, mask="causal_document")
    with pytest.raises(ValueError):
        burst.attn_func(q, k, v, mask="no_such_mask")
    with pytest.raises(ValueError):
        burst.attn_func(q, k, v, mask=[(0, 99, 0, 16)])   # slice beyond the sequence
    with pytest.raises(ValueError):
        burst.attn_func(q, k, v, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        burst.attn_func(q, k, v, no_such_option=1)
    with pytest.raises(ValueError, match="cu_seqlens"):
        burst.attn_varlen_func(q[0], k[0], v[0], [0, 9, 4, 16], [0, 16], 16, 16)
    with pytest.raises(ValueError, match="max_seqlen"):
        burst.attn_varlen_func(q[0], k[0], v[0], [0, 16], [0, 16], 8, 16)


def test_errors_agree_across_ranks(comm):
    """Only the last rank passes a bad tensor; every rank must raise the same exception type."""
    q, k, v = np_inputs(S=16)
    last = comm.Get_size() - 1
    bad_rank = comm.Get_rank() == last
    cases = [
        ("wrong ndim", lambda: (q[0] if bad_rank else q, k, v), ValueError),
        ("float64", lambda: (q.astype(np.float64) if bad_rank else q, k, v), NotImplementedError),
        ("S_q != S_kv", lambda: (q, k[:, :8] if bad_rank else k, v), ValueError),
        ("list", lambda: (q.tolist() if bad_rank else q, k, v), ValueError),
        ("H % H_kv != 0", lambda: (np_inputs(H=3)[0] if bad_rank else q, k, v), ValueError),
    ]
    if comm.Get_size() > 1:   # valid GQA on the last rank alone, but ranks disagree on H
        cases.append(("H differs", lambda: (np_inputs(H=4)[0] if bad_rank else q, k, v), ValueError))
    for name, make, kind in cases:
        with pytest.raises(kind):
            burst.attn_func(*make(), comm=comm, layout="contiguous")
        comm.Barrier()   # every rank got here: nobody was left inside a collective
    with pytest.raises(ValueError):
        burst.attn_func(q, k, v, comm=comm, strategy="no_such_strategy")
    with pytest.raises(ValueError):
        burst.attn_func(q, k, v, comm=comm, layout="no_such_layout")
    with pytest.raises(ValueError):
        burst.attn_func(q, k, v, comm="COMM_WORLD")
    # Still in step: a good call after all those errors works on every rank.
    out = burst.attn_func(q, k, v, comm=comm, layout="contiguous", causal=True)
    assert out.shape == q.shape and np.isfinite(out).all()


def test_comm_timeout_from_python_and_environment(comm, monkeypatch):
    """The watchdog's timeout reaches DistConfig::comm_timeout_seconds from the comm_timeout
    keyword and from $BURST_COMM_TIMEOUT: an invalid value is refused by the C++ validation on
    every rank; valid ones (also different per rank: not agreed) build a working plan."""
    q, k, v = np_inputs(S=16)
    B, S, H, D = q.shape
    S_global = S * comm.Get_size()
    with pytest.raises(ValueError, match="comm_timeout_seconds=-2"):
        burst.DistAttention(comm, B, S_global, H, H, D, causal=True, comm_timeout=-2)
    monkeypatch.setenv("BURST_COMM_TIMEOUT", "-3")
    with pytest.raises(ValueError, match="comm_timeout_seconds=-3"):
        burst.DistAttention(comm, B, S_global, H, H, D, causal=True)
    monkeypatch.setenv("BURST_COMM_TIMEOUT", str(10 + comm.Get_rank()))
    attn = burst.DistAttention(comm, B, S_global, H, H, D, causal=True)
    assert np.isfinite(attn(q, k, v)).all()
    attn = burst.DistAttention(comm, B, S_global, H, H, D, causal=True, comm_timeout=0)   # no watchdog
    assert np.isfinite(attn(q, k, v)).all()


class _ReportsCuda(torch.Tensor):
    """A CPU tensor that reports device cuda:0: this host's torch has no CUDA (or no driver), so
    the refusal of a CUDA tensor is driven with this stand-in; burst must refuse it before it
    reads a byte. Its module reads "torch..." because burst recognises torch operands by their
    type's module."""

    @property
    def device(self):
        return torch.device("cuda", 0)


_ReportsCuda.__module__ = "torch.burst_test"


def _on_cuda(t):
    if torch.cuda.is_available():      # a GPU host with a CUDA torch: the real thing
        return t.to("cuda:0")
    return t.as_subclass(_ReportsCuda)


def test_tensor_off_the_host_is_refused_by_name(comm):
    """burst computes on the host: a CUDA tensor is refused with the library's error naming it,
    on every rank when only the last rank passes one, also after a cached plan (the device is part
    of the plan key); a device burst does not know (meta) is refused too. Numpy and CPU tensors
    still work afterwards."""
    q, k, v = (torch.from_numpy(x) for x in np_inputs(S=16))
    assert _on_cuda(k).device.type == "cuda"
    with pytest.raises(ValueError, match=r"burst attention: k is on cuda:0, but this call runs on host"):
        burst.attn_func(q, _on_cuda(k), v)
    with pytest.raises(ValueError, match=r"burst attention: v: device 'meta'"):
        burst.attn_func(q, k, torch.empty(v.shape, device="meta"))
    last = comm.Get_rank() == comm.Get_size() - 1
    ok = burst.attn_func(q, k, v, comm=comm, layout="contiguous")   # cached from here on
    with pytest.raises(ValueError, match=r"k is on cuda:0, but this call runs on host"):
        burst.attn_func(q, _on_cuda(k) if last else k, v, comm=comm, layout="contiguous")
    comm.Barrier()   # every rank got here: nobody was left inside a collective
    cache = burst.DistKVCache(None, 2, 2, 8, capacity_per_rank=64)
    with pytest.raises(ValueError, match=r"DistKVCache: v is on cuda:0, but this call runs on host"):
        cache.append([0], k[:, :4], _on_cuda(v[:, :4]))
    assert cache.sequences() == []
    again = burst.attn_func(q, k, v, comm=comm, layout="contiguous")
    assert torch.equal(ok, again)


def test_kv_cache_refuses_non_finite_input_by_name(comm):
    """A NaN in the newest token's V used to make the causal decode rows before it NaN (they do
    not see that key); now append, the fused call's parts and decode's q are refused on every
    rank, naming the element and sequence id, and the cache is unchanged."""
    g = np.random.default_rng(5)
    cache = burst.DistKVCache(comm, 2, 2, 8, capacity_per_rank=64)
    k = g.standard_normal((1, 8, 2, 8)).astype(np.float32)
    cache.append([0], k[:, :4], k[:, :4])
    bad = k[:, 4:].copy()
    bad[0, 3, 1, 2] = np.nan
    with pytest.raises(ValueError, match=r"v_new holds a NaN or infinity at \[0,3,1,2\] \(sequence id 0\)"):
        cache.append([0], k[:, 4:], bad)
    assert cache.length(0) == 4
    q = g.standard_normal((1, 1, 2, 8)).astype(np.float32)
    q[0, 0, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"q holds a NaN or infinity"):
        cache.decode([0], q)
    q[0, 0, 0, 0] = 0.0
    out = cache.decode([0], q)
    assert np.isfinite(out).all()
