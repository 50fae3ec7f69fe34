"""Regressions of the no-hang work and of what tests/py/fuzz_dist.py found: an argument bad or
different on ONE rank raises the same error on every rank (none is left in a collective), the
error names the argument, the ranks and the fix; NaN inputs are refused; the module's own
collectives run on the watched burst Communicator (burst/_comm.py)."""
import numpy as np
import pytest

import burst
from burst import _C, _comm
from conftest import make_inputs


def np_inputs(S=16, H=2, H_kv=2, D=8):
    return [t.numpy() for t in make_inputs(1, S, H, H_kv, D, 0)[:3]]


def same_on_every_rank(comm, text):
    texts = comm.allgather(text)
    assert all(t == texts[0] for t in texts), texts


def test_unsupported_argument_on_one_rank_raises_everywhere(comm):
    """dropout_p on the last rank only used to raise there alone, leaving the others waiting."""
    q, k, v = np_inputs()
    last = comm.Get_rank() == comm.Get_size() - 1
    with pytest.raises(NotImplementedError, match="dropout_p") as e:
        burst.attn_func(q, k, v, 0.1 if last else 0.0, comm=comm)
    same_on_every_rank(comm, str(e.value))
    cu = [0, 7, 16 * comm.Get_size()]
    with pytest.raises(ValueError, match="max_seqlen_q") as e:    # varlen: max_seqlen on one rank
        burst.attn_varlen_func(q[0], k[0], v[0], cu, cu, 1 if last else None, None, comm=comm)
    same_on_every_rank(comm, str(e.value))


def test_bad_name_on_one_rank_raises_everywhere(comm):
    """A strategy / layout / impl name bad on one rank is parsed under an agreed verdict."""
    q, k, v = np_inputs()
    last = comm.Get_rank() == comm.Get_size() - 1
    for kw, pattern in ((dict(layout="spiral"), "layout"), (dict(strategy="teleport"), "strategy"),
                        (dict(impl="fastest"), "impl")):
        bad = kw if last else {}
        with pytest.raises(ValueError, match=pattern) as e:
            burst.attn_func(q, k, v, comm=comm, causal=True, **bad)
        same_on_every_rank(comm, str(e.value))
    out = burst.attn_func(q, k, v, comm=comm, causal=True)     # still in step
    assert np.isfinite(out).all()


def test_differing_argument_is_named(comm):
    if comm.Get_size() == 1:
        return
    q, k, v = np_inputs()
    last = comm.Get_rank() == comm.Get_size() - 1
    with pytest.raises(ValueError, match="differ between ranks") as e:
        burst.attn_func(q, k, v, comm=comm, causal=not last)
    msg = str(e.value)
    assert "mask: rank 0 'causal'" in msg and "every rank must pass identical arguments" in msg, msg
    same_on_every_rank(comm, msg)


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_nan_input_is_refused_on_every_rank(comm, name):
    q, k, v = np_inputs()
    ops = {"q": q.copy(), "k": k.copy(), "v": v.copy()}
    if comm.Get_rank() == 0:
        ops[name][0, 3, 1, 2] = np.nan
    with pytest.raises(ValueError, match=f"{name} holds a NaN or infinity at \\[0,3,1,2\\]") as e:
        burst.attn_func(ops["q"], ops["k"], ops["v"], comm=comm, causal=True)
    same_on_every_rank(comm, str(e.value))


def test_control_exchange_names_a_different_call(comm):
    """Two ranks at different control exchanges of the module's communicator: the same error on
    every rank naming both calls, and the communicator stays usable."""
    c = _comm.watched(comm, 30, "test")
    if comm.Get_size() > 1:
        last = comm.Get_rank() == comm.Get_size() - 1
        with pytest.raises(ValueError, match="different collective calls") as e:
            c.exchange([1], "decode" if last else "forward")
        same_on_every_rank(comm, str(e.value))
    assert c.exchange([comm.Get_rank()], "ranks") == list(range(comm.Get_size()))
    assert isinstance(c, _C.Communicator) and c.timeout == 30


def test_unshard_shapes_disagree_raises_everywhere(comm):
    x = np.arange(2 * 8 * comm.Get_size() * 3, dtype=np.float32).reshape(2, 8 * comm.Get_size(), 3)
    local = burst.shard(x, comm, "zigzag")
    assert np.array_equal(burst.unshard(local, comm, "zigzag", comm_timeout=30), x)
    if comm.Get_size() > 1:
        bad = local[..., :2] if comm.Get_rank() == 0 else local
        with pytest.raises(ValueError, match="differ across ranks") as e:
            burst.unshard(bad, comm, "zigzag")
        same_on_every_rank(comm, str(e.value))
