#!/usr/bin/env python3
"""The anchor beside burst: PyTorch's CPU attention on burst's benchmark shapes, as JSON lines.

Times torch.nn.functional.scaled_dot_product_attention (torch >= 2.0) on q, k, v [B, H, S, D]
for each (dtype, threads, mask, pass), with burst's FLOP formula so GFLOP/s compare directly with
`burst bench kernel`: forward 4·B·H·D·visible_pairs, backward 2.5× that (visible pairs: S² full,
S(S+1)/2 causal). Where torch has no scaled_dot_product_attention (Debian's torch 1.13), an
explicit matmul → softmax → matmul in the same dtype stands in, and every record says so
("impl": "explicit-matmul-softmax-matmul"); it computes all S² scores even for causal, which the
formula does not credit, as burst's formula does not credit burst's skipped tiles either.
Backward: the forward graph is built once (untimed) and out.backward(dout, retain_graph=True) is
timed, gradients cleared between runs (untimed), so the pass timed is the gradient computation
alone, like burst's backward from a saved forward. Median of --repeats after --warmup: wall time
(seconds, gflops) and process CPU time (cpu_seconds, gflops_cpu: flop per CPU-second, what
`burst bench kernel` also reports, for a shared machine).

Usage: bench/torch_sdpa.py [--seq 4096 --heads 8 --dim 64 --batch 1]
                           [--dtypes fp32,bf16] [--threads 1,16] [--masks full,causal]
                           [--passes fwd,bwd] [--repeats 5] [--warmup 1]
       bench/torch_sdpa.py --device cuda [--seq 32768] [--shapes 8x64,32x128] [--dtypes bf16]
                           [--backends cudnn,flash,efficient,math] [--masks full,causal] ...

--device cuda (bench/torch_sdpa_cuda.py): the same records for SDPA on a GPU, one per backend
(torch.nn.attention.sdpa_kernel), timed with CUDA events; defaults S = 32768, (H, D) = (8, 64)
and (32, 128), bf16. Without a usable GPU it prints one record saying why and exits 0.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def attention_fn(torch):
    F = torch.nn.functional
    if hasattr(F, "scaled_dot_product_attention"):
        return "scaled_dot_product_attention", lambda q, k, v, causal: F.scaled_dot_product_attention(
            q, k, v, is_causal=causal)

    def explicit(q, k, v, causal):
        s = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        if causal:
            S = q.shape[-2]
            mask = torch.ones(S, S, dtype=torch.bool).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    return "explicit-matmul-softmax-matmul", explicit


def timed(fn, warmup, repeats, before=None):
    """Wall and process-CPU seconds of each repeat (CPU time: for a shared, loaded machine)."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    times, cpu = [], []
    for _ in range(repeats):
        if before:
            before()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=None, help="H (default 8)")
    ap.add_argument("--seq", type=int, default=None, help="S (default 4096; cuda: 32768)")
    ap.add_argument("--dim", type=int, default=None, help="D (default 64)")
    ap.add_argument("--dtypes", default=None, help="default fp32,bf16; cuda: bf16")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--passes", default="fwd,bwd")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--shapes", default=None, help="cuda: HxD list, e.g. 8x64,32x128 (overrides --heads/--dim)")
    ap.add_argument("--backends", default="cudnn,flash,efficient,math", help="cuda: SDPA backends")
    ap.add_argument("--math-max-gib", type=float, default=24.0,
                    help="cuda: skip the math backend when its fp32 S x S scores would exceed this (GiB)")
    a = ap.parse_args()
    if a.device == "cuda":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_sdpa_cuda
        return torch_sdpa_cuda.run(a)
    a.heads, a.dim = a.heads or 8, a.dim or 64
    a.seq, a.dtypes = a.seq or 4096, a.dtypes or "fp32,bf16"
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"bench": "torch_sdpa", "error": f"torch not importable: {e}"}))
        return 1
    impl, attend = attention_fn(torch)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    B, H, S, D = a.batch, a.heads, a.seq, a.dim
    torch.manual_seed(a.seed)
    for dname in a.dtypes.split(","):
        dt = dtypes[dname]
        base = [torch.rand(B, H, S, D) * 2 - 1 for _ in range(4)]
        for threads in [int(t) for t in a.threads.split(",")]:
            torch.set_num_threads(threads)
            for mask in a.masks.split(","):
                causal = mask == "causal"
                pairs = S * (S + 1) // 2 if causal else S * S
                fwd_flop = 4.0 * B * H * D * pairs
                for pas in a.passes.split(","):
                    q, k, v, dout = (t.to(dt) for t in base)
                    record = {"bench": "torch_sdpa", "impl": impl, "pass": pas, "mask": mask, "batch": B,
                              "heads": H, "seq": S, "dim": D, "dtype": dname, "threads": threads,
                              "layout": "[B,H,S,D] contiguous", "warmup": a.warmup, "repeats": a.repeats,
                              "visible_pairs": pairs,
                              "flop_formula": "4*B*H*D*visible_pairs" + (" * 2.5" if pas == "bwd" else ""),
                              "cpu_model": cpu_model(), "torch_version": torch.__version__,
                              "python": platform.python_version()}
                    try:
                        if pas == "fwd":
                            with torch.no_grad():
                                times, cpu = timed(lambda: attend(q, k, v, causal), a.warmup, a.repeats)
                            flop = fwd_flop
                        else:
                            for t in (q, k, v):
                                t.requires_grad_(True)
                            out = attend(q, k, v, causal)

                            def clear():
                                for t in (q, k, v):
                                    t.grad = None

                            times, cpu = timed(lambda: out.backward(dout, retain_graph=True), a.warmup,
                                               a.repeats, clear)
                            flop = 2.5 * fwd_flop
                    except RuntimeError as e:  # e.g. a dtype this torch has no CPU kernel for
                        record["error"] = str(e).splitlines()[0]
                        print(json.dumps(record), flush=True)
                        continue
                    med = statistics.median(times)
                    record.update({"seconds": med, "seconds_min": min(times), "seconds_max": max(times),
                                   "flop": flop, "gflops": flop / med / 1e9, "gflops_best": flop / min(times) / 1e9,
                                   "cpu_seconds": statistics.median(cpu),
                                   "gflops_cpu": flop / statistics.median(cpu) / 1e9, "loadavg_1m": load_average()})
                    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
