#!/usr/bin/env python3
"""The `burst` CLI's GPU side, end to end (ctest cli_gpu, labels cli and cuda).

Usage: python3 tests/cli_gpu.py BURST_BINARY [PYTHON_WITH_TORCH]
What must hold (each a check that fails the test):
- `burst info` says whether this build has CUDA and lists the GPUs it sees (or why none).
- Without a usable GPU (or without CUDA in the build): `bench kernel --device cuda` and
  `calibrate --device cuda` exit non-zero with an Unsupported error naming the reason (the
  runtime's, or the build's); a malformed --device is an InvalidArgument error either way.
- With a GPU: `bench kernel --device cuda` at S = 256 prints one record per pass with the GPU's
  name, CUDA-event time, TFLOP/s by burst's formula, and a difference from the CPU kernel on the
  same bf16 inputs within bf16 rounding (0.05); `calibrate --device cuda` writes a spec whose
  attention efficiencies are the measured rates over the preset's matmul peak.
- bench/torch_sdpa.py --device cuda: without a GPU one record saying why, exit 0; with one, a
  record per backend and pass with a positive time or the backend's error.
- `bench dist --device cuda` (2 ranks under mpirun): without a GPU the Unsupported error and no
  record; with one, fwd / bwd / fwd+bwd records naming the GPU with CUDA-event seconds and the
  plan's bytes.
- `burst simulate` takes the H200 presets (vendor data-sheet figures, share/clusters/).
"""
import json
import os
import subprocess
import sys
import tempfile

from cli_checks import check, env, failures, records

burst = os.path.abspath(sys.argv[1])
python = sys.argv[2] if len(sys.argv) > 2 else sys.executable
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, exe=None):
    return subprocess.run([exe or burst] + args, capture_output=True, text=True, env=env, timeout=300)


info = json.loads(run(["info"]).stdout)
cuda = info.get("cuda", {})
check(isinstance(cuda.get("built"), bool), f"burst info: no cuda.built in {cuda}")
have_gpu = bool(cuda.get("devices"))
check(have_gpu or cuda.get("error"), f"burst info: no GPU and no reason why: {cuda}")
print(f"cuda: built={cuda.get('built')} devices={cuda.get('devices')} error={cuda.get('error')}")

bad = run(["bench", "kernel", "--device", "cuda:x", "--seq", "64"])
check(bad.returncode != 0 and "InvalidArgument" in bad.stderr and "cuda:x" in bad.stderr,
      f"--device cuda:x: rc {bad.returncode}, {bad.stderr[-300:]}")

kernel = ["bench", "kernel", "--device", "cuda", "--seq", "256", "--heads", "2", "--kv-heads", "1", "--dim",
          "64", "--dtype", "bf16", "--mask", "causal", "--pass", "both", "--repeats", "2", "--warmup", "1"]
with tempfile.TemporaryDirectory() as tmp:
    spec_path = os.path.join(tmp, "gpu.json")
    calibrate = ["calibrate", "--device", "cuda", "--cluster", "h200_nvlink_node", "--gpu-seq", "512",
                 "--repeats", "2", "-o", spec_path]
    if not have_gpu:
        reason = "built without CUDA" if not cuda.get("built") else "no usable CUDA GPU"
        for args in (kernel, calibrate):
            p = run(args)
            check(p.returncode != 0 and "Unsupported" in p.stderr and reason in p.stderr,
                  f"{' '.join(args[:3])} without a GPU: rc {p.returncode}, expected Unsupported '{reason}': "
                  f"{p.stderr[-400:]}")
            check(not records(p.stdout), f"{' '.join(args[:3])} without a GPU printed records")
    else:
        p = run(kernel)
        check(p.returncode == 0, f"bench kernel --device cuda: rc {p.returncode}: {p.stderr[-600:]}")
        recs = records(p.stdout)
        check([r.get("pass") for r in recs] == ["fwd", "bwd"], f"bench kernel --device cuda: {recs}")
        for r in recs:
            check(r.get("device", "").startswith("cuda:") and r.get("gpu_name") and r.get("timer") == "cuda events",
                  f"record without the GPU's name / timer: {r}")
            check(r.get("seconds", 0) > 0 and r.get("tflops", 0) > 0, f"no positive time / rate: {r}")
            check(r.get("max_abs_diff_vs_cpu_kernel", 1e9) <= 0.05,
                  f"{r.get('pass')}: GPU vs CPU kernel differ by {r.get('max_abs_diff_vs_cpu_kernel')}")
        p = run(calibrate)
        check(p.returncode == 0, f"calibrate --device cuda: rc {p.returncode}: {p.stderr[-600:]}")
        if p.returncode == 0:
            spec = json.load(open(spec_path))
            check(0 < spec["attention_efficiency_forward"] and 0 < spec["attention_efficiency_backward"],
                  f"calibrated spec: {spec}")

