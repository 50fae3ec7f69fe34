#!/usr/bin/env python3
"""Summary of a GPU host check (scripts/gpu_host_check.sh): the targets, each PASS / FAIL / MISSING.

Reads the check's JSON lines and prints one table with the numbers beside each verdict:
- step kernels: per (H, D), mask (full, causal) and pass (fwd, bwd), burst's TFLOP/s through the
  device seam (`burst bench kernel --device cuda`: the kernel the strategies run) over PyTorch's
  fastest SDPA backend in the same run on the same shape (bench/torch_sdpa.py --device cuda),
  at least 0.9; beside it, informative, burst's best kernel of cuda_step_bench's table (Fast,
  FastMma, cuDNN) on that shape;
- the long causal run (the largest S of the run, H 8, D 64): burst's forward + backward seconds
  at P = 1 over PyTorch's fastest forward + backward on the same S, at most 1.15; at P = 4
  ranks sharing the GPU, the time and the exposed communication reported;
- exactness: the cuda tests (test_cuda_attention, test_cuda_cudnn: the kernels against the fp64
  oracle; test_cuda_dist_np1..4: every strategy at P = 1..4), burst's error against fp64 within
  PyTorch's own on the same inputs (bench/gpu_exactness.py), the planted error caught, the
  Python functions on torch CUDA tensors (tests/py/test_cuda.py).
A target with no record to judge it is MISSING, with the reason (a step skipped, timed out or
failed, or never run). Exit status 0 whatever the verdicts (the table is the result).

Usage: scripts/gpu_summary.py CHECK.jsonl [--json SUMMARY.json]
       scripts/gpu_summary.py --ctest CTEST.log   (the log's per-test results as JSON lines,
                                                  {"check": "ctest", "test", "result", "seconds"})
"""
import argparse
import json
import re
import sys

from host_records import load  # scripts/host_records.py, beside this file

KERNEL_RATIO = 0.9    # each step kernel case >= 0.9x PyTorch's fastest backend
LONG_RATIO = 1.15     # the long causal run at P = 1 <= 1.15x PyTorch's fastest on the same S
CPU_DIFF = 0.05       # GPU kernel vs CPU kernel on the same bf16 inputs (tests/cli_gpu.py's bound)
LONG_MIN_SEQ = 65536  # the long run's S is at least this (1M; 65536 in a --quick run)
SHAPES = ((8, 64), (32, 128))
MASKS = ("full", "causal")
PASSES = ("fwd", "bwd")

_CTEST_LINE = re.compile(r"^\s*\d+/\d+\s+Test\s+#\d+:\s+(\S+)\s+\.*\s*(?:\*+)?\s*"
                         r"(Passed|Failed|Skipped|Timeout|Not Run|Exception[^0-9]*?)\s+([\d.]+)\s+sec")


def ctest_records(text):
    """One record per test line of a ctest log: result Passed, Failed, Skipped, Timeout,
    Not Run or Exception: ... (as ctest writes it)."""
    out = []
    for line in text.splitlines():
        m = _CTEST_LINE.match(line)
        if m:
            out.append({"check": "ctest", "test": m.group(1), "result": m.group(2).strip(),
                        "seconds": float(m.group(3))})
    return out


def verdict(ok):
    return "MISSING" if ok is None else ("PASS" if ok else "FAIL")


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


