#!/usr/bin/python3
"""Figure and markdown table of scripts/bench_multinode.sh's JSON lines (docs/multinode.md).

Usage: /usr/bin/python3 scripts/plot_multinode.py bench_multinode.jsonl docs/multinode_bench.png
Prints the table (one row per case and link rate) on stdout, then two verdicts: the cost model's
predictions within ±25 % (the fraction of cases with predicted_seconds), and the ≤ 0.8x target
(burst double against the flat ring where the flat ring's exposed communication is ≥ 30 % of its
time). The figure: fwd+bwd seconds per case against the inter-node link rate, the exposed
communication hatched.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(r):
    if r["strategy"] in ("burst", "ring", "usp"):
        name = f'{r["strategy"]} {"double" if r["double_ring"] else "flat"}'
    else:
        name = r["strategy"]
    return name + ("" if r.get("overlap", True) else " no-overlap")


def rate(g):
    return "unthrottled" if g == 0 else f"{g:g} Gbit/s"


def main(src, png):
    rows = [json.loads(line) for line in open(src) if line.strip()]
    rates = sorted({r["inter_gbit"] for r in rows}, key=lambda g: (g != 0, -g))
    cases = list(dict.fromkeys(label(r) for r in rows))
    by = {(label(r), r["inter_gbit"]): r for r in rows}
    print("| link | case | fwd+bwd s | exposed comm s | exposed share | bwd exposed | inter-node MB | "
          "intra-node MB | vs flat ring | predicted s | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for g in rates:
        flat = by.get(("ring flat", g))
        for c in cases:
            r = by.get((c, g))
            if r is None:
                continue
            ratio = f'{r["seconds"] / flat["seconds"]:.2f}x' if flat else "-"
            pred = r.get("predicted_seconds")
            pred_text = f'{pred:.2f} ({pred / r["seconds"]:.2f}x)' if pred else "-"
            bwd = r.get("backward_exposed_comm_seconds")
            bwd_text = f'{bwd:.2f} of {r["backward_seconds"]:.2f} s' if bwd is not None else "-"
            print(f'| {rate(g)} | {c} | {r["seconds"]:.2f} | {r["exposed_comm_seconds"]:.2f} | '
                  f'{r["exposed_comm_seconds"] / r["seconds"]:.0%} | {bwd_text} | {r["inter_node_bytes"] / 1e6:.1f} | '
                  f'{r["intra_node_bytes"] / 1e6:.1f} | {ratio} | {pred_text} | '
                  f'{r["load_before"]:.0f}-{r["load_after"]:.0f} |')
    predicted = [r for r in rows if r.get("predicted_seconds")]
    if predicted:
        within = [r for r in predicted if abs(r["predicted_seconds"] / r["seconds"] - 1) <= 0.25]
        print(f"\ncost model within ±25 %: {len(within)} of {len(predicted)} cases")
    for g in rates:
        flat, dbl = by.get(("ring flat", g)), by.get(("burst double", g))
        if flat and dbl:
            share = flat["exposed_comm_seconds"] / flat["seconds"]
            verdict = ("target applies" if share >= 0.3 else "target does not apply (< 30 %)")
            print(f"{rate(g)}: flat ring exposed {share:.0%}, burst double {dbl['seconds'] / flat['seconds']:.2f}x "
                  f"the flat ring: {verdict}")
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(cases)
    for i, c in enumerate(cases):
        xs = [k + i * width for k, g in enumerate(rates) if (c, g) in by]
        secs = [by[(c, g)]["seconds"] for g in rates if (c, g) in by]
        exp = [by[(c, g)]["exposed_comm_seconds"] for g in rates if (c, g) in by]
        ax.bar(xs, secs, width, label=c, color=f"C{i}")
        ax.bar(xs, exp, width, fill=False, hatch="///", edgecolor="black", linewidth=0)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(rates))])
    ax.set_xticklabels([rate(g) for g in rates])
    ax.set_ylabel("fwd+bwd seconds (hatched: exposed communication)")
    r0 = rows[0]["bench"]
    ax.set_title(f'2 emulated hosts x 2 ranks over TCP, causal S={r0["S_global"]} H={r0["H"]} D={r0["D"]}, '
                 f'inter-node link rate')
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
