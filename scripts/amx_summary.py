#!/usr/bin/env python3
"""Summary of an AMX host check (scripts/amx_host_check.sh): the kernel targets.

Reads the check's JSON lines (`burst bench kernel` records, bench/torch_sdpa.py records, each
tagged with its round and phase) and prints per (impl, dtype, pass, mask, threads) the GFLOP/s:
the median over every timed run of every round is not in the records, so the median of the
rounds' medians with the smallest and largest round median beside it; then the ratios the
targets name (bf16 forward vs torch bf16 and vs burst fp32 on one thread; all-core vs
one-thread rates of the forward and backward; backward vs torch), each PASS / FAIL / n/a. The
one-thread forward targets are judged on paired ratios: the two rates of one round (the host's
core speed moves between runs, less within a round), their median over the rounds with the
smallest and largest; the ratio of the medians is printed beside it.

Usage: scripts/amx_summary.py CHECK.jsonl [--json SUMMARY.json]
"""
import argparse
import collections
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--json")
    a = ap.parse_args()
    recs = []
    with open(a.check) as f:
        for line in f:
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    host = next((r for r in recs if r.get("check") == "host"), {})
    rates = collections.defaultdict(list)
    by_round = collections.defaultdict(dict)  # (phase, round) -> key -> GFLOP/s of that round
    isa = {}
    for r in recs:
        if r.get("bench") == "kernel" and "gflops" in r:
            dt = {"f32": "fp32"}.get(r["dtype"], r["dtype"])
            key = ("burst", dt, r["pass"], r["mask"], r["threads"])
            isa[key] = r.get("isa")
        elif r.get("bench") == "torch_sdpa" and "gflops" in r:
            key = ("torch", r["dtype"], r["pass"], r["mask"], r["threads"])
        else:
            continue
        rates[key].append(r["gflops"])
        by_round[(r.get("phase", "all"), r.get("round"))][key] = r["gflops"]
    med = {k: statistics.median(v) for k, v in rates.items()}
    lines = [f"host: {host.get('cpu_model', '?')}, {host.get('nproc', '?')} CPUs, "
             f"amx_bf16 {host.get('amx_bf16', '?')}, avx512_bf16 {host.get('avx512_bf16', '?')}",
             "GFLOP/s, median of the rounds' medians [smallest, largest] (rounds):"]
    for k in sorted(rates, key=lambda k: (k[4], k[2], k[3], k[1], k[0])):
        v = rates[k]
        lines.append(f"  {k[0]:5s} {k[1]:4s} {k[2]} {k[3]:6s} T={k[4]:2d}: {med[k]:8.1f} "
                     f"[{min(v):.1f}, {max(v):.1f}] ({len(v)})" + (f"  isa {isa[k]}" if k in isa else ""))
    threads = sorted({k[4] for k in rates})
    many = threads[-1] if threads else 1
    targets = []

    def ratio(num, den):
        return med[num] / med[den] if num in med and den in med and med[den] > 0 else None

    def paired(num, den):
        """The ratio num/den within each round that ran both."""
        return [d[num] / d[den] for d in by_round.values() if num in d and den in d and d[den] > 0]

    def target(name, value, bound, extra=None):
        """bound None: reported only (a target set for another thread count)."""
        ok = None if value is None or bound is None else value >= bound
        rec = {"target": name, "value": value, "bound": bound, "ok": ok}
        rec.update(extra or {})
        targets.append(rec)
        shown = "n/a" if value is None else f"{value:.2f}"
        need = "no target here" if bound is None else f">= {bound}"
        lines.append(f"  {name}: {shown} ({need}) {'n/a' if ok is None else ('PASS' if ok else 'FAIL')}")

    def paired_target(name, num, den, bound):
        """A target judged on the median paired ratio, with its spread and the ratio of medians."""
        v = paired(num, den)
        of_medians = ratio(num, den)
        if not v:
            target(name, of_medians, bound)
            return
        target(name + " (paired)", statistics.median(v), bound,
               {"paired_ratios": v, "ratio_of_medians": of_medians})
        lines[-1] += (f"  rounds {len(v)}: [{min(v):.2f}, {max(v):.2f}]; ratio of medians "
                      + ("n/a" if of_medians is None else f"{of_medians:.2f}"))

    lines.append("targets:")
    for mask in ("full", "causal"):
        paired_target(f"bf16 fwd 1 thread {mask} / torch bf16",
                      ("burst", "bf16", "fwd", mask, 1), ("torch", "bf16", "fwd", mask, 1), 1.3)
        paired_target(f"bf16 fwd 1 thread {mask} / burst fp32",
                      ("burst", "bf16", "fwd", mask, 1), ("burst", "fp32", "fwd", mask, 1), 3.0)
    if many > 1:  # the targets are for 16 threads; other counts are reported only
        for dt in ("fp32", "bf16"):
            for mask in ("full", "causal"):
                target(f"{dt} bwd {mask} {many} threads / 1 thread",
                       ratio(("burst", dt, "bwd", mask, many), ("burst", dt, "bwd", mask, 1)),
                       10.0 if many == 16 else None)
                target(f"{dt} fwd {mask} {many} threads / 1 thread",
                       ratio(("burst", dt, "fwd", mask, many), ("burst", dt, "fwd", mask, 1)),
                       11.0 if many == 16 else None)
    lines.append("kept from the last pass (must not drop; the bounds are that pass's ratios):")
    for t, fwd_b, bwd_b in ((1, (1.04, 1.06), (1.77, 2.21)), (16, (1.31, 1.33), (1.84, 1.86))):
        if t == 1 or many == 16:
            for i, mask in enumerate(("full", "causal")):
                target(f"bf16 fwd {mask} {t} threads / torch bf16",
                       ratio(("burst", "bf16", "fwd", mask, t), ("torch", "bf16", "fwd", mask, t)), fwd_b[i])
                target(f"bf16 bwd {mask} {t} threads / torch bf16",
                       ratio(("burst", "bf16", "bwd", mask, t), ("torch", "bf16", "bwd", mask, t)), bwd_b[i])
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rates": {" ".join(map(str, k)): {"median": med[k], "rounds": v} for k, v in rates.items()},
                       "targets": targets}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
