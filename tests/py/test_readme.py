"""Every ```python block of README.md runs verbatim (at every rank count of the suite), and its
results are what the README says they are. The other blocks are run or checked by
tests/readme_blocks.py (ctest readme_blocks)."""
import math
import pathlib
import re

import torch

import burst
from conftest import assert_close, errors_vs_oracle, visible_reference

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _run(i):
    torch.manual_seed(12345)     # a block that forgets its own seed would differ between ranks
    scope = {}
    exec(compile(_blocks()[i], f"README.md python block {i}", "exec"), scope)
    return scope


def test_readme_has_the_three_python_blocks():
    assert len(_blocks()) == 3, "README.md: single process, distributed, shims"


def test_single_process_block():
    s = _run(0)
    q, out, lse = s["q"], s["out"], s["lse"]
    assert out.dtype == q.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert q.grad is not None and q.grad.dtype == torch.bfloat16
    # bf16 out against float64 attention over the same (bf16) inputs: bf16 rounding of out and
    # of the P operand, ~2^-8 relative; 2e-2 of max |ref| fails a wrong row
    ref, _ = errors_vs_oracle(q.detach(), s["k"].detach(), s["v"].detach(),
                              torch.zeros(q.shape), visible_reference(256, 256, True), 1 / 8)
    err = float((out.double() - ref["out"]).abs().max() / ref["out"].abs().max())
    assert err < 2e-2, err


def test_distributed_block(comm):
    s = _run(1)
    q, k, v, out, full, pos = s["q"], s["k"], s["v"], s["out"], s["full"], s["pos"]
    assert full.shape == (1, 768, 8, 64) and out.shape == (1, len(pos), 8, 64)
    ref, err32 = errors_vs_oracle(q, k, v, torch.ones(1, 768, 8, 64),
                                  visible_reference(768, 768, True), 1 / math.sqrt(64))
    assert_close("README distributed out", full, ref["out"], err32["out"])
    assert_close("README distributed dq", s["ql"].grad, ref["dq"][:, torch.from_numpy(pos)],
                 err32["dq"])


def test_shims_block(comm):
    s = _run(2)
    P = comm.Get_size()
    assert s["out"].shape == (64, 4, 32) and torch.isfinite(s["out"]).all()
    assert s["k_slice"].stop == 64 * (comm.Get_rank() + 1) and s["cu_q"][-1] == 64
    assert s["cu_seqlens"][-1] == 64 * P
