"""Train a small 2-layer model with burst attention under torchrun: a gloo process group, no MPI.

    PYTHONPATH=build/python torchrun --standalone --nproc_per_node 2 examples/torchrun_train.py

torchrun starts the processes with torch's env:// variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); each joins the gloo group (init_process_group) and passes it as ``comm=`` — burst's
messages then go through the group's own send / recv / allgather / alltoall (burst._group).
Task: at every position name the most recent "key" token (keys every --key-every tokens among
noise tokens), learnable only by attending back, across rank boundaries once the sequence is
split. Each rank holds its zigzag shard (burst.shard), applies rotary embeddings at the GLOBAL
positions of its tokens (burst.positions), and the parameter gradients are summed over the group
(torch.distributed.all_reduce). At step 0 the distributed loss must equal the whole sequence's
loss on one process (comm=None); at the end the loss must have fallen.
"""
import argparse
import math

import numpy as np
import torch
import torch.distributed as dist

import burst


def rope(x, pos, base=10000.0):
    """Rotary embedding of x [B, S, H, D] at global positions pos [S] (half-split convention)."""
    D = x.shape[-1]
    inv = base ** (-torch.arange(0, D // 2, dtype=torch.float32) / (D // 2))
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Layer(torch.nn.Module):
    """Pre-norm transformer layer: causal GQA attention through burst, then an MLP."""

    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.h, self.h_kv, self.d = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.wq = torch.nn.Linear(dim, heads * self.d, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
        self.wo = torch.nn.Linear(heads * self.d, dim, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))

    def forward(self, x, pos, comm):
        B, S, _ = x.shape
        h = self.norm1(x)
        q = rope(self.wq(h).view(B, S, self.h, self.d), pos)
        k, v = self.wkv(h).view(B, S, 2, self.h_kv, self.d).unbind(2)
        a = burst.attn_func(q, rope(k, pos), v, causal=True, comm=comm)   # zigzag shards
        x = x + self.wo(a.reshape(B, S, -1))
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self, vocab, dim, heads, kv_heads, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(Layer(dim, heads, kv_heads) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens, pos, comm):
        x = self.emb(tokens)
        for layer in self.layers:
            x = layer(x, pos, comm)
        return self.head(x)


def make_batch(rng, B, S, vocab, key_every):
    half = vocab // 2
    tokens = rng.integers(half, vocab, size=(B, S))
    keys = rng.integers(0, half, size=(B, (S + key_every - 1) // key_every))
    tokens[:, ::key_every] = keys
    return torch.from_numpy(tokens), torch.from_numpy(np.repeat(keys, key_every, axis=1)[:, :S])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seq", type=int, default=256, help="global sequence length S_global")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=16)
    ap.add_argument("--key-every", type=int, default=48)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args()

    dist.init_process_group("gloo")          # env:// from torchrun
    group = dist.group.WORLD
    rank = dist.get_rank()
    torch.manual_seed(0)                     # identical initial weights on every rank
    model = Model(args.vocab, args.dim, args.heads, args.kv_heads)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(1)           # identical data stream on every rank
    pos = torch.from_numpy(burst.positions(args.seq, group, "zigzag"))
    n_tokens = args.batch * args.seq
    losses = []
    for step in range(args.steps):
        tokens, targets = make_batch(rng, args.batch, args.seq, args.vocab, args.key_every)
        logits = model(burst.shard(tokens, group, "zigzag"), pos, group)
        # This rank's token losses / all tokens: the ranks' losses add up to the mean.
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, args.vocab), burst.shard(targets, group, "zigzag").reshape(-1),
            reduction="sum") / n_tokens
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=group)
        total = loss.detach().clone()
        dist.all_reduce(total, group=group)
        losses.append(total.item())
        if step == 0:
            with torch.no_grad():
                full = model(tokens, torch.arange(args.seq), None)
                ref = torch.nn.functional.cross_entropy(full.reshape(-1, args.vocab),
                                                        targets.reshape(-1)).item()
            assert abs(losses[0] - ref) < 1e-4 * max(1.0, ref), f"distributed {losses[0]} != {ref}"
            if rank == 0:
                print(f"step 0: distributed loss {losses[0]:.6f} == single-process loss {ref:.6f}")
        opt.step()
        if rank == 0 and (step % 10 == 9 or step == args.steps - 1):
            print(f"step {step + 1}: loss {losses[-1]:.4f} (chance {math.log(args.vocab / 2):.4f})")
    assert losses[-1] < losses[0], f"the loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"
    burst.clear_plan_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
