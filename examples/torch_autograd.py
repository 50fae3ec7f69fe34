"""Distributed attention under torch autograd, sequence sharded with burst.shard.

    PYTHONPATH=build/python mpirun -n 2 python3 examples/torch_autograd.py

Every rank draws the same global q, k, v (one seed), keeps its tokens (burst.shard), runs
burst.attn_func over MPI.COMM_WORLD and calls .backward(). Each rank then checks its shard of
out and of the gradients against torch float64 attention on the whole sequence in one process.
S = 1001 does not divide by 2P, so the shards are padded (pad=True) and the call names the real
length (S_global=S): the padding is masked and burst.unshard strips it. Exits non-zero on a
mismatch (ctest example_torch_autograd_np2).
"""
import sys

import torch
from mpi4py import MPI

import burst

comm = MPI.COMM_WORLD
B, S, H, H_kv, D = 1, 1001, 4, 2, 32
layout, causal = "zigzag", False

torch.manual_seed(0)                      # the same global tensors on every rank
q, k, v, dout = (torch.randn(B, S, h, D, dtype=torch.float64) for h in (H, H_kv, H_kv, H))

# This rank's shards, as float32 leaves of the autograd graph.
ql, kl, vl = (burst.shard(t.float(), comm, layout, pad=True).requires_grad_() for t in (q, k, v))
out = burst.attn_func(ql, kl, vl, causal=causal, comm=comm, layout=layout, S_global=S)
out.backward(burst.shard(dout.float(), comm, layout, pad=True))

# The single-process oracle: softmax(QK^T / sqrt(D)) V in float64, GQA by repeating K, V heads.
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
kk, vv = (t.repeat_interleave(H // H_kv, dim=2) for t in leaves[1:])
p = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", leaves[0], kk) / D ** 0.5, dim=-1)
ref = torch.einsum("bhqk,bkhd->bqhd", p, vv)
ref.backward(dout)

pos = burst.positions(S, comm, layout, pad=True)
real = torch.from_numpy(pos < S)
rows = torch.from_numpy(pos[pos < S])
errors = {"out": (out.detach()[:, real] - ref.detach()[:, rows]).abs().max(),
          "dq": (ql.grad[:, real] - leaves[0].grad[:, rows]).abs().max(),
          "dk": (kl.grad[:, real] - leaves[1].grad[:, rows]).abs().max(),
          "dv": (vl.grad[:, real] - leaves[2].grad[:, rows]).abs().max(),
          "padding out": out.detach()[:, ~real].abs().max() if (~real).any() else torch.tensor(0.0)}
full = burst.unshard(out.detach(), comm, layout, S_global=S)     # collective: every rank
errors["unshard"] = (full - ref.detach()).abs().max()
# float32 against float64 at S = 1001: ~1e-6; 1e-4 fails a wrong or missing token.
worst = max(float(e) for e in errors.values())
print(f"rank {comm.Get_rank()}: {len(rows)} real tokens, max |burst - fp64| "
      + ", ".join(f"{n} {float(e):.1e}" for n, e in errors.items()), flush=True)
bad = comm.allreduce(int(worst > 1e-4), op=MPI.MAX)
sys.exit(bad)
