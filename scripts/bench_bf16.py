#!/usr/bin/env python3
"""bf16 vs fp32 kernel speed on this host, alternated (the machine is shared): the bf16 targets (bf16 never slower than fp32).

Runs `burst bench kernel` for B=1 H=8 S=4096 D=64, 1 thread pinned to one core (taskset), for
forward full, forward causal and backward full, alternating fp32 / bf16 each round, and prints
every JSON record then one line per case: bf16/fp32 ratios of gflops_cpu (flop per CPU-second,
robust to time-slicing) per round, the fraction of the FMA and vdpbf16ps probes timed beside each
pass, and the load average.

Usage: scripts/bench_bf16.py [--burst build/tools/burst] [--rounds 3] [--core 1] [--repeats 3]
"""
import argparse
import json
import subprocess

CASES = [("fwd", "full"), ("fwd", "causal"), ("bwd", "full")]


def run(args, dtype, pass_, mask):
    cmd = ["taskset", "-c", str(args.core), args.burst, "bench", "kernel", "--batch", "1", "--heads", "8",
           "--seq", "4096", "--dim", "64", "--threads", "1", "--mask", mask, "--pass", pass_, "--dtype", dtype,
           "--repeats", str(args.repeats), "--warmup", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(rec), flush=True)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", default="build/tools/burst")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = {c: [] for c in CASES}
    for _ in range(args.rounds):
        for pass_, mask in CASES:
            f = run(args, "fp32", pass_, mask)
            b = run(args, "bf16", pass_, mask)
            rows[(pass_, mask)].append((f, b))
    for (pass_, mask), pairs in rows.items():
        ratios = ", ".join(f"{b['gflops_cpu'] / f['gflops_cpu']:.2f}" for f, b in pairs)
        fp = ", ".join(f"{f['gflops_cpu']:.0f}/{f['fma_peak_gflops_1core']:.0f}" for f, _ in pairs)
        bp = ", ".join(f"{b['gflops_cpu']:.0f}/{b.get('bf16_dot_peak_gflops_1core', 0):.0f}" for _, b in pairs)
        loads = ", ".join(f"{f['loadavg_1m']:.1f}" for f, _ in pairs)
        print(f"# {pass_} {mask}: bf16/fp32 per CPU-second {ratios}; fp32 GFLOP/s / FMA probe {fp}; "
              f"bf16 GFLOP/s / vdpbf16ps probe {bp}; load {loads}")


if __name__ == "__main__":
    main()
