"""What the CLI end-to-end tests (cli_bench.py, cli_gpu.py, cli_lm.py) share.

env: the environment their subprocesses run in (Open MPI allowed as root, one OpenMP thread);
check(ok, what): records a failed check in `failures` and prints it, so that a test runs every
check and exits non-zero at the end when any failed; records(text): the JSON-lines records of a
command's output (lines starting with "{").
"""
import json
import os
import sys

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
