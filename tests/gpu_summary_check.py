#!/usr/bin/env python3
"""scripts/gpu_summary.py's verdicts on synthetic GPU host check records (ctest gpu_summary).

Usage: python3 tests/gpu_summary_check.py
What must hold (each a check that fails the test):
- step kernels: burst / PyTorch's fastest backend on the same shape >= 0.9 PASS, below FAIL,
  a shape without burst's record MISSING naming the step that timed out; the fastest backend is
  the one compared (not the first); records of another S are not mixed in;
- the long run: burst's fwd + bwd over PyTorch's fastest fwd + bwd on the same S, <= 1.15 PASS,
  above FAIL, PyTorch not measured on that S MISSING saying so, a backward cut by the timeout
  MISSING with the forward's time; P = 4 reported PASS, absent MISSING;
- exactness: ctest results (Passed PASS, Failed / Timeout FAIL, Skipped or absent MISSING),
  burst's errors against PyTorch's largest per tensor, the planted error caught or not (its
  tests skipped without a GPU: MISSING), the Python GPU tests run (skipped: MISSING);
- the ctest log parser reads ctest's result lines (Passed, ***Failed, ***Skipped, ***Timeout,
  ***Exception, ***Not Run) and nothing else; the command line prints the table and the records.
"""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "scripts"))
import gpu_summary  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def kernel(H, D, mask, pas, S, tflops):
    return {"bench": "kernel", "device": "cuda:0", "heads": H, "dim": D, "mask": mask, "pass": pas, "seq": S,
            "dtype": "bf16", "tflops": tflops, "seconds": 1.0 / tflops}


def torch(H, D, mask, pas, S, backend, tflops=None, seconds=None, error=None):
    r = {"bench": "torch_sdpa", "device": "cuda", "heads": H, "dim": D, "mask": mask, "pass": pas, "seq": S,
         "dtype": "bf16", "backend": backend}
    if error:
        r["error"] = error
    else:
        r.update(tflops=tflops, seconds=seconds if seconds is not None else 1.0 / tflops)
    return r


def long_kernel(S, pas, seconds):
    return {"bench": "kernel", "device": "cuda:0", "heads": 8, "dim": 64, "mask": "causal", "pass": pas,
            "seq": S, "dtype": "bf16", "tflops": 100.0, "seconds": seconds}


def base_records(S=32768, L=1048576):
    recs = [{"check": "host", "gpu": "NVIDIA H200", "nproc": 16, "quick": 0},
            {"check": "build", "ok": True, "seconds": 120}]
    for H, D in ((8, 64), (32, 128)):
        for mask in ("full", "causal"):
            for pas in ("fwd", "bwd"):
                recs.append(torch(H, D, mask, pas, S, "flash", 300.0))
                recs.append(torch(H, D, mask, pas, S, "cudnn", 500.0))   # the fastest, listed second
                recs.append(torch(H, D, mask, pas, S, "efficient", error="refused"))
                recs.append(kernel(H, D, mask, pas, S, 460.0))           # 0.92 of cuDNN: PASS
                recs.append(torch(H, D, mask, pas, 4096, "cudnn", 100.0))  # another S: not compared
    recs += [long_kernel(L, "fwd", 3.0), long_kernel(L, "bwd", 7.0),
             torch(8, 64, "causal", "fwd", L, "cudnn", seconds=2.5, tflops=1.0),
             torch(8, 64, "causal", "bwd", L, "cudnn", seconds=6.5, tflops=1.0),
             torch(8, 64, "causal", "fwd", L, "flash", seconds=4.0, tflops=1.0),
             torch(8, 64, "causal", "bwd", L, "flash", seconds=10.0, tflops=1.0),
             {"bench": "dist", "device": "cuda", "strategy": "burst", "ranks": 4, "S_global": L, "pass": "fwd+bwd",
              "seconds": 12.0, "gpu_seconds": 11.5, "exposed_comm_seconds": 0.8}]
    for test in ("test_cuda_attention", "test_cuda_cudnn", "test_cuda_dist_np1", "test_cuda_dist_np2",
                 "test_cuda_dist_np3", "test_cuda_dist_np4"):
        recs.append({"check": "ctest", "test": test, "result": "Passed", "seconds": 3.0})
    for impl, err in (("burst", 1e-3), ("torch_cudnn", 2e-3), ("torch_flash", 1.5e-3)):
        recs.append({"bench": "gpu_exactness", "device": "cuda", "impl": impl, "mask": "causal", "heads": 8,
                     "dim": 64, "seq": 2048, "out_err": err, "dq_err": err, "dk_err": err, "dv_err": err})
    recs += [{"check": "plant_check", "rc": 0, "caught": True, "last_line": "both planted errors were caught"},
             {"check": "pytest_cuda", "rc": 0, "summary": "24 passed"},
             {"bench": "kernel", "device": "cuda:0", "heads": 4, "dim": 64, "mask": "causal", "pass": "fwd",
              "seq": 1024, "dtype": "bf16", "tflops": 5.0, "seconds": 0.001, "max_abs_diff_vs_cpu_kernel": 0.004},
             {"check": "done", "seconds": 400, "ok": True}]
    return recs


