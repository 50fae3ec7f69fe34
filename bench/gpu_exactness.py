#!/usr/bin/env python3
"""burst's step kernels and PyTorch's SDPA backends against fp64 on the same bf16 inputs, as JSON lines.

For each case (B 1, S --seq, (H 8, D 64) and (H 4, D 128), full and causal): q, k, v, dout are
seeded uniform [-1, 1) values rounded to bf16 once; the reference is attention in fp64 on those
rounded values (explicit QKᵀ · scale, mask, softmax, · V, on the same device), with its
gradients from fp64 autograd. Each implementation runs on the bf16 tensors with autograd —
burst (burst.attn_func, BSHD, the GPU step kernels through the device seam) and PyTorch's SDPA
with one backend forced at a time (cudnn, flash, efficient; math and flash on the CPU) — and its
record holds the largest absolute difference from the reference of out, dq, dk and dv
(out_err, dq_err, dk_err, dv_err). PyTorch's errors are "PyTorch's own error on the same
inputs" that burst's are held to (scripts/gpu_summary.py). A backend that refuses the case
gives a record with its error.

Usage: bench/gpu_exactness.py [--device cuda|cpu] [--seq 2048] [--seed 0]
       (--device cpu: the same comparison with burst's CPU kernels and PyTorch's CPU backends, at
       --seq 256 by default: the script's own check where there is no GPU)
Without torch, burst's module or (for cuda) a usable GPU: one record saying why, exit 0.
"""
import argparse
import json
import sys

CUDA_BACKENDS = ("cudnn", "flash", "efficient")
CPU_BACKENDS = ("math", "flash")
BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "math": "MATH"}


def skip(device, reason):
    print(json.dumps({"bench": "gpu_exactness", "device": device, "skipped": reason}), flush=True)
    return 0


def reference(torch, q, k, v, dout, causal):
    """fp64 attention of the (rounded) inputs [B, H, S, D] and its gradients."""
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = (q64 @ k64.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ v64
    out.backward(dout.double())
    return out.detach(), q64.grad, k64.grad, v64.grad


def errors(ref, got):
    return {f"{name}_err": (g.double() - r).abs().max().item()
            for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got)}


def run_torch(torch, backend, q, k, v, dout, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(getattr(SDPBackend, BACKENDS[backend])):
        out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        out.backward(dout)
    return out.detach(), qg.grad, kg.grad, vg.grad


def run_burst(burst, q, k, v, dout, causal):
    """burst.attn_func on the BSHD views ([B, H, S, D] transposed, copied contiguous)."""
    qb, kb, vb = (t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v))
    out = burst.attn_func(qb, kb, vb, causal=causal)
    out.backward(dout.transpose(1, 2).contiguous())
    return tuple(t.transpose(1, 2) for t in (out.detach(), qb.grad, kb.grad, vb.grad))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seq", type=int, default=0, help="S (default 2048 on cuda, 256 on cpu)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        return skip(a.device, f"torch not importable: {e}")
    if a.device == "cuda" and not torch.cuda.is_available():
        return skip(a.device, f"torch {torch.__version__} sees no usable CUDA GPU (torch.cuda.is_available() is False)")
    try:
        import burst
    except ImportError as e:
        return skip(a.device, f"burst's Python module not importable: {e}")
    try:
        from torch.nn.attention import sdpa_kernel  # noqa: F401  (torch >= 2.3)
    except ImportError:
        return skip(a.device, f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel")
    dev = torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")
    S = a.seq or (2048 if a.device == "cuda" else 256)
    common = {"bench": "gpu_exactness", "device": a.device, "torch_version": torch.__version__, "dtype": "bf16",
              "batch": 1, "seq": S, "seed": a.seed, "reference": "fp64 explicit softmax on the bf16-rounded inputs"}
    if a.device == "cuda":
        common["gpu_name"] = torch.cuda.get_device_name(dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    for H, D in ((8, 64), (4, 128)):
        q, k, v, dout = (torch.rand(1, H, S, D, device=dev, generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
                         for _ in range(4))
        for causal in (False, True):
            rec = dict(common, heads=H, dim=D, mask="causal" if causal else "full")
            ref = reference(torch, q, k, v, dout, causal)
            impls = [("burst", lambda: run_burst(burst, q, k, v, dout, causal))]
            impls += [(f"torch_{b}", lambda b=b: run_torch(torch, b, q, k, v, dout, causal))
                      for b in (CUDA_BACKENDS if a.device == "cuda" else CPU_BACKENDS)]
            for name, fn in impls:
                try:
                    got = fn()
                    print(json.dumps(dict(rec, impl=name, **errors(ref, got))), flush=True)
                except (RuntimeError, ValueError, NotImplementedError) as e:  # a backend refusing the case
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
                    print(json.dumps(dict(rec, impl=name, error=msg)), flush=True)
            del ref
            if a.device == "cuda":
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