class Summary:
    def __init__(self, recs):
        self.recs = recs
        self.rows = []   # {"group", "target", "value", "bound", "verdict", "detail"}
        self.steps = {r.get("step"): r for r in recs if r.get("check") in ("step", "step_skipped")}
        # The steps with records of their own kind (ctest_cuda, pytest_cuda): how they ended.
        for r in recs:
            if r.get("check") in ("ctest_cuda", "pytest_cuda") and r.get("check") not in self.steps:
                rc = r.get("rc")
                self.steps[r["check"]] = dict(r, timed_out=rc in (124, 137),
                                              last_error=r.get("summary", ""))

    def add(self, group, target, ok, value=None, bound=None, detail=""):
        self.rows.append({"group": group, "target": target, "verdict": verdict(ok), "value": value,
                          "bound": bound, "detail": detail})

    def why_missing(self, *steps):
        """The reason a step's records are absent: its step record, else 'not run'."""
        for name in steps:
            r = self.steps.get(name)
            if r is None:
                continue
            if r.get("check") == "step_skipped":
                return f"{name}: skipped ({r.get('reason', '')})"
            if r.get("timed_out"):
                return f"{name}: timed out after {r.get('seconds')} s"
            if r.get("rc"):
                return f"{name}: exit {r.get('rc')} ({str(r.get('last_error', ''))[:120]})"
        return f"{steps[0]}: no record (not run)" if steps else "no record"

    # ---- step kernels -----------------------------------------------------------------------
    def kernel_seq(self):
        """The S of the kernel comparison: the most common S of the H 32 / full-and-causal
        bench kernel records and the torch records (32768; 8192 in a --quick run)."""
        seqs = [r["seq"] for r in self.recs if r.get("bench") == "kernel" and r.get("heads") == 32]
        seqs += [r["seq"] for r in self.recs if r.get("bench") == "torch_sdpa" and r.get("heads") == 32]
        return max(set(seqs), key=seqs.count) if seqs else None

    def torch_best(self, H, D, mask, pas, S):
        """PyTorch's fastest backend on (H, D, mask, pass, S): (tflops, backend), or None."""
        best = None
        for r in self.recs:
            if (r.get("bench") == "torch_sdpa" and r.get("device") == "cuda" and r.get("heads") == H and
                    r.get("dim") == D and r.get("mask") == mask and r.get("pass") == pas and
                    r.get("seq") == S and r.get("dtype") == "bf16" and r.get("tflops")):
                if best is None or r["tflops"] > best[0]:
                    best = (r["tflops"], r["backend"])
        return best

    def burst_kernel(self, H, D, mask, pas, S):
        for r in self.recs:
            if (r.get("bench") == "kernel" and r.get("device", "").startswith("cuda") and r.get("heads") == H and
                    r.get("dim") == D and r.get("mask") == mask and r.get("pass") == pas and r.get("seq") == S and
                    r.get("dtype") == "bf16" and r.get("tflops")):
                return r["tflops"]
        return None

    def burst_best(self, H, D, mask, pas, S):
        """burst's fastest kernel of cuda_step_bench's table on the shape: (tflops, kernel)."""
        key = "forward_tflops" if pas == "fwd" else "backward_tflops"
        best = None
        for r in self.recs:
            if (r.get("bench") == "cuda_step" and r.get("H") == H and r.get("D") == D and r.get("mask") == mask and
                    r.get("S") == S and r.get(key)):
                if best is None or r[key] > best[0]:
                    best = (r[key], r.get("kernel", "?"))
        return best

    def kernels(self):
        S = self.kernel_seq()
        for H, D in SHAPES:
            for mask in MASKS:
                for pas in PASSES:
                    name = f"step kernel H {H} D {D} {mask} {pas}"
                    if S is None:
                        self.add("kernels", name, None, detail=self.why_missing(
                            f"kernel_h{H}_d{D}_{mask}", "torch_sdpa"))
                        continue
                    burst = self.burst_kernel(H, D, mask, pas, S)
                    torch = self.torch_best(H, D, mask, pas, S)
                    best = self.burst_best(H, D, mask, pas, S)
                    extra = f"; best of cuda_step_bench: {best[1]} {best[0]:.0f}" + (
                        f" ({best[0] / torch[0]:.2f}x)" if torch else "") if best else ""
                    if burst is None or torch is None:
                        missing = [] if burst else [self.why_missing(f"kernel_h{H}_d{D}_{mask}")]
                        missing += [] if torch else [self.why_missing("torch_sdpa")]
                        self.add("kernels", f"{name} (S {S})", None, detail="; ".join(missing) + extra)
                        continue
                    ratio = burst / torch[0]
                    self.add("kernels", f"{name} (S {S})", ratio >= KERNEL_RATIO, ratio, f">= {KERNEL_RATIO}",
                             f"burst {burst:.0f} TFLOP/s, torch {torch[1]} {torch[0]:.0f}" + extra)

    # ---- the long run -----------------------------------------------------------------------
    def long_seq(self):
        """The long run's S: the largest causal H 8 / D 64 S of the records, if at least
        LONG_MIN_SEQ (the long run's is 1M, 65536 in a --quick run; the kernels' and the
        strategies' S are smaller and never stand in for it)."""
        seqs = [r["seq"] for r in self.recs if r.get("bench") == "kernel" and r.get("mask") == "causal" and
                r.get("heads") == 8 and r.get("dim") == 64]
        seqs += [r.get("S_global") for r in self.recs if r.get("bench") == "dist" and r.get("ranks") == 4 and
                 r.get("strategy") == "burst" and r.get("S_global")]
        seqs += [r["seq"] for r in self.recs if r.get("bench") == "torch_sdpa" and r.get("heads") == 8 and
                 r.get("mask") == "causal" and r.get("seq")]
        seqs = [S for S in seqs if S >= LONG_MIN_SEQ]
        return max(seqs) if seqs else None

    def long_run(self):
        S = self.long_seq()
        if S is None or S <= (self.kernel_seq() or 0):
            self.add("long run", "causal P = 1 fwd+bwd vs PyTorch's fastest", None,
                     detail=self.why_missing("long_p1", "long_torch"))
            self.add("long run", "causal P = 4 time and exposed communication", None,
                     detail=self.why_missing("long_p4"))
            return
        passes = {}
        for r in self.recs:
            if (r.get("bench") == "kernel" and r.get("seq") == S and r.get("mask") == "causal" and
                    r.get("heads") == 8 and r.get("dim") == 64 and r.get("seconds")):
                passes[r["pass"]] = r["seconds"]
        burst = passes["fwd"] + passes["bwd"] if "fwd" in passes and "bwd" in passes else None
        torch = {}
        for r in self.recs:
            if (r.get("bench") == "torch_sdpa" and r.get("seq") == S and r.get("mask") == "causal" and
                    r.get("heads") == 8 and r.get("dim") == 64 and r.get("seconds")):
                torch.setdefault(r["backend"], {})[r["pass"]] = r["seconds"]
        totals = {b: p["fwd"] + p["bwd"] for b, p in torch.items() if "fwd" in p and "bwd" in p}
        best = min(totals.items(), key=lambda kv: kv[1]) if totals else None
        name = f"causal S {S} P = 1 fwd+bwd vs PyTorch's fastest"
        if burst is None or best is None:
            why = []
            if burst is None:
                why.append(self.why_missing("long_p1") +
                           (f" (forward {passes['fwd']:.2f} s recorded)" if "fwd" in passes else ""))
            if best is None:
                why.append(self.why_missing("long_torch") + " (PyTorch not measured on this S)")
            self.add("long run", name, None, detail="; ".join(why))
        else:
            ratio = burst / best[1]
            self.add("long run", name, ratio <= LONG_RATIO, ratio, f"<= {LONG_RATIO}",
                     f"burst {burst:.2f} s (fwd {passes['fwd']:.2f}), torch {best[0]} {best[1]:.2f} s "
                     f"(fastest of {', '.join(sorted(totals))})")
        p4 = next((r for r in self.recs if r.get("bench") == "dist" and r.get("ranks") == 4 and
                   r.get("S_global") == S and r.get("strategy") == "burst" and r.get("pass") == "fwd+bwd"), None)
        name = f"causal S {S} P = 4 time and exposed communication"
        if p4 is None or p4.get("seconds") is None or p4.get("exposed_comm_seconds") is None:
            self.add("long run", name, None, detail=self.why_missing("long_p4"))
        else:
            gpu = p4.get("gpu_seconds")
            ratio = p4["seconds"] / burst if burst else None
            self.add("long run", name, True, p4["seconds"], "reported",
                     f"{p4['seconds']:.2f} s wall, GPU {fmt(gpu)} s, exposed communication "
                     f"{p4['exposed_comm_seconds']:.2f} s" + (f", {ratio:.2f}x P = 1" if ratio else ""))

    # ---- exactness --------------------------------------------------------------------------
    def ctest(self, test):
        return next((r for r in self.recs if r.get("check") == "ctest" and r.get("test") == test), None)

    def ctest_row(self, target, test):
        r = self.ctest(test)
        if r is None:
            self.add("exactness", target, None, detail=f"{test}: no result ({self.why_missing('ctest_cuda')})")
        elif r["result"] in ("Skipped", "Not Run"):
            self.add("exactness", target, None, detail=f"{test}: {r['result']}")
        else:
            self.add("exactness", target, r["result"] == "Passed", detail=f"{test}: {r['result']} "
                     f"({r['seconds']:.1f} s)")

    def exactness(self):
        self.ctest_row("kernels vs the fp64 oracle (every mask, GQA, D 64/128, fwd+bwd)", "test_cuda_attention")
        self.ctest_row("cuDNN backend vs the fp64 oracle", "test_cuda_cudnn")
        errs = [r for r in self.recs if r.get("bench") == "gpu_exactness" and r.get("device") == "cuda"]
        cases = sorted({(r["mask"], r["heads"], r["dim"], r["seq"]) for r in errs if "mask" in r})
        if not cases:
            skipped = next((r.get("skipped") for r in errs if r.get("skipped")), None)
            self.add("exactness", "burst within PyTorch's error vs fp64 (same bf16 inputs)", None,
                     detail=skipped or self.why_missing("exactness"))
        for mask, H, D, S in cases:
            mine = [r for r in errs if (r.get("mask"), r.get("heads"), r.get("dim"), r.get("seq")) == (mask, H, D, S)]
            burst = next((r for r in mine if r.get("impl") == "burst" and "out_err" in r), None)
            torch = [r for r in mine if r.get("impl", "").startswith("torch") and "out_err" in r]
            name = f"burst within PyTorch's error vs fp64, {mask} H {H} D {D} S {S}"
            if burst is None or not torch:
                why = next((r.get("error") for r in mine if r.get("impl") == "burst" and r.get("error")), None)
                self.add("exactness", name, None, detail=why or "burst or PyTorch not measured")
                continue
            worst = []
            ok = True
            for t in ("out", "dq", "dk", "dv"):
                bound = max(r[f"{t}_err"] for r in torch)
                got = burst[f"{t}_err"]
                ok = ok and got <= bound
                worst.append(f"{t} {got:.2e}/{bound:.2e}")
            self.add("exactness", name, ok, detail="burst/PyTorch's largest (" +
                     ", ".join(r["impl"] for r in torch) + "): " + ", ".join(worst))
        for P in (1, 2, 3, 4):
            self.ctest_row(f"every strategy at P = {P} vs the fp64 oracle", f"test_cuda_dist_np{P}")
        plant = next((r for r in self.recs if r.get("check") in ("plant_check", "plant_check_skipped")), None)
        if plant is None or plant.get("check") == "plant_check_skipped" or plant.get("rc") == 77:
            self.add("exactness", "a planted kernel error fails a cuda test", None,
                     detail=(plant or {}).get("reason") or (plant or {}).get("last_line") or
                     "plant_check: no record (not run)")
        else:
            self.add("exactness", "a planted kernel error fails a cuda test", bool(plant.get("caught")),
                     detail=str(plant.get("last_line", ""))[:120])
        py = next((r for r in self.recs if r.get("check") == "pytest_cuda"), None)
        if py is None or py.get("rc") in (124, 137):  # absent, or cut by its (budget's) timeout
            self.add("python", "torch CUDA tensors through the Python functions", None,
                     detail=self.why_missing("pytest_cuda"))
        elif "is_available() is False" in str(py.get("summary", "")):  # the GPU tests skipped: no GPU
            self.add("python", "torch CUDA tensors through the Python functions", None,
                     detail="the GPU tests were skipped: " + str(py.get("summary", ""))[:140])
        else:
            self.add("python", "torch CUDA tensors through the Python functions", py.get("rc") == 0,
                     detail=str(py.get("summary", ""))[:160])
        for r in self.recs:
            if r.get("bench") == "kernel" and "max_abs_diff_vs_cpu_kernel" in r:
                d = r["max_abs_diff_vs_cpu_kernel"]
                self.add("checks", f"GPU vs CPU kernel, {r['mask']} {r['pass']} S {r['seq']}", d <= CPU_DIFF, d,
                         f"<= {CPU_DIFF}")

    def run(self):
        self.kernels()
        self.long_run()
        self.exactness()
        return self.rows


