#!/usr/bin/env python3
"""The published comparison's headline: forward + backward time of every strategy (its best layout)
relative to burst's, per benchmark mask, at the largest rank count and length measured (fp32).

Usage: python3 scripts/publish_headline.py OUTDIR
Reads OUTDIR/matrix_P*_*.jsonl (`burst bench matrix` records), writes OUTDIR/headline.png and
OUTDIR/headline.md (the same numbers as a table, with the layout each strategy's best time used).
A strategy that skipped a mask (unsupported layout or mask) has no bar for it.
"""
import collections
import glob
import json
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import ORDER, save, strategy_color  # noqa: E402  (the report's colours and PNG palette)


def main(out):
    recs = []
    for path in sorted(glob.glob(os.path.join(out, "matrix_P*_*.jsonl"))):
        recs += [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    ok = [r for r in recs if r.get("bench") == "matrix" and r.get("status") == "ok" and r.get("dtype", "fp32") in ("fp32", "f32")]
    if not ok:
        print("headline: no fp32 matrix records", file=sys.stderr)
        return 1
    P = max(r["P"] for r in ok)
    S = max(r["S_global"] for r in ok if r["P"] == P)
    # (strategy, layout, mask) -> {pass: seconds}
    t = collections.defaultdict(dict)
    for r in ok:
        if r["P"] == P and r["S_global"] == S:
            t[(r["strategy"], r["layout"], r["mask"])][r["pass"]] = r["seconds"]
    best = {}  # (strategy, mask) -> (seconds fwd+bwd, layout)
    for (s, lay, m), v in t.items():
        if "fwd" in v and "bwd" in v:
            tot = v["fwd"] + v["bwd"]
            if (s, m) not in best or tot < best[(s, m)][0]:
                best[(s, m)] = (tot, lay)
    masks = sorted({m for (_, m) in best if ("burst", m) in best})
    strategies = [s for s in ORDER if any((s, m) in best for m in masks)]
    strategies += sorted({s for (s, _) in best} - set(strategies))
    fig, ax = plt.subplots(figsize=(max(8, 1.0 * len(masks)), 4.5))
    width = 0.8 / max(1, len(strategies))
    for i, s in enumerate(strategies):
        xs, ys = [], []
        for j, m in enumerate(masks):
            if (s, m) in best:
                xs.append(j + (i - (len(strategies) - 1) / 2) * width)
                ys.append(best[(s, m)][0] / best[("burst", m)][0])
        ax.bar(xs, ys, width, label=s, color=strategy_color(s))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(masks)))
    ax.set_xticklabels(masks, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("forward + backward time / burst's (lower is faster)")
    ax.set_title(f"P = {P}, S = {S}, fp32, each strategy at its fastest layout")
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    save(fig, os.path.join(out, "headline.png"))
    lines = [f"# Headline: P = {P}, S = {S}, fp32 — forward + backward seconds (best layout) and ratio to burst", "",
             "| mask | " + " | ".join(strategies) + " |", "|---|" + "---:|" * len(strategies)]
    for m in masks:
        cells = []
        for s in strategies:
            if (s, m) in best:
                sec, lay = best[(s, m)]
                cells.append(f"{sec * 1e3:.1f} ms ({sec / best[('burst', m)][0]:.2f}×, {lay})")
            else:
                cells.append("—")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    open(os.path.join(out, "headline.md"), "w").write("\n".join(lines) + "\n")
    print(f"headline: {len(masks)} masks x {len(strategies)} strategies at P={P}, S={S} -> {out}/headline.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/results"))