def rows_of(recs):
    return gpu_summary.Summary(recs).run()


def find(rows, *words):
    hits = [r for r in rows if all(w in r["target"] for w in words)]
    check(len(hits) == 1, f"one row for {words}: {[r['target'] for r in hits]}")
    return hits[0] if hits else {"verdict": None, "value": None, "detail": ""}


# Everything measured and within bounds: every row PASS, ratios against the fastest backend.
rows = rows_of(base_records())
check(all(r["verdict"] == "PASS" for r in rows), f"all PASS: {[(r['target'], r['verdict']) for r in rows]}")
r = find(rows, "H 32 D 128 causal bwd")
check(abs(r["value"] - 460.0 / 500.0) < 1e-9 and "cudnn" in r["detail"], f"vs cuDNN (the fastest): {r}")
r = find(rows, "P = 1 fwd+bwd")
check(abs(r["value"] - 10.0 / 9.0) < 1e-9 and "cudnn" in r["detail"], f"long run vs cuDNN's 9 s: {r}")
check(find(rows, "P = 4 time")["verdict"] == "PASS", "P = 4 reported")
check(len([r for r in rows if r["group"] == "kernels"]) == 8, "8 kernel rows (2 shapes x 2 masks x 2 passes)")

# Below the bounds: FAIL; a missing burst record (its step timed out): MISSING with the reason.
recs = base_records()
for rec in recs:
    if rec.get("bench") == "kernel" and rec.get("heads") == 8 and rec.get("mask") == "full" and rec.get("seq") == 32768:
        rec["tflops"] = 400.0  # 0.8 of cuDNN
recs = [x for x in recs if not (x.get("bench") == "kernel" and x.get("heads") == 32 and x.get("mask") == "full" and
                                x.get("pass") == "bwd")]
recs.append({"check": "step", "step": "kernel_h32_d128_full", "rc": 124, "timed_out": True, "seconds": 60})
for rec in recs:
    if rec.get("bench") == "kernel" and rec.get("seq") == 1048576 and rec.get("pass") == "bwd":
        rec["seconds"] = 8.0  # 11 / 9 = 1.22 > 1.15
rows = rows_of(recs)
check(find(rows, "H 8 D 64 full fwd")["verdict"] == "FAIL", "0.8x is FAIL")
check(find(rows, "H 8 D 64 causal fwd")["verdict"] == "PASS", "the other mask keeps its PASS")
r = find(rows, "H 32 D 128 full bwd")
check(r["verdict"] == "MISSING" and "timed out" in r["detail"], f"MISSING with the timeout: {r}")
check(find(rows, "H 32 D 128 full fwd")["verdict"] == "PASS", "the forward of that case still judged")
check(find(rows, "P = 1 fwd+bwd")["verdict"] == "FAIL", "1.22x the fastest is FAIL")

