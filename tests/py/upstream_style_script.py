"""A script written the way ring-flash-attention's own tests are (test/test_zigzag_ring_flash_attn_
func.py, test_ring_flash_attn_varlen_func.py): plain `flash_attn` and `ring_flash_attn` imports,
no `group=` anywhere. Only the process setup differs — MPI ranks instead of torch.distributed
on GPUs, and every rank draws the same tensors instead of a broadcast.

Run it with burst standing in for both packages (run_upstream_style.py installs them):
    mpirun -n 2 python3 tests/py/run_upstream_style.py tests/py/upstream_style_script.py
Each rank compares its shard of the single-process flash_attn result with the ring result and
exits non-zero when they differ by more than fp32 rounding allows.
"""
import sys

import torch
from flash_attn import flash_attn_qkvpacked_func, flash_attn_varlen_qkvpacked_func
from mpi4py import MPI
from ring_flash_attn import (zigzag_ring_flash_attn_qkvpacked_func,
                             ring_flash_attn_varlen_qkvpacked_func)


def extract_local(value, rank, world_size, dim=1):
    value_chunks = value.chunk(2 * world_size, dim=dim)
    local_value = torch.cat([value_chunks[rank], value_chunks[2 * world_size - 1 - rank]], dim=dim)
    return local_value.contiguous()


def extract_local_varlen(value, cu_seqlens, rank, world_size):
    local_values = []
    for i in range(len(cu_seqlens) - 1):
        start, end = cu_seqlens[i], cu_seqlens[i + 1]
        local_values.append(value[start:end].chunk(world_size, dim=0)[rank].detach().clone())
    return torch.cat(local_values, dim=0).contiguous()


def log(name, diff, bound):
    worst = MPI.COMM_WORLD.allreduce(float(diff.abs().max()), op=MPI.MAX)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"{name}: max diff {worst:.3g} (bound {bound:.0e})", flush=True)
    return worst <= bound


if __name__ == "__main__":
    rank, world_size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    torch.manual_seed(42)
    batch_size, seqlen, nheads, d = 1, 12 * world_size * 2, 4, 32
    causal = True
    ok = True

    qkv = torch.randn(batch_size, seqlen, 3, nheads, d, requires_grad=True)
    dout = torch.randn(batch_size, seqlen, nheads, d)
    local_qkv = extract_local(qkv, rank, world_size).detach().clone()
    local_qkv.requires_grad = True
    local_dout = extract_local(dout, rank, world_size)

    out, lse, _ = flash_attn_qkvpacked_func(qkv, causal=causal, return_attn_probs=True)
    local_out = extract_local(out, rank, world_size)
    local_lse = extract_local(lse, rank, world_size, dim=2)
    ring_out, ring_lse, _ = zigzag_ring_flash_attn_qkvpacked_func(
        local_qkv, causal=causal, return_attn_probs=True)
    ok &= log("out diff", local_out - ring_out, 1e-5)
    ok &= log("lse diff", local_lse - ring_lse, 1e-5)
    out.backward(dout)
    ring_out.backward(local_dout)
    local_dqkv = extract_local(qkv.grad, rank, world_size)
    for i, name in enumerate(("dq", "dk", "dv")):
        ok &= log(f"{name} diff", local_dqkv[:, :, i] - local_qkv.grad[:, :, i], 1e-4)

    cu_seqlens = [0, 4 * world_size, 10 * world_size, 16 * world_size]
    cu_seqlens_tensor = torch.tensor(cu_seqlens, dtype=torch.int32)
    max_seqlen = int((cu_seqlens_tensor[1:] - cu_seqlens_tensor[:-1]).max())
    vqkv = torch.randn(cu_seqlens[-1], 3, nheads, d, requires_grad=True)
    vdout = torch.randn(cu_seqlens[-1], nheads, d)
    local_cu_seqlens_tensor = cu_seqlens_tensor // world_size
    local_vqkv = extract_local_varlen(vqkv, cu_seqlens, rank, world_size)
    local_vqkv.requires_grad = True
    vout = flash_attn_varlen_qkvpacked_func(vqkv, cu_seqlens_tensor, max_seqlen, causal=causal)
    ring_vout = ring_flash_attn_varlen_qkvpacked_func(
        local_vqkv, local_cu_seqlens_tensor, max_seqlen // world_size, causal=causal)
    ok &= log("varlen out diff", extract_local_varlen(vout, cu_seqlens, rank, world_size) - ring_vout,
              1e-5)
    vout.backward(vdout)
    ring_vout.backward(extract_local_varlen(vdout, cu_seqlens, rank, world_size))
    ok &= log("varlen dqkv diff",
              extract_local_varlen(vqkv.grad, cu_seqlens, rank, world_size) - local_vqkv.grad, 1e-4)
    # The whole-sequence result is not what a single shard alone gives (the failure this guards).
    if world_size > 1:
        alone = flash_attn_qkvpacked_func(local_qkv.detach(), causal=causal)
        ok &= not log("one-shard-alone diff (must be large)", alone - ring_out.detach(), 1e-3)
    sys.exit(0 if ok else 1)
