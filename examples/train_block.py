"""Train one transformer block with the sequence split across MPI ranks through burst.

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \
        mpirun -n 2 --oversubscribe python3 examples/train_block.py

Task: at every position, name the most recent "key" token (keys sit every `--key-every` tokens
among noise tokens), so the loss can only fall below ln(vocab / 2) by attending back up to
`key-every - 1` tokens — across rank boundaries once the sequence is split. Each rank holds its zigzag shard of the tokens (burst.shard), applies
rotary embeddings at the GLOBAL positions of its tokens (burst.positions), runs exact causal
attention with burst.attn_func(comm=...), and the parameter gradients are summed over ranks with
MPI Allreduce (data parallelism over the sequence dimension). At step 0 each rank also runs the
whole sequence on one process (comm=None) and checks that the distributed loss equals it.
"""
import argparse
import math
import time

import numpy as np
import torch
from mpi4py import MPI

import burst


def rope(x, pos, base=10000.0):
    """Rotary embedding of x [B, S, H, D] at global positions pos [S] (half-split convention)."""
    D = x.shape[-1]
    inv = base ** (-torch.arange(0, D // 2, dtype=torch.float32) / (D // 2))
    ang = pos.to(torch.float32)[:, None] * inv[None, :]           # [S, D/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(torch.nn.Module):
    """Pre-norm transformer block (GQA attention through burst + MLP) with an LM head."""

    def __init__(self, vocab, dim, heads, kv_heads):
        super().__init__()
        self.h, self.h_kv, self.d = heads, kv_heads, dim // heads
        self.emb = torch.nn.Embedding(vocab, dim)
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.wq = torch.nn.Linear(dim, heads * self.d, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
        self.wo = torch.nn.Linear(heads * self.d, dim, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens, pos, comm, strategy, layout):
        B, S = tokens.shape
        x = self.emb(tokens)
        h = self.norm1(x)
        q = self.wq(h).view(B, S, self.h, self.d)
        k, v = self.wkv(h).view(B, S, 2, self.h_kv, self.d).unbind(2)
        q, k = rope(q, pos), rope(k, pos)
        a = burst.attn_func(q, k, v, causal=True, comm=comm, strategy=strategy, layout=layout)
        x = x + self.wo(a.reshape(B, S, -1))
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def make_batch(rng, B, S, vocab, key_every):
    """Noise tokens from the upper half of the vocabulary with a key token (lower half) every
    `key_every` positions (the first at position 0); the target at every position is the most
    recent key — found only by attending back, often to tokens held by another rank."""
    half = vocab // 2
    tokens = rng.integers(half, vocab, size=(B, S))
    keys = rng.integers(0, half, size=(B, (S + key_every - 1) // key_every))
    tokens[:, ::key_every] = keys
    targets = np.repeat(keys, key_every, axis=1)[:, :S]
    return torch.from_numpy(tokens), torch.from_numpy(targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=256, help="global sequence length S_global")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=16)
    ap.add_argument("--key-every", type=int, default=48)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--strategy", default="burst", help=f"one of {burst.strategies()}")
    ap.add_argument("--layout", default="zigzag", help="contiguous | zigzag | striped")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(0)                      # identical initial weights on every rank
    model = Block(args.vocab, args.dim, args.heads, args.kv_heads)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(1)            # identical data stream on every rank
    pos = torch.from_numpy(burst.positions(args.seq, comm, args.layout))
    n_tokens = args.batch * args.seq
    t0 = time.perf_counter()
    for step in range(args.steps):
        tokens, targets = make_batch(rng, args.batch, args.seq, args.vocab, args.key_every)
        tok_l = burst.shard(tokens, comm, args.layout)
        tgt_l = burst.shard(targets, comm, args.layout)
        logits = model(tok_l, pos, comm, args.strategy, args.layout)
        # Sum of this rank's token losses / all tokens: the ranks' losses add up to the mean.
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab),
                                                 tgt_l.reshape(-1), reduction="sum") / n_tokens
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():          # sum gradients over ranks, in place
            comm.Allreduce(MPI.IN_PLACE, p.grad.numpy(), op=MPI.SUM)
        total = comm.allreduce(loss.item(), op=MPI.SUM)
        if step == 0:
            with torch.no_grad():
                full = model(tokens, torch.arange(args.seq), None, args.strategy, args.layout)
                ref = torch.nn.functional.cross_entropy(full.reshape(-1, args.vocab),
                                                        targets.reshape(-1)).item()
            assert abs(total - ref) < 1e-4 * max(1.0, ref), f"distributed loss {total} != {ref}"
            if rank == 0:
                print(f"step 0: distributed loss {total:.6f} == single-process loss {ref:.6f}")
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {total:.4f}  (chance {math.log(args.vocab // 2):.4f})  "
                  f"P={P} {args.strategy}/{args.layout}  {time.perf_counter() - t0:.1f}s",
                  flush=True)


if __name__ == "__main__":
    main()
