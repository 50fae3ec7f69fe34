#!/usr/bin/env python3
"""Summary of a many-core host check (scripts/manycore_host_check.sh): the many-core targets.

Reads the check's JSON lines and prints, per ranks P and dtype, every strategy's forward +
backward seconds over the alternated rounds (median, min, max, rounds), forward, backward,
exposed communication (and the part of it beyond the busiest rank's busy time, which a schedule
could still hide) and backward balance (medians); burst's efficiency against P = 1; the
ranks x threads splits as measured and as `burst simulate --cores-per-node` recommends them
(calibrated spec); the kernels' thread scaling; the cases run with an emulated slow rank
(`bench dist --emulate-slow-rank`) beside the same case without; the cores' ceiling beside
burst's efficiency, and per rank of round 1's timelines the backward step time beside that
rank's FMA rate with every core busy (is a slow rank a slow core?). Each target line says
PASS / FAIL / n/a.

Usage: scripts/manycore_summary.py CHECK.jsonl [--json SUMMARY.json]
"""
import argparse
import collections
import json
import statistics
import sys

from host_records import load  # scripts/host_records.py, beside this file


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def verdict(ok):
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--json", help="also write the summary as one JSON object here")
    a = ap.parse_args()
    recs = load(a.check)
    out = {"cases": {}, "targets": []}
    lines = []
    host = next((r for r in recs if r.get("check") == "host"), {})
    lines.append(f"host: {host.get('cpu_model', '?')}, {host.get('nproc', '?')} CPUs, "
                 f"{host.get('cores_used', '?')} used, load {host.get('load_1m', '?')}")

    # bench dist records (rank 0's summaries), by case name; one per round.
    by_case = collections.defaultdict(lambda: collections.defaultdict(list))
    meta = {}
    slowed = collections.defaultdict(list)  # case -> its records (an emulated slow rank)
    for r in recs:
        if r.get("bench") != "dist" or "case" not in r:
            continue
        if r.get("slow_factor", 1.0) != 1.0:
            slowed[r["case"]].append(r)
            continue
        c = r["case"]
        meta[c] = (r.get("strategy"), r.get("ranks"), r.get("threads"), r.get("dtype"), r.get("S_global"))
        p = r.get("pass")
        by_case[c][p + ".seconds"].append(r["seconds"])
        by_case[c][p + ".exposed"].append(r.get("exposed_comm_seconds", 0.0))
        if "exposed_beyond_busiest_seconds" in r:
            by_case[c][p + ".beyond"].append(r["exposed_beyond_busiest_seconds"])
        if "balance" in r:
            by_case[c][p + ".balance"].append(r["balance"])
        if "fma_peak_gflops_per_core_all_busy" in r and p == "fwd+bwd":
            by_case[c]["fma_all_busy"].append(r["fma_peak_gflops_per_core_all_busy"])
    stats = {}
    for c, fields in by_case.items():
        if not fields.get("fwd+bwd.seconds"):
            continue
        s = {k: spread(v) for k, v in fields.items()}
        stats[c] = s
        out["cases"][c] = {"strategy": meta[c][0], "ranks": meta[c][1], "threads": meta[c][2],
                           "dtype": meta[c][3], "S_global": meta[c][4], **s}

    def med(c, k="fwd+bwd.seconds"):
        return stats[c][k]["median"] if c in stats and k in stats[c] else None

    # Per (P, dtype): the strategies ranked by median fwd+bwd seconds (1 thread per rank).
    groups = collections.defaultdict(list)
    for c, (strategy, P, T, dt, S) in meta.items():
        if c in stats and T == 1:
            groups[(P, dt)].append(c)
    for (P, dt) in sorted(groups, key=lambda k: (k[0], str(k[1]))):
        cs = sorted(groups[(P, dt)], key=med)
        lines.append(f"\nP = {P}, {dt}, S = {meta[cs[0]][4]}: fwd+bwd seconds median [min, max] (rounds); "
                     "fwd, bwd, exposed (fwd+bwd; beyond the busiest rank: fwd / bwd) medians; bwd balance")
        for c in cs:
            s = stats[c]
            fb = s["fwd+bwd.seconds"]
            ex = med(c, "fwd+bwd.exposed") or 0.0
            lines.append(f"  {meta[c][0]:10s} {fb['median']:8.3f} [{fb['min']:.3f}, {fb['max']:.3f}] ({fb['n']})"
                         f"  fwd {med(c, 'fwd.seconds') or 0:.3f}  bwd {med(c, 'bwd.seconds') or 0:.3f}"
                         f"  exposed {ex:.3f} ({100 * ex / fb['median']:.1f} %;"
                         f" beyond {med(c, 'fwd.beyond') or 0:.3f} / {med(c, 'bwd.beyond') or 0:.3f})"
                         f"  balance {med(c, 'bwd.balance') or 0:.2f}")
        if P > 1:
            burst = [c for c in cs if meta[c][0] == "burst"]
            others = [c for c in cs if meta[c][0] != "burst"]
            ok = None
            if burst and others:
                ok = all(med(burst[0]) <= med(o) for o in others)
            out["targets"].append({"target": f"burst <= every other strategy, P={P}, {dt}", "ok": ok})
            lines.append(f"  target burst <= every other strategy: {verdict(ok)}")
            if burst:
                ex = (med(burst[0], "fwd+bwd.exposed") or 0.0) / med(burst[0])
                out["targets"].append({"target": f"burst exposed <= 10 %, P={P}, {dt}", "ok": ex <= 0.10,
                                       "value": ex})
                lines.append(f"  target burst exposed communication <= 10 %: {100 * ex:.1f} % "
                             f"{verdict(ex <= 0.10)}")

    # Emulated slow ranks: each case beside the same case without (same strategy, P, T, dtype).
    if slowed:
        lines.append("\nemulated slow rank (bench dist --emulate-slow-rank; medians over rounds): pass seconds, "
                     "exposed, beyond the busiest rank; the same case without a slow rank after '|'")
        for c in sorted(slowed):
            rs = slowed[c]
            key = (rs[0].get("strategy"), rs[0].get("ranks"), rs[0].get("threads"), rs[0].get("dtype"))
            base = next((b for b in stats if meta[b][:4] == key), None)
            for p in ("fwd", "bwd"):
                pr = [r for r in rs if r.get("pass") == p]
                if not pr:
                    continue
                sec = statistics.median(r["seconds"] for r in pr)
                ex = statistics.median(r.get("exposed_comm_seconds", 0.0) for r in pr)
                bey = statistics.median(r.get("exposed_beyond_busiest_seconds", 0.0) for r in pr)
                line = (f"  {c} (rank {rs[0].get('slow_ranks')} x{rs[0].get('slow_factor')}) {p}: {sec:.3f} s, "
                        f"exposed {ex:.3f}, beyond {bey:.3f}")
                if base:
                    line += (f"  | {med(base, p + '.seconds') or 0:.3f} s, exposed {med(base, p + '.exposed') or 0:.3f},"
                             f" beyond {med(base, p + '.beyond') or 0:.3f}")
                lines.append(line)
                out.setdefault("slowed", {}).setdefault(c, {})[p] = {"seconds": sec, "exposed": ex, "beyond": bey}

    # Efficiency of burst against P = 1 (same dtype and S).
    p1 = {meta[c][3]: c for c in stats if meta[c][0] == "burst" and meta[c][1] == 1}
    lines.append("\nburst efficiency against P = 1 (median seconds P1 / (P x median seconds P)); the cores' "
                 "ceiling (FMA probe per core with all P busy / with one busy, medians over rounds) and the "
                 "efficiency over it:")
    for c in sorted(stats, key=lambda c: (str(meta[c][3]), meta[c][1])):
        strategy, P, T, dt, S = meta[c]
        if strategy != "burst" or T != 1 or P == 1 or dt not in p1:
            continue
        eff = med(p1[dt]) / (P * med(c))
        line = f"  {dt} P = {P}: {eff:.2f} (P1 {med(p1[dt]):.2f} s)"
        one, busy = med(p1[dt], "fma_all_busy"), med(c, "fma_all_busy")
        if one and busy:
            ceiling = busy / one
            out["cases"][c]["core_ceiling"] = ceiling
            out["cases"][c]["efficiency_over_ceiling"] = eff / ceiling
            line += f"; cores' ceiling {ceiling:.2f} ({busy:.0f} / {one:.0f} GFLOP/s), over it {eff / ceiling:.2f}"
        lines.append(line)
        if P == 16:
            out["targets"].append({"target": f"burst efficiency >= 0.80 at P=16, {dt}", "ok": eff >= 0.80,
                                   "value": eff})
            lines.append(f"  target efficiency >= 0.80: {verdict(eff >= 0.80)}")

    # Ranks x threads: measured (burst fp32) and the calibrated model's recommendation.
    measured = {}
    for c in stats:
        strategy, P, T, dt, S = meta[c]
        if strategy == "burst" and dt in ("f32", "fp32") and P * T == host.get("cores_used", 16):
            measured[(P, T)] = med(c)
    sims = [r for r in recs if r.get("bench") == "simulate_split" and r.get("case") == "splits_burst_calibrated"]
    if not sims:
        sims = [r for r in recs if r.get("bench") == "simulate_split" and r.get("case") == "splits_burst"]
    if measured:
        lines.append("\nranks x threads, burst fp32 (measured median fwd+bwd seconds; model):")
        predicted = {(r["ranks_per_node"], r["threads"]): r for r in sims}
        for k in sorted(measured, key=measured.get):
            p = predicted.get(k, {})
            lines.append(f"  {k[0]:2d} x {k[1]:2d}: {measured[k]:.3f} s; model {p.get('seconds', float('nan')):.3f} s"
                         f" (eff fwd {p.get('efficiency_forward', float('nan')):.2f},"
                         f" bwd {p.get('efficiency_backward', float('nan')):.2f})"
                         + ("  <- recommended" if p.get("recommended") else ""))
        rec = next(((r["ranks_per_node"], r["threads"]) for r in sims if r.get("recommended")), None)
        best = min(measured, key=measured.get)
        ok = None
        if rec is not None and rec in measured:
            ok = measured[rec] <= 1.05 * measured[best]
        out["targets"].append({"target": "simulate's split within 5 % of the fastest measured", "ok": ok,
                               "recommended": rec, "fastest": best})
        lines.append(f"  target recommended {rec} within 5 % of fastest {best}: {verdict(ok)}")

    # Kernel thread scaling (the calibration's bench kernel records).
    ks = [r for r in recs if r.get("bench") == "kernel" and str(r.get("case", "")).startswith("kernel_threads")]
    if ks:
        lines.append("\nkernel thread scaling (GFLOP/s; rate / (T x 1-thread rate)):")
        one = {(r.get("pass"), r.get("dtype")): r["gflops"] for r in ks if r.get("threads") == 1}
        for r in sorted(ks, key=lambda r: (str(r.get("dtype")), str(r.get("pass")), r.get("threads"))):
            base = one.get((r.get("pass"), r.get("dtype")))
            sc = r["gflops"] / (r["threads"] * base) if base else float("nan")
            lines.append(f"  {r.get('dtype')} {r.get('pass')} T = {r['threads']:2d}: {r['gflops']:8.1f}  ({sc:.2f})")
    # Round 1's timelines: is a slow rank a slow core? Per case and rank, the mean compute seconds
    # of a full backward step (steps 1 .. P-1) beside the rank's FMA rate with every core busy
    # (bench dist's probe), and their correlation over the ranks: step time against 1 / rate.
    tls = [r for r in recs if r.get("bench") == "timeline" and "case" in r]
    steps = collections.defaultdict(lambda: collections.defaultdict(list))
    fma = collections.defaultdict(dict)
    for r in tls:
        P = r.get("ranks", 0)
        if r.get("pass") != "bwd" or r.get("whole_pass") or not 1 <= r.get("step", -1) <= P - 1:
            continue
        steps[r["case"]][r["rank"]].append(r["compute_seconds"])
        if r.get("fma_all_busy_gflops_rank"):
            fma[r["case"]][r["rank"]] = r["fma_all_busy_gflops_rank"]
    if steps:
        lines.append("\nround-1 timelines, backward: per rank the mean compute seconds of a full step and the "
                     "rank's FMA rate with every core busy; corr = correlation over the ranks of step time "
                     "with 1 / rate (near 1: the slow ranks are the slow cores)")
        out["timelines"] = {}
        for c in sorted(steps):
            ranks = sorted(steps[c])
            t = [statistics.mean(steps[c][k]) for k in ranks]
            f = [fma[c].get(k) for k in ranks]
            slow, fast = ranks[t.index(max(t))], ranks[t.index(min(t))]
            line = (f"  {c}: step {min(t):.3f} s (rank {fast}) .. {max(t):.3f} s (rank {slow}), "
                    f"max/mean {max(t) / statistics.mean(t):.2f}")
            entry = {"step_seconds": dict(zip(ranks, t)), "fma_all_busy": dict(zip(ranks, f))}
            if all(f):
                line += f"; FMA all busy {min(f):.0f} .. {max(f):.0f} GFLOP/s (rank {slow}: {fma[c][slow]:.0f})"
            if all(f) and len(ranks) > 2:
                try:
                    corr = statistics.correlation(t, [1.0 / x for x in f])
                except statistics.StatisticsError:  # a constant series
                    corr = float("nan")
                entry["corr"] = corr
                line += f"; corr {corr:.2f}"
            out["timelines"][c] = entry
            lines.append(line)

    skipped = [r for r in recs if r.get("check") in ("skipped", "round_skipped")]
    if skipped:
        lines.append(f"\n{len(skipped)} cases/rounds skipped (budget or shape): "
                     + ", ".join(str(r.get("case", r.get("round", "?"))) for r in skipped[:12]))
    failed = [r for r in recs if r.get("check") == "case" and r.get("ok") is False]
    if failed:
        lines.append(f"{len(failed)} cases failed: " + ", ".join(r["case"] for r in failed[:12]))
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
