"""torch CUDA tensors through the flash_attn-shaped functions (single process: the GPU path of
python/gpu_module.cc, src/attention_device.h), autograd included, without copies of the inputs.

On a GPU host with a CUDA torch and a module built with CUDA, the GPU's results must equal
burst's own CPU results on the same inputs within the dtype's rounding (fp32 1e-4; bf16 / fp16
one rounding of out and of each gradient: 2e-2 absolute on values of size ~1), with out, lse and
the gradients on the inputs' GPU. Elsewhere those tests are skipped with the reason, and the
refusals are checked instead: a module without CUDA refuses a CUDA tensor by name (the host
error), a module with CUDA on a host without a usable GPU says why (NotImplementedError with the
runtime's reason) before reading a byte.
"""
import pytest
import torch

import burst
from burst import _C
from conftest import only_rank0

GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="torch.cuda.is_available() is False: no CUDA GPU "
                               "(or no CUDA torch) on this host")
needs_cuda_build = pytest.mark.skipif(not _C.cuda_built(), reason="this burst module was built "
                                      "without CUDA (BURST_WITH_CUDA)")


class _ReportsCuda(torch.Tensor):
    """A CPU tensor that reports device cuda:0 (this host has no usable GPU): the GPU path must
    refuse it before reading its memory."""

    @property
    def device(self):
        return torch.device("cuda", 0)


_ReportsCuda.__module__ = "torch.burst_test"


