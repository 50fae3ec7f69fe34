#!/usr/bin/env python3
"""Runs an example the way its users do: `torchrun --standalone --nproc_per_node NP SCRIPT ARGS`
(torch.distributed.run of this interpreter; env:// rendezvous, no mpirun). Exit status: the
launch's, or 77 (ctest's skip) on torch < 2, whose torchrun dies on Python 3.11 in its elastic
agent before starting any process (torch 1.13: AttributeError 'NoneType' object has no attribute
'get' in elastic/multiprocessing/api.py to_map).

Usage: torchrun_example.py [--min-torch X.Y] NP SCRIPT [ARGS...]
(--min-torch: also 77 on an older torch, for a script that needs newer features.)
"""
import subprocess
import sys

import torch


def main():
    argv = sys.argv[1:]
    need = (2, 0)
    if argv[0] == "--min-torch":
        need = max(need, tuple(int(x) for x in argv[1].split(".")))
        argv = argv[2:]
    np_, script, *args = argv
    have = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if have < need and have >= (2, 0):
        print(f"SKIP: {script} needs torch >= {'.'.join(map(str, need))}, this is {torch.__version__}")
        return 77
    if have < (2, 0):
        print(f"SKIP: torch {torch.__version__}'s torchrun is broken on this interpreter (its elastic "
              f"agent dies before starting a process); run with torch >= 2")
        return 77
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", np_,
           script, *args]
    return subprocess.run(cmd, timeout=600).returncode


if __name__ == "__main__":
    sys.exit(main())
