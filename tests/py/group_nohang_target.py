"""The job of tests/group_nohang.py: P processes joined by torch's env:// rendezvous into a gloo
group (no MPI). Every rank calls burst.attn_func(..., comm=<the group>, comm_timeout=TIMEOUT)
once together (the plan is built), then again; at the second call the last rank
  absent    never arrives: sleeps 60 s (its launcher ends it, as torchrun does)
  vanish    never arrives: exits at once (os._exit(0))
  good      calls like the others
The waiting ranks print "nohang: rank R waits from EPOCH_SECONDS" to stderr first.
Usage: RANK=r WORLD_SIZE=P MASTER_ADDR=127.0.0.1 MASTER_PORT=port python group_nohang_target.py MODE TIMEOUT
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import burst


def main():
    mode, timeout = sys.argv[1], float(sys.argv[2])
    dist.init_process_group("gloo", init_method="env://")
    group = dist.group.WORLD
    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    q = torch.randn(1, 32, 2, 16, generator=torch.Generator().manual_seed(rank))
    burst.attn_func(q, q, q, causal=True, comm=group, comm_timeout=timeout)
    if last and mode == "absent":
        time.sleep(60)
        return
    if last and mode == "vanish":
        sys.stderr.flush()
        os._exit(0)
    if not last:
        print(f"nohang: rank {rank} waits from {time.time():.3f}", file=sys.stderr, flush=True)
    burst.attn_func(q, q, q, causal=True, comm=group, comm_timeout=timeout)
    burst.clear_plan_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
