"""Error of the backward's write-ring partials in fp32 and in bf16 (DistConfig::partials_dtype)
against an fp64 oracle, as P grows: one JSON line per (inputs, side, partials dtype).

    mpirun -n P --bind-to none python3 bench/partials_error.py [--seq 384] [--heads 4] [--dim 64]

burst on the zigzag layout, causal mask. side "query": the dQ partials travel (burst's second
ring), "kv": the dK, dV partials (RingAttention's write ring). inputs "fp32": q, k, v, dout in
fp32, so the partials' rounding is the only 16-bit error; "bf16": q, k, v, dout stored in bf16 (the
training setting), the oracle computed in fp64 on the same rounded inputs and on the rounded out.
Reported per gradient: max |err| / max |oracle| (rel_max) and rms(err) / rms(oracle) (rel_rms),
where err is the gathered distributed result minus the oracle, and the backward's bytes sent
(max over ranks). Runs through torch autograd (burst.DistAttention on torch tensors).
"""
import argparse
import json

import numpy as np
import torch
from mpi4py import MPI

import burst


def stored(x, inputs):
    """float32 numpy -> the torch tensor a caller of that dtype holds (bf16: rounded once)."""
    t = torch.from_numpy(x)
    return t.to(torch.bfloat16) if inputs == "bf16" else t


def oracle(q, k, v, dout, out_saved=None):
    """fp64 causal attention forward and backward on [B, S, H, D] (MHA). The backward uses
    out_saved (what a 16-bit caller keeps) for delta = rowsum(dO * O) when given."""
    q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
    S, D = q.shape[1], q.shape[3]
    scale = 1.0 / np.sqrt(D)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    s = np.where(np.tril(np.ones((S, S), dtype=bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", p, v)
    o = out if out_saved is None else out_saved.astype(np.float64)
    delta = np.einsum("bqhd,bqhd->bhq", dout, o)[..., None]
    dp = np.einsum("bqhd,bkhd->bhqk", dout, v)
    ds = p * (dp - delta)
    dq = np.einsum("bhqk,bkhd->bqhd", ds, k) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    dv = np.einsum("bhqk,bqhd->bkhd", p, dout)
    return out, dq, dk, dv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=384)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    P, S, H, D = comm.Get_size(), a.seq, a.heads, a.dim
    rng = np.random.default_rng(a.seed)
    glob = [rng.standard_normal((1, S, H, D)).astype(np.float32) for _ in range(4)]
    for inputs in ("fp32", "bf16"):
        held = [stored(x, inputs) for x in glob]
        wide = [t.float().numpy() for t in held]         # exact widening of what is held
        out_ref = oracle(*wide)[0]
        out_saved = stored(out_ref.astype(np.float32), inputs).float().numpy()
        ref = oracle(*wide, out_saved=out_saved)
        local = [burst.shard(t, comm, "zigzag") for t in held]
        for side in ("query", "kv"):
            for partials in ("fp32", "bf16"):
                attn = burst.DistAttention(comm, 1, S, H, H, D, causal=True, strategy="burst",
                                           layout="zigzag", dtype=inputs, backward_side=side,
                                           partials_dtype=partials, num_threads=1)
                q, k, v = (t.clone().requires_grad_(True) for t in local[:3])
                attn(q, k, v).backward(local[3])
                bytes_sent = comm.allreduce(attn.last_stats()["bytes_sent"], op=MPI.MAX)
                row = {"bench": "partials_error", "P": P, "S_global": S, "H": H, "D": D,
                       "mask": "causal", "layout": "zigzag", "strategy": "burst",
                       "inputs": inputs, "side": side, "partials_dtype": partials,
                       "backward_bytes_sent": bytes_sent}
                for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref[1:]):
                    g = burst.unshard(got, comm, "zigzag").float().numpy().astype(np.float64)
                    err = g - want
                    row[name + "_rel_max"] = float(np.abs(err).max() / np.abs(want).max())
                    row[name + "_rel_rms"] = float(np.sqrt((err ** 2).mean() / (want ** 2).mean()))
                if comm.Get_rank() == 0:
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
