"""The README's Python example runs verbatim (at every rank count of the suite)."""
import pathlib
import re

import torch


def test_readme_python_example(comm):
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    assert len(blocks) == 1, "README.md should hold exactly one ```python example"
    torch.manual_seed(0)                         # the example draws the same tensors everywhere
    scope = {}
    exec(compile(blocks[0], str(readme), "exec"), scope)
    out, q, pos = scope["out"], scope["q"], scope["pos"]
    assert out.shape == (q.shape[0], len(pos), q.shape[2], q.shape[3])
    assert torch.isfinite(out).all() and q.grad is not None
