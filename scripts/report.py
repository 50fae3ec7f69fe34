#!/usr/bin/python3
"""burst report: JSON lines from `burst bench matrix` (and optionally `burst simulate`) ->
PNG figures and a markdown table.

Usage: /usr/bin/python3 scripts/report.py RESULTS.jsonl [MORE.jsonl ...] -o OUTDIR
Figures (one PNG each, MPLBACKEND=Agg):
  gflops_<pass>_P<P>.png   GFLOP/s per rank (mask-area FLOPs) vs sequence length, one panel per
                           mask, one line per strategy/layout
  balance_<pass>_P<P>.png  max/mean per-rank compute at the longest length, per mask and method
  exposed_<pass>_P<P>.png  exposed communication as a share of the time, vs length
  memory_<pass>_P<P>.png   peak memory per rank vs length
  predicted_vs_measured.png  when records carry predicted_seconds
and report.md: one table row per case (skipped cases with their reason).
Records are the matrix benchmark's: bench="matrix", strategy, layout, mask, S_global, P, pass,
status ("ok" | "skipped"), seconds, gflops_per_rank, bytes_sent_per_rank, exposed_comm_seconds,
balance, peak_memory_bytes, max_error, [predicted_seconds], reason.
"""
import argparse
import collections
import json
import math
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or not line.startswith("{"):
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    print(f"report: {path}:{n}: skipped malformed line ({e})", file=sys.stderr)
    return records


def method(r):
    dtype = r.get("dtype", "f32")
    return f"{r.get('strategy', '?')}/{r.get('layout', '?')}" + ("" if dtype == "f32" else f"/{dtype}")


def grid(n):
    cols = min(4, max(1, n))
    return cols, int(math.ceil(n / cols))


