#!/usr/bin/env python3
"""No hang over a torch.distributed gloo group (as tests/nohang_faults.py over MPI): when one
rank never comes to a collective, every waiting rank ends within the watchdog's timeout + 5 s,
non-zero, with the watchdog's message on its stderr naming the rank that never arrived.

Usage: group_nohang.py NP TIMEOUT MODE PYTHON TARGET   (TARGET: tests/py/group_nohang_target.py)
Starts NP processes of `PYTHON TARGET MODE TIMEOUT` with torch's env:// variables (RANK,
WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT: a free port), as torchrun does, no mpirun. Checks
for absent / vanish: each waiting rank (all but the last) exits non-zero by its wait's start +
TIMEOUT + 5 s, and its stderr has "burst comm watchdog" and, for absent, the timeout and
"rank NP-1 (world NP-1) never arrived"; for vanish, the failure of the wait on that rank. Then the
absent rank is ended (torchrun's part). good: every rank exits 0, no watchdog message.
Exit 0 pass, 1 fail.
"""
import os
import re
import socket
import subprocess
import sys
import time


def main():
    np_, timeout, mode, python, target = sys.argv[1:]
    P, timeout = int(np_), float(timeout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(P):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(P), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([python, target, mode, f"{timeout:g}"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    waiting = procs if mode == "good" else procs[:-1]
    failures, report = [], []
    for r, p in enumerate(waiting):
        try:
            out, err = p.communicate(timeout=timeout + 120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            failures.append(f"rank {r} still ran {timeout + 120:.0f} s after start (a hang)")
        end = time.time()
        waits = [float(t) for t in re.findall(r"nohang: rank \d+ waits from ([0-9.]+)", err)]
        lines = [ln for ln in err.splitlines() if "burst comm watchdog" in ln]
        report.append(f"rank {r}: exit {p.returncode}" +
                      (f", ended {end - waits[0]:.1f} s after its wait began" if waits else ""))
        if mode == "good":
            if p.returncode != 0 or lines:
                failures.append(f"rank {r}: exit {p.returncode} in the well-behaved job\n{err}")
            continue
        if p.returncode == 0:
            failures.append(f"rank {r}: exit status 0")
        if not waits:
            failures.append(f"rank {r}: did not report the start of its wait\n{err}")
        elif end - waits[0] > timeout + 5:
            failures.append(f"rank {r}: ended {end - waits[0]:.1f} s after its wait began (> timeout + 5 s)")
        if not lines:
            failures.append(f"rank {r}: no watchdog message on stderr\n{err}")
        elif mode == "absent":
            absent = f"rank {P - 1} (world {P - 1}) never arrived"
            if not any(f"timeout of {timeout:g} s" in ln and absent in ln for ln in lines):
                failures.append(f"rank {r}: the message does not state the timeout and name "
                                f"'{absent}': {lines}")
        else:
            report[-1] += f"; {lines[0][:200]}"
    for p in procs[len(waiting):]:      # the absent rank: the launcher's part, as torchrun's
        p.kill()
        p.communicate()
    print(f"group_nohang mode {mode}, P {P}, timeout {timeout:g} s: " + "; ".join(report))
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
