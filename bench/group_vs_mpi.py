"""Time of burst attention over a torch.distributed gloo group vs over mpi4py, in one job.

    mpirun -n P --bind-to none python3 bench/group_vs_mpi.py [--seq 16384] [--heads 2] [--dim 64]
           [--strategy burst] [--reps 3]

Every process joins MPI and a gloo group (torch's env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR
127.0.0.1, MASTER_PORT from rank 0), builds one burst.DistAttention per path (the same problem:
B 1, S_global --seq, H = H_kv --heads, D --dim, causal, zigzag, fp32 torch) and runs forward +
backward (autograd) alternately over MPI and over the group: one warm-up each, then --reps timed
pairs. A call's time is the max over ranks (a barrier before it); rank 0 prints one JSON line per
path (median, all times) and a summary line with ratio = median(gloo) / median(mpi) and whether
the outputs and gradients of the two paths were bit-identical.
"""
import argparse
import json
import os
import platform
import socket
import statistics
import time

from mpi4py import MPI

world = MPI.COMM_WORLD


def join_gloo():
    port = None
    if world.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ.update(RANK=str(world.rank), WORLD_SIZE=str(world.size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(world.bcast(port, root=0)))
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://")
    return dist.group.WORLD


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--strategy", default="burst")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import torch
    import burst
    gloo = join_gloo()
    g = torch.Generator().manual_seed(0)
    B, S, H, D = 1, args.seq, args.heads, args.dim
    q, k, v, dout = (torch.randn(B, S, H, D, generator=g) for _ in range(4))
    plans = {name: burst.DistAttention(c, B, S, H, H, D, causal=True, strategy=args.strategy)
             for name, c in (("mpi", world), ("gloo", gloo))}
    pos = torch.from_numpy(plans["mpi"].positions)
    shards = [t.index_select(1, pos) for t in (q, k, v, dout)]

    def call(name):
        local = [t.clone().requires_grad_() for t in shards[:3]]
        world.Barrier()
        t0 = time.perf_counter()
        out = plans[name](*local)
        out.backward(shards[3])
        dt = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        return dt, [out.detach()] + [t.grad for t in local]

    times = {"mpi": [], "gloo": []}
    results = {}
    for rep in range(args.reps + 1):
        for name in ("mpi", "gloo"):
            dt, results[name] = call(name)
            if rep > 0:
                times[name].append(dt)
    same = all(torch.equal(a, b) for a, b in zip(results["mpi"], results["gloo"]))
    same = world.allreduce(int(same), op=MPI.MIN) == 1
    if world.rank == 0:
        config = dict(P=world.size, B=B, S_global=S, H=H, H_kv=H, D=D, causal=True,
                      strategy=args.strategy, layout="zigzag", dtype="fp32", reps=args.reps,
                      omp_threads=os.environ.get("OMP_NUM_THREADS"), host=platform.node(),
                      torch=torch.__version__)
        for name in ("mpi", "gloo"):
            print(json.dumps(dict(config, path=name, median_s=statistics.median(times[name]),
                                  times_s=times[name])))
        ratio = statistics.median(times["gloo"]) / statistics.median(times["mpi"])
        print(json.dumps(dict(config, ratio_gloo_over_mpi=round(ratio, 4), bit_identical=same)),
              flush=True)
    burst.clear_plan_cache()
    import torch.distributed as dist
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