def panel_figure(groups, title, ylabel, value, path, logy=False):
    """groups: mask -> list of records (one P, one pass). One panel per mask, one line per method."""
    masks = sorted(groups)
    cols, rows = grid(len(masks))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(masks):]:
        ax.axis("off")
    for ax, mask in zip(axes.flat, masks):
        by_method = collections.defaultdict(list)
        for r in groups[mask]:
            v = value(r)
            if v is not None:
                by_method[method(r)].append((r["S_global"], v))
        for m, pts in sorted(by_method.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m)
        ax.set_title(mask, fontsize=9)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("S_global")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    handles, labels = [], []
    for ax in axes.flat:
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def balance_figure(groups, title, path):
    masks = sorted(groups)
    methods = sorted({method(r) for rs in groups.values() for r in rs})
    if not masks or not methods:
        return
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(masks) * max(1, len(methods)) / 2), 4))
    width = 0.8 / len(methods)
    for k, m in enumerate(methods):
        xs, ys = [], []
        for i, mask in enumerate(masks):
            rs = [r for r in groups[mask] if method(r) == m and r.get("balance") is not None]
            if rs:
                longest = max(rs, key=lambda r: r["S_global"])
                xs.append(i + k * width)
                ys.append(longest["balance"])
        ax.bar(xs, ys, width=width, label=m)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(masks))])
    ax.set_xticklabels(masks, rotation=45, ha="right", fontsize=8)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel("max / mean per-rank compute")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def predicted_figure(records, path):
    pts = [(r["seconds"], r["predicted_seconds"], method(r), r.get("mask", "?"))
           for r in records if r.get("status") == "ok" and r.get("predicted_seconds")]
    if not pts:
        return False
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for m in sorted({p[2] for p in pts}):
        sel = [p for p in pts if p[2] == m]
        ax.scatter([p[0] for p in sel], [p[1] for p in sel], label=m, s=18)
    lo = min(min(p[0], p[1]) for p in pts)
    hi = max(max(p[0], p[1]) for p in pts)
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=0.8)
    ax.plot(xs, [x * 1.2 for x in xs], color="gray", lw=0.6, ls="--")
    ax.plot(xs, [x * 0.8 for x in xs], color="gray", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured seconds")
    ax.set_ylabel("predicted seconds (cost model)")
    ax.set_title("cost model vs measurement (dashed: ±20 %)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def markdown(records, figures):
    lines = ["# burst benchmark report", ""]
    for f in figures:
        lines.append(f"![{f}]({f})")
    lines += ["", "| strategy | layout | dtype | mask | P | S_global | pass | status | ms | GFLOP/s/rank | "
              "MiB sent/rank | exposed % | balance | peak MiB | max err | predicted ms |",
              "|---|---|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    key = lambda r: (r.get("mask", ""), r.get("P", 0), r.get("pass", ""), r.get("S_global", 0), method(r))
    for r in sorted(records, key=key):
        ok = r.get("status") == "ok"
        sec = r.get("seconds")
        exposed = (100.0 * r["exposed_comm_seconds"] / sec) if ok and sec and r.get("exposed_comm_seconds") is not None else None
        status = "ok" if ok else f"skipped: {r.get('reason', '')}"
        lines.append("| " + " | ".join([
            str(r.get("strategy", "")), str(r.get("layout", "")), str(r.get("dtype", "f32")), str(r.get("mask", "")),
            str(r.get("P", "")), str(r.get("S_global", "")), str(r.get("pass", "")), status,
            fmt(sec * 1e3 if ok and sec else None, ".3f"), fmt(r.get("gflops_per_rank") if ok else None, ".1f"),
            fmt(r["bytes_sent_per_rank"] / 2**20 if ok and r.get("bytes_sent_per_rank") is not None else None, ".2f"),
            fmt(exposed, ".1f"), fmt(r.get("balance") if ok else None, ".3f"),
            fmt(r["peak_memory_bytes"] / 2**20 if ok and r.get("peak_memory_bytes") else None, ".1f"),
            fmt(r.get("max_error") if ok else None, ".2e"),
            fmt(r["predicted_seconds"] * 1e3 if r.get("predicted_seconds") else None, ".3f")]) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="JSON lines files")
    ap.add_argument("-o", "--out", default="report", help="output directory")
    args = ap.parse_args(argv)
    records = [r for r in load(args.inputs) if r.get("bench") == "matrix"]
    if not records:
        print("report: no matrix records (bench=\"matrix\") in the inputs", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    ok = [r for r in records if r.get("status") == "ok"]
    figures = []
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in ok:
        by[(r.get("pass", "fwd"), r.get("P", 1))][r.get("mask", "?")].append(r)
    for (pss, P), groups in sorted(by.items()):
        tag = f"{pss}_P{P}"
        specs = [
            (f"gflops_{tag}.png", f"GFLOP/s per rank (mask-area FLOPs), {pss}, P={P}", "GFLOP/s",
             lambda r: r.get("gflops_per_rank"), False),
            (f"exposed_{tag}.png", f"exposed communication share, {pss}, P={P}", "exposed / time",
             lambda r: r["exposed_comm_seconds"] / r["seconds"] if r.get("seconds") and r.get("exposed_comm_seconds") is not None else None, False),
            (f"memory_{tag}.png", f"peak memory per rank, {pss}, P={P}", "MiB",
             lambda r: r["peak_memory_bytes"] / 2**20 if r.get("peak_memory_bytes") else None, True),
        ]
        for name, title, ylabel, value, logy in specs:
            panel_figure(groups, title, ylabel, value, os.path.join(args.out, name), logy)
            figures.append(name)
        name = f"balance_{tag}.png"
        balance_figure(groups, f"compute balance at the longest length, {pss}, P={P}", os.path.join(args.out, name))
        figures.append(name)
    if predicted_figure(records, os.path.join(args.out, "predicted_vs_measured.png")):
        figures.append("predicted_vs_measured.png")
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(markdown(records, figures))
    print(f"report: {len(records)} records ({len(ok)} ok) -> {args.out}/report.md and {len(figures)} figures",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
