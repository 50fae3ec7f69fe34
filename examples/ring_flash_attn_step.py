"""A ring-flash-attention-style training step on burst's shims.

    PYTHONPATH=build/python mpirun -n 2 python3 examples/ring_flash_attn_step.py [--attn zigzag|llama3]

The calls are ring-flash-attention's own (``zigzag_ring_flash_attn_qkvpacked_func``, or
``llama3_flash_attn_prepare_cu_seqlens`` + ``llama3_flash_attn_varlen_qkvpacked_func`` on packed
documents); the process setup is mpi4py's (``mpirun``) instead of torch.distributed's, and the
weight gradients are summed with an MPI allreduce where DDP would do it. One attention layer
(qkv projection, attention, output projection) takes SGD steps on a regression loss. At every
step each rank checks the loss and the weight gradients against the same layer run in one
process with flash_attn's functions (burst.flash_attn_compat). Exits non-zero on a mismatch
(ctest example_ring_flash_attn_step_{zigzag,llama3}_np2).
"""
import argparse
import sys

import torch
from mpi4py import MPI

from burst.flash_attn_compat import flash_attn_qkvpacked_func, flash_attn_varlen_qkvpacked_func
from burst.ring_flash_attn import (llama3_flash_attn_prepare_cu_seqlens,
                                   llama3_flash_attn_varlen_qkvpacked_func,
                                   zigzag_ring_flash_attn_qkvpacked_func)

parser = argparse.ArgumentParser()
parser.add_argument("--attn", choices=["zigzag", "llama3"], default="zigzag")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, world_size = comm.Get_rank(), comm.Get_size()
S, d_model, H, D = 48 * world_size, 32, 4, 8      # S divides by 2P (zigzag) and P (llama3)
cu_seqlens = torch.tensor([0, S // 3, S // 3 + 5, S], dtype=torch.int32)   # llama3: 3 documents


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(d_model, 3 * H * D, bias=False)
        self.out = torch.nn.Linear(H * D, d_model, bias=False)

    def forward(self, x, attention):
        qkv = self.qkv(x).unflatten(-1, (3, H, D))
        return self.out(attention(qkv).flatten(-2))


def extract_local(t, dim):
    """This rank's tokens, cut as ring-flash-attention's tests cut them."""
    if args.attn == "zigzag":
        chunks = t.chunk(2 * world_size, dim=dim)
        return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim=dim)
    return t.chunk(world_size, dim=dim)[rank]       # llama3: contiguous


if args.attn == "zigzag":
    batch = lambda t: t[None]                       # noqa: E731  [B=1, S, ...]
    local_attn = lambda qkv: zigzag_ring_flash_attn_qkvpacked_func(qkv, causal=True)  # noqa: E731
    whole_attn = lambda qkv: flash_attn_qkvpacked_func(qkv, causal=True)              # noqa: E731
else:
    batch = lambda t: t                             # noqa: E731  packed [T, ...]
    cu_q, cu_k, max_q, max_k, k_slice = llama3_flash_attn_prepare_cu_seqlens(
        cu_seqlens, causal=True, rank=rank, world_size=world_size)
    local_attn = lambda qkv: llama3_flash_attn_varlen_qkvpacked_func(  # noqa: E731
        qkv, cu_q, cu_k, max_q, max_k, heads_k_stride=1, local_k_slice=k_slice, causal=True)
    whole_attn = lambda qkv: flash_attn_varlen_qkvpacked_func(  # noqa: E731
        qkv, cu_seqlens, int((cu_seqlens[1:] - cu_seqlens[:-1]).max()), causal=True)

torch.manual_seed(0)                                # the same data and weights on every rank
x, target = batch(torch.randn(S, d_model)), batch(torch.randn(S, d_model))
dim = 1 if args.attn == "zigzag" else 0
layer, twin = Layer(), Layer()
twin.load_state_dict(layer.state_dict())
optim = torch.optim.SGD(layer.parameters(), lr=0.1)
twin_optim = torch.optim.SGD(twin.parameters(), lr=0.1)
worst = 0.0
for step in range(args.steps):
    # Distributed: local tokens, local loss summed over ranks, gradients summed over ranks.
    optim.zero_grad()
    y = layer(extract_local(x, dim), local_attn)
    loss_local = ((y - extract_local(target, dim)) ** 2).sum() / target.numel()
    loss_local.backward()
    loss = comm.allreduce(float(loss_local), op=MPI.SUM)
    for p in layer.parameters():
        comm.Allreduce(MPI.IN_PLACE, p.grad.numpy(), op=MPI.SUM)
    # The same step in one process on the whole sequence.
    twin_optim.zero_grad()
    twin_loss = ((twin(x, whole_attn) - target) ** 2).sum() / target.numel()
    twin_loss.backward()
    grad_err = max(float((p.grad - t.grad).abs().max() / t.grad.abs().max())
                   for p, t in zip(layer.parameters(), twin.parameters()))
    loss_err = abs(loss - float(twin_loss)) / abs(float(twin_loss))
    worst = max(worst, grad_err, loss_err)
    if rank == 0:
        print(f"{args.attn} step {step}: loss {loss:.6f} (one process {float(twin_loss):.6f}), "
              f"max rel grad err {grad_err:.1e}", flush=True)
    optim.step()
    twin_optim.step()
# float32 sums in another order: ~1e-6 relative; 1e-4 fails a wrong shard or a lost gradient.
sys.exit(comm.allreduce(int(worst > 1e-4), op=MPI.MAX))