# `bench dist --device cuda` under mpirun, 2 ranks sharing the GPU(s): without one, the same
# Unsupported error on the ranks and no record; with one, a record per pass naming the GPU, with
# CUDA-event time and the bytes the plan predicts.
dist = ["mpirun", "-n", "2", "--oversubscribe", burst, "bench", "dist", "--device", "cuda", "--strategy", "burst",
        "--seq", "256", "--heads", "2", "--dim", "64", "--dtype", "bf16", "--mask", "causal", "--pass", "both",
        "--repeats", "2", "--warmup", "1"]
p = subprocess.run(dist, capture_output=True, text=True, env=env, timeout=300)
recs = records(p.stdout)
if not have_gpu:
    reason = "built without CUDA" if not cuda.get("built") else "no usable CUDA GPU"
    check(p.returncode != 0 and "Unsupported" in p.stderr and reason in p.stderr and not recs,
          f"bench dist --device cuda without a GPU: rc {p.returncode}, {p.stderr[-400:]}")
else:
    check(p.returncode == 0 and [r.get("pass") for r in recs] == ["fwd", "bwd", "fwd+bwd"],
          f"bench dist --device cuda: rc {p.returncode}: {p.stderr[-600:]} {recs}")
    for r in recs:
        check(r.get("device") == "cuda" and r.get("gpu_name") and r.get("gpu_seconds", 0) > 0,
              f"bench dist record without the GPU's name / event time: {r}")
        if r.get("pass") != "fwd+bwd":
            check(r.get("bytes_sent") == r.get("bytes_predicted"), f"bench dist bytes vs plan: {r}")

# PyTorch's SDPA on the GPU per backend (or one record saying why not).
p = run([os.path.join(root, "bench", "torch_sdpa.py"), "--device", "cuda", "--seq", "256", "--shapes", "2x64",
         "--repeats", "2", "--warmup", "1"], exe=python)
check(p.returncode == 0, f"torch_sdpa.py --device cuda: rc {p.returncode}: {p.stderr[-600:]}")
recs = records(p.stdout)
if len(recs) == 1 and "skipped" in recs[0]:
    print("torch_sdpa.py --device cuda:", recs[0]["skipped"])
    check(not have_gpu or "torch" in recs[0]["skipped"], f"skipped on a GPU host: {recs[0]}")
else:
    check(len(recs) == 4 * 2 * 2, f"torch_sdpa.py --device cuda: {len(recs)} records, expected 16 "
          "(4 backends x full/causal x fwd/bwd)")
    for r in recs:
        check(r.get("seconds", 0) > 0 or r.get("error") or r.get("skipped"), f"torch_sdpa record: {r}")

# The H200 presets in the cost model.
for name, nodes in (("h200_nvlink_node", 1), ("h200_ib_4nodes", 4)):
    p = run(["simulate", "--cluster", name, "-S", "65536", "-H", "8", "-D", "64", "--mask", "causal",
             "--format", "jsonl"])
    recs = records(p.stdout)
    check(p.returncode == 0 and recs, f"simulate --cluster {name}: rc {p.returncode}: {p.stderr[-300:]}")
    check(all(r.get("cluster") == name and r.get("nodes") == nodes and r.get("devices_per_node") == 8
              for r in recs), f"simulate --cluster {name}: not {nodes} node(s) x 8 GPUs: {str(recs[:1])[:300]}")
    # The inter-node link (one 400 Gb/s NDR HCA per GPU) shows up only across nodes.
    inter = any(s["inter_node"] for r in recs for s in r["forward"]["steps"])
    check(inter == (nodes > 1), f"simulate --cluster {name}: inter-node steps {inter}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("cli_gpu: all checks passed")
