"""The Python job of tests/nohang_faults.py (the user's report: attn_func with comm_timeout while
one rank stays away). Every rank but the last calls burst.attn_func(..., comm=COMM_WORLD,
comm_timeout=TIMEOUT); the last rank:
  late      sleeps TIMEOUT + 4 s, then calls it
  absent    never calls it: sleeps 20 s and returns normally (mpi4py finalizes MPI at exit)
  vanish    never calls it: os._exit(0) at once, without MPI_Finalize
  mismatch  calls burst.attn_with_kvcache (a decode over a KV cache) instead
  good      calls it like the others
The waiting ranks print "nohang: rank R waits from EPOCH_SECONDS" to stderr first.
Usage: mpirun -n P python3 nohang_target.py MODE TIMEOUT
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import burst


def main():
    mode, timeout = sys.argv[1], float(sys.argv[2])
    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    last = rank == P - 1
    rng = np.random.default_rng(rank)
    q = rng.standard_normal((1, 32, 2, 16)).astype(np.float32)
    if last and mode == "absent":
        time.sleep(20)
        return
    if last and mode == "vanish":
        sys.stderr.flush()
        os._exit(0)
    if last and mode == "mismatch":
        kc = np.zeros((1, 8, 2, 16), np.float32)
        burst.attn_with_kvcache(q[:, :1], kc, kc.copy(), comm=comm)
        return
    if last and mode == "late":
        time.sleep(timeout + 4)
    if not last:
        print(f"nohang: rank {rank} waits from {time.time():.3f}", file=sys.stderr, flush=True)
    burst.attn_func(q, q, q, causal=True, comm=comm, comm_timeout=timeout)


if __name__ == "__main__":
    main()
