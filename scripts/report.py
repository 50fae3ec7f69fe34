#!/usr/bin/env python3
"""burst report: JSON lines from `burst bench matrix` (and optionally `burst simulate`), and
`burst bench dist --timeline` records -> PNG figures and a markdown table.

Usage: python3 scripts/report.py RESULTS.jsonl [MORE.jsonl ...] -o OUTDIR
Figures (one PNG each, MPLBACKEND=Agg):
  gflops_<pass>_P<P>.png   GFLOP/s per rank (mask-area FLOPs) vs sequence length, one panel per
                           mask, one line per strategy/layout/dtype (colour: strategy, marker:
                           layout, line style: dtype); PNGs reduced to a 256-colour palette
  balance_<pass>_P<P>.png  heat map, method x mask: max/mean per-rank compute at the longest length
  exposed_<pass>_P<P>.png  exposed communication as a share of the time, vs length
  memory_<pass>_P<P>.png   peak memory per rank vs length
  predicted_vs_measured.png  when records carry predicted_seconds
  timeline_<strategy>_<layout>_<mask>_S<S>_P<P>.png  from `burst bench dist --timeline` records
                           (bench="timeline"): per pass, one row per rank, its steps laid end to
                           end (copy, compute, wait) in the last timed repeat — a Gantt chart of
                           where each rank's time goes
and report.md: one table row per case (skipped cases with their reason), and per timeline one
row per pass: compute balance by wall and by thread CPU time (max/mean over ranks), the largest
wait and copy per rank, and bytes per rank.
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


# One colour per strategy (scripts/publish_headline.py imports these, so colours agree across the
# published figures), one marker per layout, one line style per dtype: with 7
# strategies x 4 layouts x 2 dtypes in a panel, a colour per method would repeat after ten.
ORDER = ["burst", "ring", "allgather", "ulysses", "usp", "distflash", "headpar"]
LAYOUT_MARKERS = {"contiguous": "o", "zigzag": "s", "striped": "^", "balanced": "D"}
DTYPE_LINES = {"f32": "-", "bf16": "--", "f16": ":"}


def strategy_order(strategy):
    """Sort key: ORDER first, any other strategy after it by name."""
    return (ORDER.index(strategy) if strategy in ORDER else len(ORDER), strategy)


def strategy_color(strategy):
    i = ORDER.index(strategy) if strategy in ORDER else len(ORDER) + sum(map(ord, strategy)) % 3
    return f"C{i}"


def legend_handles(recs):
    """Proxy artists: strategies (colour), layouts (marker), dtypes (line style) present in recs."""
    from matplotlib.lines import Line2D
    strategies = sorted({r.get("strategy", "?") for r in recs}, key=strategy_order)
    layouts = [lay for lay in LAYOUT_MARKERS if any(r.get("layout") == lay for r in recs)]
    dtypes = [d for d in DTYPE_LINES if any(r.get("dtype", "f32") == d for r in recs)]
    h = [Line2D([], [], color=strategy_color(s), lw=2, label=s) for s in strategies]
    h += [Line2D([], [], color="gray", marker=LAYOUT_MARKERS[lay], ls="none", label=lay) for lay in layouts]
    if len(dtypes) > 1:
        h += [Line2D([], [], color="gray", ls=DTYPE_LINES[d], label=d) for d in dtypes]
    return h


def save(fig, path):
    """PNG at 110 dpi, reduced to a 256-colour palette (a fifth of the bytes; committed figures)."""
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    try:
        from PIL import Image
    except ImportError:
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        return
    buf.seek(0)
    Image.open(buf).convert("RGB").quantize(colors=256).save(path, optimize=True)


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
        first = {}
        for r in groups[mask]:
            v = value(r)
            if v is not None:
                by_method[method(r)].append((r["S_global"], v))
                first.setdefault(method(r), r)
        for m, pts in sorted(by_method.items()):
            pts.sort()
            r = first[m]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=strategy_color(r.get("strategy", "?")),
                    marker=LAYOUT_MARKERS.get(r.get("layout"), "o"), ls=DTYPE_LINES.get(r.get("dtype", "f32"), "-"),
                    markersize=4, lw=1.1, alpha=0.85)
        ax.set_title(mask, fontsize=9)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("S_global")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    handles = legend_handles([r for rs in groups.values() for r in rs])
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 0.97))
    save(fig, path)


def balance_figure(groups, title, path):
    """A heat map: one row per method, one column per mask, the cell max/mean per-rank compute at
    the longest length measured (1.0 = perfect balance), the value written in the cell."""
    masks = sorted(groups)
    methods = sorted({method(r) for rs in groups.values() for r in rs},
                     key=lambda m: (strategy_order(m.split("/")[0]), m))
    if not masks or not methods:
        return
    grid_values = [[math.nan] * len(masks) for _ in methods]
    for i, m in enumerate(methods):
        for j, mask in enumerate(masks):
            rs = [r for r in groups[mask] if method(r) == m and r.get("balance") is not None]
            if rs:
                grid_values[i][j] = max(rs, key=lambda r: r["S_global"])["balance"]
    fig, ax = plt.subplots(figsize=(2.2 + 0.62 * len(masks), 1.6 + 0.24 * len(methods)))
    finite = [v for row in grid_values for v in row if not math.isnan(v)]
    top = max([1.05] + finite)
    im = ax.imshow(grid_values, cmap="viridis_r", vmin=1.0, vmax=top, aspect="auto")
    for i, row in enumerate(grid_values):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if v > 1.0 + 0.6 * (top - 1.0) else "black")
    ax.set_xticks(range(len(masks)))
    ax.set_xticklabels(masks, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(methods)))
    ax.set_yticklabels(methods, fontsize=7)
    for label, m in zip(ax.get_yticklabels(), methods):
        label.set_color(strategy_color(m.split("/")[0]))
    fig.colorbar(im, ax=ax, label="max / mean per-rank compute", fraction=0.04, pad=0.02)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save(fig, path)


def predicted_figure(records, path):
    pts = [(r["seconds"], r["predicted_seconds"], method(r), r.get("mask", "?"))
           for r in records if r.get("status") == "ok" and r.get("predicted_seconds")]
    if not pts:
        return False
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for m in sorted({p[2] for p in pts}):
        sel = [p for p in pts if p[2] == m]
        strategy, layout, *dtype = m.split("/")
        ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=18, color=strategy_color(strategy),
                   marker=LAYOUT_MARKERS.get(layout, "o"), alpha=0.5 if dtype else 0.85)
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
    ax.legend(handles=legend_handles([r for r in records if r.get("status") == "ok" and r.get("predicted_seconds")]),
              fontsize=7)
    fig.tight_layout()
    save(fig, path)
    return True


TIMELINE_PARTS = [("copy_seconds", "copy", "#9467bd"), ("compute_seconds", "compute", "#2ca02c"),
                  ("wait_seconds", "wait", "#d62728")]


def timeline_key(r):
    return (r.get("strategy", "?"), r.get("layout", "?"), r.get("mask", "?"), r.get("S_global", 0),
            r.get("ranks", 1), r.get("dtype", "f32"), r.get("threads", 1))


def timeline_groups(records):
    """(config key) -> pass -> rank -> step records of the last timed repeat, in step order."""
    out = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    last = collections.defaultdict(int)
    for r in records:
        last[timeline_key(r)] = max(last[timeline_key(r)], r.get("repeat", 0))
    for r in records:
        if r.get("repeat", 0) == last[timeline_key(r)]:
            out[timeline_key(r)][r.get("pass", "fwd")][r.get("rank", 0)].append(r)
    for passes in out.values():
        for ranks in passes.values():
            for steps in ranks.values():
                steps.sort(key=lambda r: r.get("step", 0))
    return out


def balance(values):
    mean = sum(values) / len(values) if values else 0
    return max(values) / mean if mean > 0 else None


def timeline_figure(key, passes, path):
    """One panel per pass: rank rows, each step's copy / compute / wait bars end to end."""
    names = sorted(passes)
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 0.9 + 0.32 * key[4] * len(names) + 0.6 * len(names)),
                             squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        ranks = passes[name]
        for rank, steps in sorted(ranks.items()):
            x = 0.0
            for i, st in enumerate(steps):
                for field, _, colour in TIMELINE_PARTS:
                    w = st.get(field) or 0.0
                    if w > 0:
                        ax.barh(rank, w, left=x, height=0.7, color=colour, edgecolor="white" if i % 2 else colour,
                                linewidth=0.3)
                    x += w
            wall = steps[0].get("pass_seconds") if steps else None
            if wall:
                ax.plot([wall, wall], [rank - 0.4, rank + 0.4], color="black", lw=1)
        ax.set_yticks(sorted(ranks))
        ax.invert_yaxis()
        ax.set_ylabel("rank")
        ax.set_xlabel("seconds (steps end to end; black tick: the pass's wall time)")
        comp = [sum(s.get("compute_seconds") or 0 for s in st) for st in ranks.values()]
        ax.set_title(f"{key[0]}/{key[1]} {key[2]} S={key[3]} P={key[4]} {key[5]} threads={key[6]}: {name}, "
                     f"compute balance {fmt(balance(comp), '.3f')}", fontsize=9)
    from matplotlib.patches import Patch
    axes[0, 0].legend(handles=[Patch(color=c, label=lab) for _, lab, c in TIMELINE_PARTS], fontsize=7,
                      loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    save(fig, path)


def timeline_rows(groups):
    lines = ["", "## Timelines (last timed repeat)", "",
             "| strategy | layout | mask | S_global | P | dtype | threads | pass | steps/rank | balance (wall) | "
             "balance (CPU) | max wait s | max copy s | MiB sent/rank (max) |",
             "|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for key, passes in sorted(groups.items()):
        for name, ranks in sorted(passes.items()):
            per = list(ranks.values())
            tot = lambda f: [sum(s.get(f) or 0 for s in st) for st in per]
            cpu = [sum(s.get("compute_cpu_seconds") or 0 for s in st) for st in per]
            lines.append("| " + " | ".join([
                str(key[0]), str(key[1]), str(key[2]), str(key[3]), str(key[4]), str(key[5]), str(key[6]), name,
                str(max(len(st) for st in per)), fmt(balance(tot("compute_seconds")), ".3f"),
                fmt(balance(cpu) if any(cpu) else None, ".3f"), fmt(max(tot("wait_seconds")), ".4f"),
                fmt(max(tot("copy_seconds")), ".4f"), fmt(max(tot("bytes_sent")) / 2**20, ".2f")]) + " |")
    return lines


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
    loaded = load(args.inputs)
    records = [r for r in loaded if r.get("bench") == "matrix"]
    timelines = timeline_groups([r for r in loaded if r.get("bench") == "timeline"])
    if not records and not timelines:
        print("report: no matrix (bench=\"matrix\") or timeline (bench=\"timeline\") records in the inputs",
              file=sys.stderr)
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
    for key, passes in sorted(timelines.items()):
        name = f"timeline_{key[0]}_{key[1]}_{key[2]}_S{key[3]}_P{key[4]}_{key[5]}_t{key[6]}.png"
        timeline_figure(key, passes, os.path.join(args.out, name))
        figures.append(name)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        text = markdown(records, figures)
        if timelines:
            text += "\n".join(timeline_rows(timelines)) + "\n"
        f.write(text)
    print(f"report: {len(records)} records ({len(ok)} ok) -> {args.out}/report.md and {len(figures)} figures",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
