"""Soak: many consecutive distributed calls mixing strategies, shapes and dtypes through the
Python plan cache (burst/_cache.py) and the C++ buffer pools, watching resident memory and
per-call time for growth.

    mpirun -n 2 --bind-to none python3 bench/soak.py [--calls 10000] [--problems 24] [--seed 7]
           [--check-memory 0.05] [--check-time 1.05]

The problems: --problems combinations drawn once (seeded) from the strategies, S_global in
{128, 256, 384, 512}, H = H_kv in {2, 4}, D in {32, 64}, dtype fp32 / fp16 / bf16 (torch),
causal or not; call i runs problem i mod --problems (forward; every 4th call also attn_backward)
so after the first round every call is a plan-cache hit (backward: attn_backward for numpy,
autograd for the torch bf16 problems, dq only). Measured on every rank, reported as
the max over ranks (rank 0 prints JSON lines):
  rss_growth = RSS after the last call / RSS after call 100 - 1        (VmRSS, /proc/self/status)
  time_ratio = wall time of the last 1,000 calls / wall time of calls 100..1,099
(with fewer calls: the last and the first windows of min(1000, (calls-100)/2) calls after 100).
A run line per 1,000 calls (calls done, RSS MiB, seconds of that window) and one summary line.
--check-memory X / --check-time Y: exit 1 when rss_growth > X / time_ratio > Y (for CI smoke
runs: the memory bound only; the time ratio on a shared host is noise).
"""
import argparse
import json
import platform
import sys
import time

import numpy as np
from mpi4py import MPI

import burst


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def make_problems(n, seed, P):
    rng = np.random.default_rng(seed)
    strategies = burst.strategies()
    out = []
    for i in range(n):
        s = strategies[i % len(strategies)]
        p = dict(strategy=s, S=int(rng.choice([128, 256, 384, 512])), H=int(rng.choice([2, 4])),
                 D=int(rng.choice([32, 64])), dtype=str(rng.choice(["fp32", "fp16", "bf16"])),
                 causal=bool(rng.random() < 0.7), layout="zigzag" if i % 3 else "contiguous")
        if s == "distflash":        # its schedule: contiguous layout, causal masks
            p.update(layout="contiguous", causal=True)
        out.append(p)
    return out


def operands(p, comm, rng):
    import torch
    B, S, H, D = 1, p["S"], p["H"], p["D"]
    xs = [rng.standard_normal((B, S, H, D)).astype(np.float32) for _ in range(4)]
    sh = [burst.shard(x, comm, p["layout"]) for x in xs]
    if p["dtype"] == "fp16":
        return [x.astype(np.float16) for x in sh]
    if p["dtype"] == "bf16":
        return [torch.from_numpy(x).to(torch.bfloat16) for x in sh]
    return sh


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--check-memory", type=float, default=None)
    ap.add_argument("--check-time", type=float, default=None)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    problems = make_problems(a.problems, a.seed, P)
    rng = np.random.default_rng(a.seed + 1)
    ops = [operands(p, comm, rng) for p in problems]
    times = np.zeros(a.calls)
    rss_at = {}
    window_start = time.perf_counter()
    for i in range(a.calls):
        p, (q, k, v, dout) = problems[i % len(problems)], ops[i % len(problems)]
        kw = dict(comm=comm, causal=p["causal"], strategy=p["strategy"], layout=p["layout"], num_threads=1)
        backward = i % 4 == 3
        t0 = time.perf_counter()
        if hasattr(q, "requires_grad"):            # torch (bf16): autograd runs the backward
            q.requires_grad_(backward)
            out = burst.attn_func(q, k, v, **kw)
            if backward:
                out.backward(dout)
        else:
            out, lse = burst.attn_func(q, k, v, return_lse=True, **kw)
            if backward:
                burst.attn_backward(dout, q, k, v, out, lse, **kw)
        times[i] = time.perf_counter() - t0
        if i + 1 in (100, a.calls) or (i + 1) % 1000 == 0:
            rss_at[i + 1] = rss_bytes()
        if (i + 1) % 1000 == 0:
            now = time.perf_counter()
            line = dict(kind="soak_progress", calls=i + 1, rss_mib=round(comm.allreduce(rss_at[i + 1], MPI.MAX) / 2**20, 1),
                        window_seconds=round(comm.allreduce(now - window_start, MPI.MAX), 3))
            window_start = now
            if rank == 0:
                print(json.dumps(line), flush=True)
    w = min(1000, max(1, (a.calls - 100) // 2))
    first = float(times[100:100 + w].sum())
    last = float(times[a.calls - w:].sum())
    growth = rss_at[a.calls] / rss_at[min(100, a.calls)] - 1
    stats = burst.plan_cache_stats()
    summary = dict(kind="soak", P=P, calls=a.calls, problems=a.problems, seed=a.seed, window=w,
                   rss_after_100_mib=round(comm.allreduce(rss_at[min(100, a.calls)], MPI.MAX) / 2**20, 1),
                   rss_end_mib=round(comm.allreduce(rss_at[a.calls], MPI.MAX) / 2**20, 1),
                   rss_growth=round(comm.allreduce(growth, MPI.MAX), 4),
                   first_window_seconds=round(comm.allreduce(first, MPI.MAX), 3),
                   last_window_seconds=round(comm.allreduce(last, MPI.MAX), 3),
                   time_ratio=round(comm.allreduce(last / first, MPI.MAX), 4),
                   median_call_ms=round(comm.allreduce(float(np.median(times)) * 1e3, MPI.MAX), 3),
                   plans_built=stats["plans_built"], cache_hits=stats["hits"], cpu=cpu_name(),
                   problem_set=problems)
    if rank == 0:
        print(json.dumps(summary), flush=True)
    bad = (a.check_memory is not None and summary["rss_growth"] > a.check_memory) or \
          (a.check_time is not None and summary["time_ratio"] > a.check_time)
    burst.clear_plan_cache()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
