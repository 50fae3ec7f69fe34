#!/usr/bin/env python3
"""`burst` without libtorch, and `burst train|eval|generate` handing over to `burst-lm` (ctest cli_lm).

Usage: python3 tests/cli_lm.py BURST_BINARY BURST_LM_BINARY
What must hold (each a check that fails the test):
- burst's dynamic section needs no libtorch / libc10 (readelf -d); burst-lm's does.
- `burst --version` prints "burst <version> (git ...)" and exits 0 without starting MPI: run with
  an Open MPI setting that makes MPI_Init fail (an unknown PML), it still succeeds; `burst info`
  under the same setting fails (its callback runs with MPI started), so the setting does bite.
- `burst train --help` prints burst-lm's train options (burst execs burst-lm beside it), and
  `burst eval --help`, `burst generate --help` likewise; `burst-lm --version` names burst-lm.
- A copy of burst without burst-lm beside it: `burst train` exits 2 and names burst-lm and the
  path it looked at; `burst-lm bogus` is a usage error (non-zero).
Time: about 10 s (burst-lm loads libtorch once per call). Nothing is timed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from cli_checks import check, env, failures

burst, burst_lm = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])


def run(cmd, extra_env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(env, **(extra_env or {})), timeout=120)


def needed(binary):
    out = run(["readelf", "-d", binary]).stdout
    return [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


check(not any("torch" in n or "c10" in n for n in needed(burst)), f"burst links libtorch: {needed(burst)}")
check(any("torch" in n for n in needed(burst_lm)), f"burst-lm does not link libtorch: {needed(burst_lm)}")

no_mpi = {"OMPI_MCA_pml": "no_such_pml"}  # MPI_Init fails: no PML component of that name
v = run([burst, "--version"], no_mpi)
check(v.returncode == 0 and v.stdout.startswith("burst ") and "(git " in v.stdout,
      f"burst --version without MPI: rc {v.returncode}, out {v.stdout!r}, err {v.stderr[-300:]!r}")
i = run([burst, "info"], no_mpi)
check(i.returncode != 0, "burst info succeeded with MPI_Init made to fail: the --version check proves nothing")

for sub, option in (("train", "--seq-len"), ("eval", "--max-tokens"), ("generate", "--max-new-tokens")):
    h = run([burst, sub, "--help"])
    check(h.returncode == 0 and option in h.stdout, f"burst {sub} --help did not run burst-lm {sub}: "
          f"rc {h.returncode}, out {h.stdout[:200]!r}, err {h.stderr[-300:]!r}")
lv = run([burst_lm, "--version"])
check(lv.returncode == 0 and lv.stdout.startswith("burst-lm "), f"burst-lm --version: {lv.stdout!r}")
check(run([burst_lm, "bogus"]).returncode != 0, "burst-lm bogus exited 0")

with tempfile.TemporaryDirectory() as tmp:
    lone = os.path.join(tmp, "burst")
    shutil.copy(burst, lone)
    t = run([lone, "train", "--steps", "1"])
    check(t.returncode == 2 and "burst-lm" in t.stderr and os.path.join(tmp, "burst-lm") in t.stderr,
          f"burst train without burst-lm: rc {t.returncode}, err {t.stderr!r}")

print("cli_lm:", "FAILED" if failures else "ok", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
