"""A torch.distributed gloo group gives burst the same bits as mpi4py: every strategy, forward and
backward, over the same inputs, both paths in one job (run under mpirun at 2 and 4 ranks).

Each process joins MPI (mpi4py) and then a gloo group by torch's env:// rendezvous (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT set from MPI's rank and a port rank 0 picks), runs each case
once with comm=MPI.COMM_WORLD and once with comm=<the gloo group>, and compares out, lse, dq,
dk, dv (torch.equal: bit for bit) and the plans' byte and message counters (equal: the same
messages moved). attn_with_kvcache (a sharded cache) and the varlen shims (zigzag, llama3) run on both too. The ring-flash-attention shims run with group=<gloo group> and group=None
(torch's default group once it is initialised). Exit status 1 on any difference, on every rank.
"""
import os
import socket
import sys

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
    return dist.new_group(backend="gloo") if world.size > 1 else dist.group.WORLD


def run(comm, strategy, layout, causal, dtype, extra, seed=7, B=1, S=96, H=4, H_kv=2, D=16):
    import torch
    import burst
    g = torch.Generator().manual_seed(seed)
    q, k, v, dout = (torch.randn(B, S, h, D, generator=g).to(dtype) for h in (H, H_kv, H_kv, H))
    attn = burst.DistAttention(comm, B, S, H, H_kv, D, causal=causal, strategy=strategy,
                               layout=layout, dtype=dtype, **extra)
    pos = torch.from_numpy(attn.positions)
    local = [t.index_select(1, pos).requires_grad_() for t in (q, k, v)]
    out, lse = attn(*local, return_lse=True)
    out.backward(dout.index_select(1, pos))
    stats = attn.last_stats()
    return ([out.detach(), lse] + [t.grad for t in local],
            (stats["bytes_sent"], stats["messages_sent"]))


def run_shim(group, seed=3, S=64, H=2, D=8):
    import torch
    from burst.ring_flash_attn import zigzag_ring_flash_attn_func
    import burst
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, S, H, D, generator=g) for _ in range(3))
    local = [burst.shard(t, world, "zigzag").requires_grad_() for t in (q, k, v)]
    out = zigzag_ring_flash_attn_func(*local, causal=True, group=group)
    out.sum().backward()
    return [out.detach()] + [t.grad for t in local]


def run_varlen_shims(group, seed=4, H=2, D=8):
    """zigzag_ring_flash_attn_varlen_func (local cu_seqlens) and llama3_flash_attn_varlen_func
    (prepare's offsets), forward + backward, on this rank's tokens."""
    import torch
    from burst.ring_flash_attn import (llama3_flash_attn_prepare_cu_seqlens,
                                       llama3_flash_attn_varlen_func,
                                       zigzag_ring_flash_attn_varlen_func)
    P, rank = world.size, world.rank
    g = torch.Generator().manual_seed(seed + rank)
    results = []
    cu_local = torch.tensor([0, 8, 24], dtype=torch.int32)       # two sequences, 2P | 2·length
    q, k, v = (torch.randn(24, H, D, generator=g).requires_grad_() for _ in range(3))
    out = zigzag_ring_flash_attn_varlen_func(q, k, v, cu_local, 16, causal=True, group=group)
    out.sum().backward()
    results += [out.detach(), q.grad, k.grad, v.grad]
    cu = torch.tensor([0, 16 * P + 3, 32 * P], dtype=torch.int32)
    cu_q, cu_k, max_q, max_k, k_slice = llama3_flash_attn_prepare_cu_seqlens(cu, True, rank, P)
    q, k, v = (torch.randn(32, H, D, generator=g).requires_grad_() for _ in range(3))
    out = llama3_flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, 1, k_slice, causal=True,
                                        group=group)
    out.sum().backward()
    return results + [out.detach(), q.grad, k.grad, v.grad]


