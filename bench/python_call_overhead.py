"""Per-call overhead of the Python distributed API: attn_func(comm=...) with its plan cache
against the same call rebuilding its plan every time (the behaviour before the cache: the
operand allgather, MPI_Comm_split + channel dups, agreements, plan) and against a prebuilt
burst.DistAttention (the floor: the pass alone).

    mpirun -n 2 --bind-to none python3 bench/python_call_overhead.py [--seq 4096] [--reps 15]

Prints one JSON line per mode (rank 0): the configuration, the median over reps of the max over
ranks of one forward call, overhead = median - plan median, GFLOP/s of the forward
(4·D·H·visible pairs, causal: S(S+1)/2 pairs per head) and the pass's bytes sent per rank.
"""
import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import burst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--strategy", default="burst")
    ap.add_argument("--layout", default="zigzag")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    P, S, H, D = comm.Get_size(), a.seq, a.heads, a.dim
    rng = np.random.default_rng(0)
    q, k, v = (burst.shard(rng.standard_normal((1, S, H, D), dtype=np.float32), comm, a.layout)
               for _ in range(3))
    plan = burst.DistAttention(comm, 1, S, H, H, D, causal=True, strategy=a.strategy,
                               layout=a.layout)

    def call(mode):
        if mode == "rebuild_every_call":
            burst.clear_plan_cache()
        if mode == "prebuilt_plan":
            return plan(q, k, v)
        return burst.attn_func(q, k, v, causal=True, comm=comm, strategy=a.strategy,
                               layout=a.layout)

    modes = ("prebuilt_plan", "cached_attn_func", "rebuild_every_call")
    times = {m: [] for m in modes}
    for m in modes:
        call(m)                                        # warm-up (and the cache's first build)
    for _ in range(a.reps):                            # interleaved: the machine drifts alike
        for m in modes:
            comm.Barrier()
            t0 = time.perf_counter()
            call(m)
            times[m].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    flop = 4.0 * D * H * S * (S + 1) / 2
    floor = float(np.median(times["prebuilt_plan"]))
    stats = burst.plan_cache_stats()
    for m in modes:
        med = float(np.median(times[m]))
        if comm.Get_rank() == 0:
            print(json.dumps({"bench": "python_call_overhead", "mode": m, "P": P, "B": 1, "S": S,
                              "H": H, "H_kv": H, "D": D, "mask": "causal", "pass": "fwd",
                              "strategy": a.strategy, "layout": a.layout, "reps": a.reps,
                              "median_s": med, "overhead_s": med - floor,
                              "gflops": flop / med / 1e9,
                              "bytes_sent_per_rank": plan.last_stats()["bytes_sent"],
                              "plans_built_total": stats["plans_built"]}), flush=True)


if __name__ == "__main__":
    main()
