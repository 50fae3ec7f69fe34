#!/usr/bin/env python3
"""No hang (docs/multinode.md § No hang): a job in which one rank does not come to a collective
ends within the watchdog's timeout + 5 s, non-zero, with the watchdog's message on stderr.

Usage: nohang_faults.py MPIEXEC NP TIMEOUT MODE TARGET [ARGS...]
TARGET is run as `MPIEXEC -n NP --oversubscribe TARGET ARGS MODE TIMEOUT` (tests/nohang_target.cc
or tests/py/nohang_target.py, modes: late, absent, first (C++ only), vanish, mismatch, good). The
ranks that wait print "nohang: rank R waits from T" (epoch seconds); the job must end by
min(T) + TIMEOUT + 5 s. Checks, for every mode but good: exit status non-zero, stderr names
"burst comm watchdog", the timeout, and either the absent rank ("never arrived") or, for a
collective that cannot tell, says the ranks are unknown; for absent and first (the last rank
skips the very first collective, the Communicator's creation) the message must name the last
rank ("rank P-1 (world P-1) never arrived") and never say "unknown"; mismatch may instead end sooner with
the error every rank raises ("ranks are in different collective calls"), and vanish with
mpirun's own report of a process that exited without MPI_Finalize (Open MPI ends the job then).
good: exit 0 and no watchdog message.
Exit 0 pass, 1 fail.
"""
import os
import re
import subprocess
import sys
import time

# Modes whose watchdog message must name the last rank as the one that never arrived.
NAMED = ("first", "absent")


def main():
    mpiexec, np_, timeout, mode, target, *args = sys.argv[1:]
    timeout = float(timeout)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1")
    cmd = [mpiexec, "-n", np_, "--oversubscribe", "--bind-to", "none", target, *args, mode,
           f"{timeout:g}"]
    # Start-up (MPI_Init, the set-up collectives) is not part of the bound; 120 s is a backstop.
    start = time.time()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 120)
    except subprocess.TimeoutExpired as e:
        print(f"FAIL {mode}: the job still ran after {timeout + 120:.0f} s (a hang)\n{e.stderr}")
        return 1
    end = time.time()
    err = proc.stderr
    waits = [float(t) for t in re.findall(r"nohang: rank \d+ waits from ([0-9.]+)", err)]
    report = (f"mode {mode}, P {np_}, timeout {timeout:g} s: exit {proc.returncode}, "
              f"job {end - start:.1f} s")
    failures = []
    if mode == "good":
        if proc.returncode != 0:
            failures.append("the well-behaved job failed")
        if "burst comm watchdog" in err:
            failures.append("the watchdog fired in the well-behaved job")
    else:
        if proc.returncode == 0:
            failures.append("exit status 0")
        if not waits:
            failures.append("no rank reported the start of its wait")
        else:
            after = end - min(waits)
            report += f", ended {after:.1f} s after the wait began"
            if after > timeout + 5:
                failures.append(f"ended {after:.1f} s after the wait began, more than timeout + 5 s")
        lines = [ln for ln in err.splitlines() if "burst comm watchdog" in ln]
        mismatch = "ranks are in different collective calls" in err
        # Open MPI's own verdict on a process that exits without MPI_Finalize: mpirun ends the
        # job before any watchdog fires.
        exited = 'exited without calling "finalize"' in err or "exiting improperly" in err
        if mode == "mismatch" and mismatch and not lines:
            pass    # recognised before any timeout: the same error on every rank
        elif mode == "vanish" and exited and not lines:
            pass
        elif not lines:
            failures.append("no watchdog message on stderr")
        elif not any(f"timeout of {timeout:g} s" in ln for ln in lines):
            failures.append("the watchdog message does not state the timeout")
        elif not any("never arrived" in ln for ln in lines):
            failures.append("no watchdog message names the ranks that never arrived (or says they are unknown)")
        elif mode in NAMED:
            absent = f"rank {int(np_) - 1} (world {int(np_) - 1}) never arrived"
            if not any(absent in ln for ln in lines):
                failures.append(f"no watchdog message says '{absent}'")
            if any("unknown" in ln for ln in lines):
                failures.append("a watchdog message says the absent ranks are unknown")
    print(report)
    for ln in err.splitlines():
        if any(t in ln for t in ("burst comm watchdog", "nohang:", "different collective calls",
                                 "without calling", "exiting improperly")):
            print("  " + ln[:600])
    if failures:
        print(f"FAIL {mode}: " + "; ".join(failures))
        print("--- stderr tail\n" + "\n".join(err.splitlines()[-30:]))
        return 1
    print(f"PASS {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