def render(recs, rows):
    host = next((r for r in recs if r.get("check") == "host"), {})
    build = next((r for r in recs if r.get("check") == "build"), {})
    done = next((r for r in recs if r.get("check") == "done"), {})
    lines = [f"host: {host.get('gpu', '?')}; {host.get('nproc', '?')} CPUs; torch {host.get('torch', '?')}; "
             f"quick {host.get('quick', '?')}",
             f"build: ok {build.get('ok', '?')} in {build.get('seconds', '?')} s, cuDNN {build.get('cudnn') or '?'}, "
             f"Python module {build.get('python_module', '?')}; run {done.get('seconds', '?')} s"
             + ("" if done else " (no 'done' record: the run was cut)")]
    if build.get("partial"):
        lines.append(f"build: some targets failed to compile, the rest ran: {build.get('failed', '')}")
    width = max((len(r["target"]) for r in rows), default=10)
    group = None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            lines.append(f"{group}:")
        value = "" if r["value"] is None else f"{r['value']:.3g}"
        bound = r["bound"] or ""
        lines.append(f"  {r['target']:<{width}}  {r['verdict']:<7} {value:>7} {bound:<9} {r['detail']}")
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("PASS", "FAIL", "MISSING")}
    lines.append(f"targets: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['MISSING']} MISSING")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("check", nargs="?", help="gpu_host_check.jsonl")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--ctest", help="print the per-test records of this ctest log and exit")
    a = ap.parse_args(argv)
    if a.ctest:
        with open(a.ctest, errors="replace") as f:
            for rec in ctest_records(f.read()):
                print(json.dumps(rec))
        return 0
    if not a.check:
        ap.error("CHECK.jsonl or --ctest LOG")
    recs = load(a.check)
    rows = Summary(recs).run()
    print(render(recs, rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