def run_kvcache(comm, seed=5, B=2, S_new=3, H=4, H_kv=2, D=8):
    """attn_with_kvcache with each rank's unequal part of every sequence's cache (in place)."""
    import torch
    import burst
    P, rank = world.size, world.rank
    g = torch.Generator().manual_seed(seed + rank)
    parts = [[3 + r, 10 + 2 * r] for r in range(P)]
    kc, vc = (torch.randn(B, 16 + S_new, H_kv, D, generator=g) for _ in range(2))
    k, v = (torch.randn(B, S_new, H_kv, D, generator=torch.Generator().manual_seed(seed))
            for _ in range(2))
    q = torch.randn(B, S_new, H, D, generator=torch.Generator().manual_seed(seed + 100))
    out, lse = burst.attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=parts[rank], causal=True,
                                       return_softmax_lse=True, comm=comm)
    return [out, lse, kc, vc]


def main():
    import torch
    import burst
    gloo = join_gloo()
    P = world.size
    cases = []
    for strategy in burst.strategies():
        for causal in (False, True):
            extra = {}
            if strategy == "usp":
                if P < 4:
                    continue
                extra = dict(ulysses_degree=2)      # sub-groups: point-to-point collectives
            layout = "contiguous" if strategy in ("allgather", "headpar", "distflash") else "zigzag"
            cases.append((strategy, layout, causal, torch.float32, extra))
    cases.append(("burst", "zigzag", True, torch.bfloat16, {}))
    cases.append(("ring", "striped", True, torch.float32, dict(overlap=False)))
    failures = []
    for strategy, layout, causal, dtype, extra in cases:
        name = f"{strategy}/{layout}/causal={causal}/{dtype}/{extra}"
        try:
            ref, ref_stats = run(world, strategy, layout, causal, dtype, extra)
        except NotImplementedError as e:
            print(f"rank {world.rank}: {name}: unsupported here ({e})", flush=True)
            continue
        got, got_stats = run(gloo, strategy, layout, causal, dtype, extra)
        for field, a, b in zip(("out", "lse", "dq", "dk", "dv"), ref, got):
            if not torch.equal(a, b):
                failures.append(f"{name}: {field} differs (max |diff| {(a.float() - b.float()).abs().max()})")
        if ref_stats != got_stats:
            failures.append(f"{name}: counters (bytes, messages) {ref_stats} over MPI, {got_stats} over gloo")
    for label, group in (("group=<gloo group>", gloo), ("group=None (torch default group)", None)):
        ref = run_shim(world)
        got = run_shim(group)
        for field, a, b in zip(("out", "dq", "dk", "dv"), ref, got):
            if not torch.equal(a, b):
                failures.append(f"zigzag_ring_flash_attn_func {label}: {field} differs")
    for i, (a, b) in enumerate(zip(run_varlen_shims(world), run_varlen_shims(gloo))):
        if not torch.equal(a, b):
            failures.append(f"varlen shims: {('zigzag varlen', 'llama3')[i // 4]} "
                            f"{('out', 'dq', 'dk', 'dv')[i % 4]} differs")
    for field, a, b in zip(("out", "lse", "k_cache", "v_cache"), run_kvcache(world), run_kvcache(gloo)):
        if not torch.equal(a, b):
            failures.append(f"attn_with_kvcache: {field} differs")
    # The gathered tensor over the group equals the one over MPI.
    x = torch.arange(P * 8 * 3, dtype=torch.float32).reshape(1, P * 8, 3)
    mine = burst.shard(x, gloo, "zigzag")
    if not torch.equal(burst.unshard(mine, gloo, "zigzag"), x):
        failures.append("unshard over the gloo group differs from the global tensor")
    all_failures = world.allgather(failures)
    if world.rank == 0:
        flat = [f"rank {r}: {f}" for r, fs in enumerate(all_failures) for f in fs]
        print("\n".join(flat) if flat else f"group_equal: {len(cases)} cases + shims, P={P}: "
              f"out, lse, dq, dk, dv and counters bit-identical over gloo and MPI", flush=True)
    burst.clear_plan_cache()
    import torch.distributed as dist
    dist.destroy_process_group()
    return 1 if any(all_failures) else 0


if __name__ == "__main__":
    sys.exit(main())
