"""torch.compile of a 2-layer model using burst attention (burst._ops custom ops, torch >= 2.4).

Checks, single process (and, with --group, over a 2-process gloo group launched by env://):
  * torch._dynamo.explain(model): graph_break_count == 0, and the graph calls burst.attn_forward
    (the custom op, not a traced-through Python path);
  * torch.compile(model, backend="aot_eager", fullgraph=True): out and every parameter's gradient
    equal eager's bit for bit (the same runner computes the attention);
  * torch.compile(model, fullgraph=True) (inductor): out and gradients within 1e-5 relative of
    eager (inductor may fuse the surrounding layers' fp32 arithmetic differently).
On torch < 2.4 it checks that burst._ops.AVAILABLE is False and the eager path still trains, then
exits 77 (ctest's skip) saying why. Exit 0 pass, 1 fail.
Usage: python compile_check.py [--no-inductor]   (RANK/WORLD_SIZE/MASTER_* set: over the group)
"""
import os
import sys

import torch

import burst


class Layer(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, comm):
        super().__init__()
        self.h, self.h_kv, self.d, self.comm = heads, kv_heads, dim // heads, comm
        self.norm = torch.nn.LayerNorm(dim)
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        h = self.norm(x)
        q = self.wq(h).view(B, S, self.h, self.d)
        k, v = self.wkv(h).view(B, S, 2, self.h_kv, self.d).unbind(2)
        a = burst.attn_func(q, k, v, causal=True, comm=self.comm)
        return x + self.wo(a.reshape(B, S, -1))


class Model(torch.nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2, comm=None):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(dim, heads, kv_heads, comm) for _ in range(2))
        self.head = torch.nn.Linear(dim, 8)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def run(model, x):
    model.zero_grad()
    out = model(x)
    (out.square().sum()).backward()
    return [out.detach()] + [p.grad.clone() for p in model.parameters()]


def main():
    comm = None
    if "RANK" in os.environ:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://")
        comm = dist.group.WORLD
    from burst import _ops
    failures = []
    torch.manual_seed(0)
    model = Model(comm=comm)
    P = 1 if comm is None else comm.size()
    x = torch.randn(2, 32 * P, 32, generator=torch.Generator().manual_seed(1))
    if comm is not None:
        x = burst.shard(x, comm, "zigzag")
    eager = run(model, x)
    if not _ops.AVAILABLE:
        if any(not torch.isfinite(t).all() for t in eager):
            failures.append("the eager path gave non-finite values")
        for f in failures:
            print("FAIL", f)
        if failures:
            return 1
        print(f"SKIP: torch {torch.__version__} has no torch.library.custom_op (needs >= 2.4): "
              f"burst's attention stays a plain autograd Function there (eager checked)")
        return 77
    import torch._dynamo as dynamo
    explanation = dynamo.explain(model)(x)
    graphs = "\n".join(str(g.graph) for g in explanation.graphs)
    if explanation.graph_break_count != 0:
        failures.append(f"{explanation.graph_break_count} graph breaks: {explanation.break_reasons}")
    if "burst.attn_forward" not in graphs:
        failures.append("the traced graph does not call the custom op burst.attn_forward")
    dynamo.reset()
    exact = run(torch.compile(model, backend="aot_eager", fullgraph=True), x)
    names = ["out"] + [n for n, _ in model.named_parameters()]
    for name, a, b in zip(names, eager, exact):
        if not torch.equal(a, b):
            failures.append(f"aot_eager: {name} differs from eager (max {(a - b).abs().max():.3g})")
    if "--no-inductor" not in sys.argv:
        dynamo.reset()
        fused = run(torch.compile(model, fullgraph=True), x)
        for name, a, b in zip(names, eager, fused):
            if not torch.allclose(a, b, rtol=1e-5, atol=1e-6 * a.abs().max().item()):
                failures.append(f"inductor: {name} differs from eager (max {(a - b).abs().max():.3g})")
    for f in failures:
        print("FAIL", f)
    if not failures:
        print(f"compile_check (P={P}, torch {torch.__version__}): 0 graph breaks, burst.attn_forward "
              f"in the graph, aot_eager bit-identical to eager"
              + ("" if "--no-inductor" in sys.argv else ", inductor within 1e-5"))
    burst.clear_plan_cache()
    if comm is not None:
        import torch.distributed as dist
        dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
