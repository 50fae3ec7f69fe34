"""positions / shard / unshard against layouts written out independently here."""
import numpy as np
import pytest
import torch

import burst


def expected_positions(layout, P, r, S):
    if layout == "contiguous":
        n = S // P
        return np.arange(r * n, (r + 1) * n)
    if layout == "striped":
        return np.arange(r, S, P)
    if layout == "zigzag":   # 2P chunks; rank r holds chunks r and 2P-1-r (ring-flash-attention)
        c = S // (2 * P)
        return np.concatenate([np.arange(r * c, (r + 1) * c),
                               np.arange((2 * P - 1 - r) * c, (2 * P - r) * c)])
    raise AssertionError(layout)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped"])
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_positions_match_definition(layout, P):
    S = 24
    for r in range(P):
        got = burst.positions(S, None, layout, rank=r, world_size=P)
        assert np.array_equal(got, expected_positions(layout, P, r, S)), (layout, P, r, got)


def test_positions_reject_indivisible():
    with pytest.raises(ValueError):
        burst.positions(10, None, "zigzag", rank=0, world_size=4)
    with pytest.raises(ValueError):
        burst.positions(16, None, "diagonal", rank=0, world_size=2)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped", "balanced"])
def test_shard_unshard_roundtrip(comm, layout):
    S, P = 32, comm.Get_size()
    mask = burst.benchmark_mask("causal", S) if layout == "balanced" else None
    x = np.random.default_rng(0).standard_normal((2, S, 3, 4)).astype(np.float32)
    local = burst.shard(x, comm, layout, mask=mask)
    pos = burst.positions(S, comm, layout, mask=mask)
    assert np.array_equal(local, x[:, pos])
    assert np.array_equal(burst.unshard(local, comm, layout, mask=mask), x)
    # Every token is held by exactly one rank.
    all_pos = np.sort(np.concatenate(comm.allgather(pos)))
    assert np.array_equal(all_pos, np.arange(S)) and P >= 1


def test_torch_shard_is_differentiable(comm):
    x = torch.randn(1, 16, 2, generator=torch.Generator().manual_seed(0), requires_grad=True)
    local = burst.shard(x, comm, "zigzag")
    local.sum().backward()
    pos = burst.positions(16, comm, "zigzag")
    expect = torch.zeros(16)
    expect[torch.from_numpy(pos)] = 1
    assert torch.equal(x.grad[0, :, 0], expect)
    back = burst.unshard(local, comm, "zigzag")
    assert torch.equal(back, x.detach())