# The long run without PyTorch on that S, a backward cut off, P = 4 absent.
recs = [x for x in base_records() if not (x.get("bench") == "torch_sdpa" and x.get("seq") == 1048576)]
recs.append({"check": "step", "step": "long_torch", "rc": 124, "timed_out": True, "seconds": 120})
rows = rows_of(recs)
r = find(rows, "P = 1 fwd+bwd")
check(r["verdict"] == "MISSING" and "not measured on this S" in r["detail"], f"torch missing at S: {r}")
recs = [x for x in base_records() if not (x.get("bench") == "kernel" and x.get("seq") == 1048576 and
                                           x.get("pass") == "bwd") and x.get("bench") != "dist"]
recs.append({"check": "step", "step": "long_p1", "rc": 124, "timed_out": True, "seconds": 150})
rows = rows_of(recs)
r = find(rows, "P = 1 fwd+bwd")
check(r["verdict"] == "MISSING" and "forward 3.00 s" in r["detail"] and "timed out" in r["detail"],
      f"backward cut off: {r}")
check(find(rows, "P = 4 time")["verdict"] == "MISSING", "P = 4 absent is MISSING")

# No long run at all (a run cut before it): MISSING, not judged on the 32K records.
recs = [x for x in base_records() if x.get("seq") != 1048576 and x.get("S_global") != 1048576]
rows = rows_of(recs)
check(find(rows, "P = 1 fwd+bwd")["verdict"] == "MISSING", "no long run: MISSING")

# Exactness: ctest Failed / Skipped / absent, burst's error above PyTorch's, the plant not caught.
recs = base_records()
for rec in recs:
    if rec.get("test") == "test_cuda_dist_np3":
        rec["result"] = "Failed"
    if rec.get("test") == "test_cuda_cudnn":
        rec["result"] = "Skipped"
    if rec.get("impl") == "burst":
        rec["dk_err"] = 3e-3  # above cuDNN's 2e-3
    if rec.get("check") == "plant_check":
        rec["caught"] = False
recs = [x for x in recs if x.get("test") != "test_cuda_dist_np4"]
rows = rows_of(recs)
check(find(rows, "P = 3")["verdict"] == "FAIL", "a failed ctest is FAIL")
check(find(rows, "P = 4 vs")["verdict"] == "MISSING", "an absent ctest is MISSING")
check(find(rows, "cuDNN backend")["verdict"] == "MISSING", "a skipped ctest is MISSING")
check(find(rows, "P = 1 vs")["verdict"] == "PASS", "P = 1 still PASS")
r = find(rows, "within PyTorch's error")
check(r["verdict"] == "FAIL" and "dk 3.00e-03/2.00e-03" in r["detail"], f"burst's dk above PyTorch's: {r}")
check(find(rows, "planted")["verdict"] == "FAIL", "a planted error not caught is FAIL")

# A run without a GPU: the planted check skipped (77) and the Python GPU tests skipped are MISSING.
recs = [x for x in base_records() if x.get("check") not in ("plant_check", "pytest_cuda")]
recs += [{"check": "plant_check", "rc": 77, "caught": False, "last_line": "no GPU here: the tests were skipped"},
         {"check": "pytest_cuda", "rc": 0,
          "summary": "SKIPPED [14] tests/py/test_cuda.py:147: torch.cuda.is_available() is False|2 passed"}]
rows = rows_of(recs)
r = find(rows, "planted")
check(r["verdict"] == "MISSING" and "no GPU" in r["detail"], f"plant skipped (77) is MISSING: {r}")
check(find(rows, "torch CUDA tensors")["verdict"] == "MISSING", "Python GPU tests skipped is MISSING")

# Cut by the budget: the Python tests' timeout (rc 124) and the planted check's (skipped) are
# MISSING, not FAIL; a ctest run cut off is named as timed out; without the kernels' records the
# strategies' records (S 12288) never stand in for the long run.
recs = [x for x in base_records() if x.get("check") not in ("plant_check", "pytest_cuda", "ctest")]
recs += [{"check": "plant_check_skipped", "reason": "its tests ran past the budget (rc 124)"},
         {"check": "pytest_cuda", "rc": 124, "seconds": 30, "summary": "...|"},
         {"check": "ctest_cuda", "rc": 124, "seconds": 150, "limit": 150, "summary": ""}]
