"""burst._C shares the process's C++ runtime with torch's libraries, whichever is imported first.

Each case runs in a fresh interpreter (a crash must fail the case, not end the suite): it imports
torch and burst in the given order, then drives the module's iostream and string paths (a mask's
description formats integers through std::ostream, an error message is built and freed, a dense
visibility array is returned). A module that carries a second copy of libstdc++'s locale code
gets facets of one copy looked up with ids of the other once torch has put the shared
libstdc++.so.6 in the global symbol scope: SIGSEGV in std::ostream's integer insert, or
`free(): invalid pointer` (docs/design.md § One C++ runtime per process)."""
import os
import subprocess
import sys

import pytest

from conftest import only_rank0

PROBE = r"""
import sys
for name in sys.argv[1:]:
    __import__(name)
import burst
m = burst.Mask(slices=[(0, 16, 0, 64, "full", -1, -1), (16, 64, 0, 16, "full", -1, -1),
                       (0, 64, 0, 64, "full", 8, 8), (0, 64, 32, 48, "causal", -1, -1)])
print(m.describe())
print(repr(burst.Mask(causal=True, window_left=8, window_right=-1)))
print(int(burst._C.visible(m, 64, 64).sum()))
try:
    burst._C.visible(burst.Mask(slices=[(0, 70, 0, 64, "full", -1, -1)]), 64, 64)
except ValueError as e:
    print(str(e).split(" must ")[0])
"""

EXPECTED = [
    "4 slices: [0,16)x[0,64) full, [16,64)x[0,16) full, [0,64)x[0,64) full window=(8,8), ...",
    "burst.Mask(causal window=(8,-1))",
    None,  # the visible count: the same in both orders (checked below), computed by the module
    "InvalidArgument: mask slice 0 [0,70)x[0,64) full",
]


def run_probe(order):
    # The child is no MPI rank: drop the launcher's variables so it never tries to join the job.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    return subprocess.run([sys.executable, "-c", PROBE, *order], env=env,
                          capture_output=True, text=True, timeout=120)


@only_rank0
def test_torch_then_burst_and_burst_then_torch_agree():
    outputs = []
    for order in (("torch", "burst"), ("burst", "torch")):
        r = run_probe(order)
        assert r.returncode == 0, (f"import {', then '.join(order)}: exit status "
                                   f"{r.returncode} (negative = killed by that signal)\n"
                                   f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}")
        lines = r.stdout.splitlines()
        assert len(lines) == len(EXPECTED), r.stdout
        for got, want in zip(lines, EXPECTED):
            if want is not None:
                assert got == want
        outputs.append(lines)
    assert outputs[0] == outputs[1]