def _inputs(B=2, S=96, H=4, H_kv=2, D=64, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(B, S, H, D, generator=g) * 2 - 1
    k = torch.rand(B, S, H_kv, D, generator=g) * 2 - 1
    v = torch.rand(B, S, H_kv, D, generator=g) * 2 - 1
    dout = torch.rand(B, S, H, D, generator=g) * 2 - 1
    return [t.to(dtype) for t in (q, k, v, dout)]


@only_rank0
@pytest.mark.skipif(GPU, reason="a GPU is usable here: the GPU tests below run instead")
def test_cuda_tensor_without_a_usable_gpu_says_why():
    q, k, v, _ = _inputs(S=16)
    qc, kc, vc = (t.as_subclass(_ReportsCuda) for t in (q, k, v))
    if _C.cuda_built():
        with pytest.raises(NotImplementedError, match=r"cuda:0: no usable CUDA GPU here"):
            burst.attn_func(qc, kc, vc, causal=True)
    else:
        with pytest.raises(ValueError, match=r"q is on cuda:0, but this call runs on host"):
            burst.attn_func(qc, kc, vc, causal=True)
    # Mixed devices are refused by name in either build (q decides where the call runs).
    with pytest.raises(ValueError, match=r"k is on cuda:0, but this call runs on host"):
        burst.attn_func(q, kc, v)
    assert torch.isfinite(burst.attn_func(q, k, v, causal=True)).all()   # the host path still runs


def _compare(dtype, causal, window=(-1, -1), varlen=False):
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    q, k, v, dout = _inputs(dtype=dtype, seed=3)
    kw = dict(causal=causal, window_size=window)
    if varlen:
        cu = torch.tensor([0, 30, 31, 96, 192], dtype=torch.int32)
        q, k, v, dout = (t.reshape(-1, t.shape[2], t.shape[3]) for t in (q, k, v, dout))
        kw.update(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=96, max_seqlen_k=96)
        fn = burst.attn_varlen_func
    else:
        fn = burst.attn_func
    host = [t.clone().requires_grad_(True) for t in (q, k, v)]
    gpu = [t.to("cuda:0").requires_grad_(True) for t in (q, k, v)]
    out_h = fn(*host, **kw)
    out_g = fn(*gpu, **{**kw, **({"cu_seqlens_q": cu.cuda(), "cu_seqlens_k": cu.cuda()} if varlen else {})})
    assert out_g.device == gpu[0].device and out_g.dtype == dtype
    assert (out_g.cpu().float() - out_h.float()).abs().max().item() <= tol
    out_h.backward(dout)
    out_g.backward(dout.to("cuda:0"))
    for name, a, b in zip("qkv", host, gpu):
        assert b.grad.device == b.device, name
        err = (b.grad.cpu().float() - a.grad.float()).abs().max().item()
        assert err <= tol, f"d{name}: {err}"


@only_rank0
@needs_gpu
@needs_cuda_build
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_tensors_match_the_host_with_autograd(dtype, causal):
    _compare(dtype, causal)


@only_rank0
@needs_gpu
@needs_cuda_build
def test_cuda_sliding_window_and_varlen():
    _compare(torch.bfloat16, True, window=(16, 0))
    _compare(torch.bfloat16, True, varlen=True)


@only_rank0
@needs_gpu
@needs_cuda_build
def test_cuda_lse_and_no_input_copy():
    """lse comes back on the GPU; contiguous inputs are read in place (the GPU path hands over
    their data_ptr): a second call on the same tensors gives the same bits."""
    q, k, v, _ = (t.to("cuda:0") for t in _inputs(dtype=torch.bfloat16))
    out, lse, _ = burst.attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert lse.device == q.device and lse.dtype == torch.float32 and lse.shape == (2, 4, 96)
    again = burst.attn_func(q, k, v, causal=True)
    assert torch.equal(out, again)


def _rank_gpu(comm):
    """This rank's GPU: its local rank modulo the GPUs (ranks of a one-GPU host share it)."""
    from mpi4py import MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    return torch.device("cuda", local % torch.cuda.device_count())


def _compare_dist(comm, dtype, strategy, layout, call):
    """One distributed call on this rank's shard: `call(q, k, v)` with the shards on the rank's
    GPU against the same call on host tensors (burst's own CPU result), out and the gradients
    within the dtype's rounding (fp32 1e-4; 16-bit 2e-2), everything on the rank's GPU."""
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    gpu = _rank_gpu(comm)
    q, k, v, dout = (burst.shard(t, comm, layout) for t in _inputs(B=1, S=96, dtype=dtype, seed=5))
    host = [t.clone().requires_grad_(True) for t in (q, k, v)]
    dev = [t.to(gpu).requires_grad_(True) for t in (q, k, v)]
    out_h, out_g = call(*host), call(*dev)
    assert out_g.device == gpu and out_g.dtype == dtype, (strategy, layout)
    err = (out_g.cpu().float() - out_h.float()).abs().max().item()
    assert err <= tol, f"{strategy} {layout} out: {err}"
    out_h.backward(dout)
    out_g.backward(dout.to(gpu))
    for name, a, b in zip("qkv", host, dev):
        assert b.grad.device == gpu, name
        err = (b.grad.cpu().float() - a.grad.float()).abs().max().item()
        assert err <= tol, f"{strategy} {layout} d{name}: {err}"


@needs_gpu
@needs_cuda_build
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("strategy,layout", [("burst", "zigzag"), ("ring", "contiguous"),
                                             ("allgather", "zigzag"), ("ulysses", "zigzag"),
                                             ("usp", "zigzag"), ("distflash", "contiguous"),
                                             ("headpar", "zigzag")])
def test_cuda_distributed_matches_the_host_with_autograd(comm, dtype, strategy, layout):
    """attn_func(comm=...) with each rank's shard on its GPU (the plan's passes there, messages
    through pinned host memory), every strategy, causal, GQA (H 4, H_kv 2)."""
    P = comm.Get_size()
    if strategy in ("ulysses", "headpar") and 4 % P:
        pytest.skip(f"{strategy} splits H = 4 query heads over ranks, not over P = {P}")
    _compare_dist(comm, dtype, strategy, layout,
                  lambda q, k, v: burst.attn_func(q, k, v, causal=True, comm=comm, strategy=strategy,
                                                  layout=layout))


@needs_gpu
@needs_cuda_build
def test_cuda_ring_flash_attn_shim(comm):
    """ring-flash-attention's zigzag shim with CUDA tensors: the same as on the host."""
    from burst import ring_flash_attn as rfa
    _compare_dist(comm, torch.bfloat16, "ring", "zigzag",
                  lambda q, k, v: rfa.zigzag_ring_flash_attn_func(q, k, v, causal=True, group=comm))


@pytest.mark.skipif(GPU, reason="a GPU is usable here: the distributed GPU tests run instead")
def test_cuda_distributed_without_a_usable_gpu_says_why_on_every_rank(comm):
    """A distributed call with (what reports as) CUDA tensors: every rank raises the same error
    before any pass — the build's host error, or the runtime's reason in a CUDA build."""
    q, k, v, _ = (burst.shard(t, comm, "zigzag") for t in _inputs(B=1, S=32))
    qc, kc, vc = (t.as_subclass(_ReportsCuda) for t in (q, k, v))
    want = (NotImplementedError, r"no usable CUDA GPU") if _C.cuda_built() else \
        (ValueError, r"q is on cuda:0, but this call runs on host")
    with pytest.raises(want[0], match=want[1]):
        burst.attn_func(qc, kc, vc, causal=True, comm=comm)