rows = rows_of(recs)
r = find(rows, "planted")
check(r["verdict"] == "MISSING" and "past the budget" in r["detail"], f"plant cut by the budget: {r}")
r = find(rows, "torch CUDA tensors")
check(r["verdict"] == "MISSING" and "timed out" in r["detail"], f"pytest cut by the budget: {r}")
r = find(rows, "P = 2 vs")
check(r["verdict"] == "MISSING" and "timed out" in r["detail"], f"ctest cut by its timeout: {r}")
recs = [x for x in base_records() if x.get("bench") not in ("kernel", "torch_sdpa")]
recs += [{"bench": "dist", "device": "cuda:0", "ranks": 4, "strategy": "burst", "S_global": 12288,
          "pass": "fwd+bwd", "seconds": 0.5, "exposed_comm_seconds": 0.01, "gpu_seconds": 0.4}]
recs = [x for x in recs if not (x.get("bench") == "dist" and x.get("S_global") == 1048576)]
rows = rows_of(recs)
check(find(rows, "P = 1 fwd+bwd")["verdict"] == "MISSING", "the strategies' S 12288 is no long run")
check(find(rows, "P = 4 time")["verdict"] == "MISSING", "the strategies' P = 4 at S 12288 is no long run")

# The ctest log parser.
log = """Test project /x/build-gpu
      Start  3: test_cuda_attention
 1/6 Test  #2: test_cuda_elementwise_checks .....   Passed    0.50 sec
 2/6 Test  #1: test_cuda_elementwise ............***Skipped   0.13 sec
 3/6 Test  #3: test_cuda_attention ..............***Failed   12.34 sec
 4/6 Test  #9: test_cuda_dist_np2 ...............***Timeout 300.01 sec
 5/6 Test #10: test_cuda_dist_np3 ...............***Exception: SegFault  1.20 sec
 6/6 Test #11: cli_gpu ..........................***Not Run   0.00 sec
The following tests FAILED:
	  3 - test_cuda_attention (Failed)
"""
got = {r["test"]: r["result"] for r in gpu_summary.ctest_records(log)}
check(got == {"test_cuda_elementwise_checks": "Passed", "test_cuda_elementwise": "Skipped",
              "test_cuda_attention": "Failed", "test_cuda_dist_np2": "Timeout",
              "test_cuda_dist_np3": "Exception: SegFault", "cli_gpu": "Not Run"}, f"ctest parse: {got}")
rows = rows_of([{"check": "ctest", "test": t, "result": v, "seconds": 1.0} for t, v in got.items()])
check(find(rows, "P = 2 vs")["verdict"] == "FAIL", "a timed-out ctest is FAIL")

# The command line: the table from a file, the records of a log, --json.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "gpu_host_check.jsonl")
    with open(path, "w") as f:
        for rec in base_records():
            f.write(json.dumps(rec) + "\n")
        f.write("not json\n")
    script = os.path.join(root, "scripts", "gpu_summary.py")
    p = subprocess.run([sys.executable, script, path, "--json", os.path.join(tmp, "s.json")],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "targets: " in p.stdout and " 0 FAIL, 0 MISSING" in p.stdout,
          f"the table: rc {p.returncode} {p.stdout[-400:]} {p.stderr[-400:]}")
    with open(os.path.join(tmp, "s.json")) as f:
        check(all(r["verdict"] == "PASS" for r in json.load(f)), "--json rows")
    log_path = os.path.join(tmp, "ctest.log")
    with open(log_path, "w") as f:
        f.write(log)
    p = subprocess.run([sys.executable, script, "--ctest", log_path], capture_output=True, text=True, timeout=60)
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    check(p.returncode == 0 and len(lines) == 6 and all(x["check"] == "ctest" for x in lines),
          f"--ctest records: {p.stdout}")
    empty = os.path.join(tmp, "empty.jsonl")
    open(empty, "w").close()
    p = subprocess.run([sys.executable, script, empty], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "0 PASS, 0 FAIL" in p.stdout, f"no records: all MISSING: {p.stdout[-300:]}")

print(f"gpu_summary_check: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
