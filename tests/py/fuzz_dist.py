"""Seeded fuzzer of the distributed Python API: every draw ends in the exact result or in the
same clear error on every rank — never a hang, a crash, or a silently wrong answer.

Run under MPI:  mpirun -n P python3 tests/py/fuzz_dist.py --draws N [--seed S] [--json]
Each draw d takes its problem from numpy's generator seeded (S, d), identical on every rank:
API (attn_func BSHD or attn_varlen_func THD), strategy, layout, B, S_global (padded when it does
not split), H, H_kv, D, dtype (fp32, fp16, bf16 through torch), causal, window, softmax_scale,
varlen cu_seqlens, impl, NaN in q/k/v, and with some probability an argument invalid on every
rank or one rank's argument differing from the others' (shape, dtype, causal, window, scale,
strategy, layout, cu_seqlens, dropout). Every rank runs the call under the watchdog
(comm_timeout, so a hang would abort the job: a failure) and reports ("ok",) or (error type,
message); the harness (plain mpi4py) then checks:
  * every rank has the same outcome (same error type and message; an error names the argument);
  * a draw with an argument that differs between ranks or is invalid everywhere ends in an error;
  * a result matches the float64 reference on this rank's tokens: |out - ref| <= atol + rtol·|ref|
    with tolerances of fp32 accumulation (fp32) or of rounding out to the storage dtype
    (fp16 2^-11, bf16 2^-8 relative); lse likewise (fp32);
  * NaN: a NaN in q, k or v is refused on every rank with an error naming the tensor and its
    global position (DistAttention checks inputs are finite: docs/api.md § NaN and inf).
Prints one JSON line {"draws", "ok", "errors", "failures", "seconds", ...} on rank 0 and exits 1
if any draw failed (each failure is printed with its seed and draw to replay it: --only D).
"""
import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import burst
from conftest import visible_reference

STRATEGIES = burst.strategies()
LAYOUTS = ["zigzag", "contiguous", "striped", "balanced"]
TOL = {"fp32": (2e-5, 1e-5), "fp16": (2e-3, 2.0 ** -10), "bf16": (1e-2, 2.0 ** -7)}


def draw_problem(rng, P):
    """One problem, identical on every rank (rng is seeded identically)."""
    p = {}
    p["api"] = "varlen" if rng.random() < 0.3 else "bshd"
    p["strategy"] = str(rng.choice(STRATEGIES))
    p["layout"] = str(rng.choice(LAYOUTS if p["api"] == "bshd" else LAYOUTS[:3]))
    p["B"] = 1 if p["api"] == "varlen" else int(rng.integers(1, 3))
    p["H_kv"] = int(rng.choice([1, 2, 4]))
    p["H"] = p["H_kv"] * int(rng.choice([1, 2]))
    p["D"] = int(rng.choice([8, 16, 24, 32, 64]))
    unit = 2 * P
    p["S"] = int(rng.integers(1, 12) if rng.random() < 0.7 else rng.integers(12, 100)) * unit
    p["pad"] = p["api"] == "bshd" and rng.random() < 0.15
    if p["pad"]:
        p["S"] = p["S"] - int(rng.integers(1, unit))     # does not split: shards are padded
    p["dtype"] = str(rng.choice(["fp32", "fp32", "fp16", "bf16"]))
    p["causal"] = bool(rng.random() < 0.6)
    p["window"] = (-1, -1) if rng.random() < 0.7 else (int(rng.integers(0, 40)), -1 if p["causal"] else int(rng.integers(0, 40)))
    p["scale"] = None if rng.random() < 0.7 else float(rng.uniform(0.05, 1.0))
    p["impl"] = "tiled" if rng.random() < 0.85 else "reference"
    if p["api"] == "varlen":
        cuts = np.sort(rng.choice(np.arange(1, p["S"]), size=int(rng.integers(0, 4)), replace=False))
        p["cu"] = [0] + [int(c) for c in cuts] + [p["S"]]
    p["nan"] = None
    if rng.random() < 0.08:
        p["nan"] = (str(rng.choice(["q", "k", "v"])), int(rng.integers(0, p["S"])))
    p["bad"] = None          # invalid on every rank
    p["differs"] = None      # one rank's argument differs
    u = rng.random()
    if u < 0.06:
        p["bad"] = str(rng.choice(["scale_neg", "window_bad", "dropout", "impl", "layout", "strategy", "gqa"]))
    elif u < 0.22:
        kinds = ["S_local", "causal", "window", "scale", "strategy", "layout", "dtype", "D", "H", "dropout"]
        p["differs"] = (int(rng.integers(0, P)), str(rng.choice(kinds + (["cu"] if p["api"] == "varlen" else []))))
    return p


def to_dtype(x, dtype):
    """numpy float32 → the call's operand (numpy fp32 / fp16, torch bf16) and its float64 value."""
    if dtype == "fp32":
        return x.astype(np.float32), x.astype(np.float32).astype(np.float64)
    if dtype == "fp16":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    import torch
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return t, t.float().numpy().astype(np.float64)


def reference(q, k, v, visible, scale):
    """float64 attention. q [B,S,H,D], k, v [B,S,H_kv,D], visible [S,S]. Rows with no visible
    key: out 0, lse -inf."""
    r = q.shape[2] // k.shape[2]
    kk, vv = np.repeat(k, r, axis=2), np.repeat(v, r, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    s = np.where(visible[None, None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    empty = ~visible.any(-1)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(visible[None, None], np.exp(s - m), 0.0)
    z = e.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.einsum("bhij,bjhd->bihd", e / np.where(z > 0, z, 1.0), vv)
        lse = np.where(empty[None, None], -np.inf, (m + np.log(np.where(z > 0, z, 1.0)))[..., 0])
    return out, lse


def visible_matrix(p):
    """[S, S] bool: flash_attn's causal / window on positions (conftest.visible_reference); varlen:
    within each document only (windows compare differences of positions, the same within one)."""
    S = p["S"]
    vis = visible_reference(S, S, p["causal"], p["window"]).numpy()
    if p["api"] == "varlen":
        doc = np.searchsorted(np.array(p["cu"][1:]), np.arange(S), side="right")
        vis &= doc[:, None] == doc[None, :]
    return vis


def three_heads(k):
    """k with 3 kv heads (its first repeated): H % H_kv != 0 for every drawn H."""
    first = k[..., :1, :]
    if hasattr(first, "repeat_interleave"):      # torch
        import torch
        return torch.cat([first] * 3, dim=-2)
    return np.concatenate([first] * 3, axis=-2)


def run_draw(p, comm, timeout):
    """This rank's call; returns (outcome, detail)."""
    rank, P = comm.Get_rank(), comm.Get_size()
    g = np.random.default_rng(p["seed"])
    B, S, H, H_kv, D = p["B"], p["S"], p["H"], p["H_kv"], p["D"]
    mine = p["differs"] is not None and p["differs"][0] == rank
    what = p["differs"][1] if mine else None
    if what == "D":
        D += 8
    if what == "H":
        H += H_kv
    x = {n: g.standard_normal((B, S, h, D)).astype(np.float32) for n, h in (("q", H), ("k", H_kv), ("v", H_kv))}
    if p["nan"] is not None:
        x[p["nan"][0]][:, p["nan"][1], 0, 0] = np.nan
    dtype = "fp16" if what == "dtype" and p["dtype"] != "fp16" else ("fp32" if what == "dtype" else p["dtype"])
    ops, f64 = {}, {}
    for n in x:
        ops[n], f64[n] = to_dtype(x[n], dtype)
    kw = dict(comm=comm, strategy=p["strategy"], layout=p["layout"], impl=p["impl"], comm_timeout=timeout,
              causal=p["causal"], window_size=p["window"], softmax_scale=p["scale"], return_lse=True)
    if what == "causal":
        kw["causal"] = not kw["causal"]
    if what == "window":
        kw["window_size"] = (3, -1 if kw["causal"] else 3)
    if what == "scale":
        kw["softmax_scale"] = 0.125 if p["scale"] != 0.125 else 0.25
    if what == "strategy":
        kw["strategy"] = "ring" if p["strategy"] != "ring" else "burst"
    if what == "layout":
        kw["layout"] = "contiguous" if p["layout"] != "contiguous" else "striped"
    if what == "dropout" or p["bad"] == "dropout":
        kw["dropout_p"] = 0.1
    bad = p["bad"]
    if bad == "scale_neg":
        kw["softmax_scale"] = -1.0
    if bad == "window_bad":
        kw["window_size"] = (-5, 2)
    if bad == "impl":
        kw["impl"] = "fastest"
    if bad == "layout":
        kw["layout"] = "spiral"
    if bad == "strategy":
        kw["strategy"] = "teleport"
    vis = visible_matrix(p)
    layout_ok = kw["layout"] in LAYOUTS
    try:
        if p["api"] == "varlen":
            cu = list(p["cu"])
            if what == "cu" and len(cu) > 2:
                cu = cu[:1] + cu[2:]
            elif what == "cu":
                cu = [0, max(1, S // 2), S]
            sh = {n: burst.shard(ops[n][0], comm, kw["layout"] if layout_ok else "zigzag", dim=0) for n in ops}
            if what == "S_local":
                sh = {n: t[:-1] for n, t in sh.items()}
            if bad == "gqa":
                sh["k"] = three_heads(sh["k"])
            out, lse = burst.attn_varlen_func(sh["q"], sh["k"], sh["v"], cu, cu, S, S, **kw)
        else:
            mask = burst._masks.build_mask(None, kw["causal"], kw["window_size"], S) if kw["layout"] == "balanced" else None
            lay = kw["layout"] if layout_ok else "zigzag"
            sh = {n: burst.shard(ops[n], comm, lay, dim=1, mask=mask, pad=p["pad"]) for n in ops}
            if what == "S_local":
                sh = {n: t[:, :-1] for n, t in sh.items()}
            if bad == "gqa":
                sh["k"] = three_heads(sh["k"])
            if p["pad"]:
                kw["S_global"] = S
            out, lse = burst.attn_func(sh["q"], sh["k"], sh["v"], mask=None, **kw)
    except Exception as e:     # every exception type is reported; the harness compares them
        return ("error", type(e).__name__, str(e)), None
    # The result on this rank's tokens against the float64 reference.
    if p["api"] == "varlen":
        pos = burst.positions(S, comm, p["layout"])
    else:
        mask = burst._masks.build_mask(None, p["causal"], p["window"], S) if p["layout"] == "balanced" else None
        pos = burst.positions(S, comm, p["layout"], mask, pad=p["pad"])
    scale = p["scale"] if p["scale"] is not None else 1.0 / np.sqrt(D)
    ref_out, ref_lse = reference(f64["q"], f64["k"], f64["v"], vis, scale)
    real = pos < S
    out = np.asarray(out.float().numpy() if hasattr(out, "float") else out, dtype=np.float64)
    lse = np.asarray(lse.numpy() if hasattr(lse, "numpy") else lse, dtype=np.float64)
    if p["api"] == "varlen":
        out, lse = out[None], lse[None]
    ro, rl = ref_out[:, pos[real]], ref_lse[:, :, pos[real]]
    o, l = out[:, real], lse[:, :, real]
    atol, rtol = TOL[p["dtype"]]
    vmax = max(1.0, float(np.nanmax(np.abs(f64["v"]))) if np.isfinite(np.nanmax(np.abs(f64["v"]))) else 1.0)
    nan_ok = np.array_equal(np.isnan(o), np.isnan(ro)) and np.array_equal(np.isnan(l), np.isnan(rl))
    fin = ~np.isnan(ro)
    err_o = float(np.max(np.abs(o[fin] - ro[fin]) - rtol * np.abs(ro[fin]), initial=0.0))
    finl = np.isfinite(rl)
    err_l = float(np.max(np.abs(l[finl] - rl[finl]), initial=0.0))
    inf_ok = np.array_equal(np.isneginf(l), np.isneginf(rl))
    if not (nan_ok and inf_ok and err_o <= atol * vmax and err_l <= 1e-4):
        return ("ok",), (f"wrong result: NaN rows match {nan_ok}, -inf lse rows match {inf_ok}, "
                         f"out excess error {err_o:.3g} (atol {atol * vmax:.3g}), lse error {err_l:.3g}")
    if pad_rows := int((~real).sum()):
        if not (np.all(out[:, ~real] == 0) and np.all(np.isneginf(lse[:, :, ~real]))):
            return ("ok",), f"padding rows ({pad_rows}) not out 0 / lse -inf"
    return ("ok",), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--only", type=int, default=None, help="replay one draw")
    ap.add_argument("--timeout", type=float, default=60.0, help="the watchdog's seconds per call")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--show-errors", action="store_true", help="print each distinct error once")
    ap.add_argument("--progress", type=int, default=0, help="print the counts every N draws")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    draws = [a.only] if a.only is not None else range(a.draws)
    counts = {"ok": 0, "errors": 0, "failures": 0, "nan_draws": 0, "differs_draws": 0, "bad_draws": 0}
    kinds = {}
    shown = set()
    t0 = time.time()
    for d in draws:
        rng = np.random.default_rng([a.seed, d])
        p = draw_problem(rng, P)
        p["seed"] = [a.seed, d, 1]
        outcome, problem = run_draw(p, comm, a.timeout)
        all_out = comm.allgather((outcome, problem))
        counts["nan_draws"] += p["nan"] is not None
        counts["differs_draws"] += p["differs"] is not None
        counts["bad_draws"] += p["bad"] is not None
        fail = None
        outcomes = [o for o, _ in all_out]
        if any(o != outcomes[0] for o in outcomes):
            fail = "ranks reached different verdicts: " + "; ".join(f"rank {r}: {o}" for r, o in enumerate(outcomes))
        elif outcomes[0][0] == "ok" and (p["differs"] is not None or p["bad"] is not None):
            fail = f"accepted an argument that {'differs between ranks' if p['differs'] else 'is invalid'}"
        elif outcomes[0][0] == "ok" and p["nan"] is not None:
            fail = "accepted a NaN input"
        elif any(pr for _, pr in all_out):
            fail = "; ".join(f"rank {r}: {pr}" for r, (_, pr) in enumerate(all_out) if pr)
        elif outcomes[0][0] == "error" and p["differs"] is None and p["bad"] is None and p["nan"] is None:
            kinds[outcomes[0][2][:90]] = kinds.get(outcomes[0][2][:90], 0) + 1
        if a.show_errors and rank == 0 and outcomes[0][0] == "error":
            key = (p["bad"], p["differs"][1] if p["differs"] else None, p["nan"] is not None)
            if key not in shown:
                shown.add(key)
                print(f"draw {d} bad={key[0]} differs={key[1]} nan={key[2]}: {outcomes[0][1]}: {outcomes[0][2]}")
        if fail:
            counts["failures"] += 1
            if rank == 0:
                print(f"FAIL seed {a.seed} draw {d}: {fail}\n  problem: {p}", flush=True)
        elif outcomes[0][0] == "ok":
            counts["ok"] += 1
        else:
            counts["errors"] += 1
        if a.progress and (d + 1) % a.progress == 0 and rank == 0:
            print(json.dumps(dict(counts, done=d + 1, seconds=round(time.time() - t0, 1))), flush=True)
    summary = dict(counts, draws=len(draws), P=P, seed=a.seed, seconds=round(time.time() - t0, 2),
                   valid_draws_refused=kinds)
    if rank == 0:
        print(json.dumps(summary) if a.json else summary, flush=True)
    burst.clear_plan_cache()
    return 1 if counts["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
