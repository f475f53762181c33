"""detcoll.torch.ops.kthvalue and median: the index among equal values is that of the stable
ascending order (NaN last), checked against that order written out here over random slices with
many ties and NaN; values equal torch's; through patch(), torch.kthvalue and torch.median(dim)
run them and their gradient lands on that index; bad arguments refused by name."""

import pytest
import torch

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops


def data(seed, shape, nan_rows=True):
    """Few distinct non-zero values (many ties, no signed zeros), and NaN in some slices."""
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor([-3.5, -0.75, 0.125, 1.5, 1e30, -1e-30, 2.25])
    x = pool[torch.randint(0, len(pool), shape, generator=gen)]
    if nan_rows:
        x.view(-1)[torch.randint(0, x.numel(), (max(1, x.numel() // 40),), generator=gen)] = (
            float("nan"))
    return x


def stable_order(values):
    """Positions of a 1-D slice in the stable ascending order, NaN after every number."""
    key = [(1, 0.0, i) if v != v else (0, v, i) for i, v in enumerate(values.tolist())]
    return [i for _, _, i in sorted(key)]


def slices(x, dim):
    moved = x.movedim(dim, -1)
    return moved.reshape(-1, moved.shape[-1]), moved.shape[:-1]


@pytest.mark.parametrize("shape,dim", [((40, 9), 1), ((9, 40), 0), ((4, 6, 5), 1), ((31,), 0)])
def test_the_index_is_the_stable_orders(shape, dim):
    x = data(1, shape)
    rows, kept = slices(x, dim)
    n = rows.shape[1]
    for k in (1, (n + 1) // 2, n):
        got = ops.kthvalue(x, k, dim)
        want = [stable_order(r)[k - 1] for r in rows]
        assert got.indices.reshape(-1).tolist() == want, k
        assert got.indices.shape == kept
        theirs = torch.kthvalue(x, k, dim)
        assert torch.equal(got.values.isnan(), theirs.values.isnan())
        assert torch.equal(torch.nan_to_num(got.values), torch.nan_to_num(theirs.values))
    med = ops.median(x, dim)
    for r, value, index in zip(rows, med.values.reshape(-1), med.indices.reshape(-1)):
        if bool(torch.isnan(r).any()):
            assert torch.isnan(value) and int(index) == int(torch.isnan(r).nonzero()[0])
        else:
            assert int(index) == stable_order(r)[(n + 1) // 2 - 1]
            assert value == r[index]
    theirs = torch.median(x, dim)
    assert torch.equal(torch.nan_to_num(med.values), torch.nan_to_num(theirs.values))


def test_keepdim_integers_and_a_scalar():
    x = data(2, (5, 8), nan_rows=False).mul(4).long()
    got, theirs = ops.kthvalue(x, 3, 1, keepdim=True), torch.kthvalue(x, 3, 1, keepdim=True)
    assert got.values.shape == theirs.values.shape == (5, 1)
    assert torch.equal(got.values, theirs.values)
    assert ops.median(x, 0, keepdim=True).indices.shape == (1, 8)
    s = torch.tensor(2.5)
    assert ops.kthvalue(s, 1, 0) == (s, torch.tensor(0))
    assert ops.median(s, 0) == (s, torch.tensor(0))


def test_bad_arguments_are_refused_by_name():
    x = data(3, (4, 6))
    with pytest.raises(detcoll.InvalidArgumentError, match="kthvalue: k = 7 is out of range"):
        ops.kthvalue(x, 7, 1)
    with pytest.raises(detcoll.InvalidArgumentError, match="kthvalue: k = 0 is out of range"):
        ops.kthvalue(x, 0, 1)
    with pytest.raises(detcoll.InvalidArgumentError, match="dim 2 is out of range"):
        ops.median(x, 2)
    with pytest.raises(detcoll.InvalidArgumentError, match="no median"):
        ops.median(torch.zeros(3, 0), 1)
    with pytest.raises(detcoll.InvalidArgumentError, match="complex input has no order"):
        ops.kthvalue(torch.zeros(3, dtype=torch.complex64), 1)
    with pytest.raises(detcoll.InvalidArgumentError, match="k must be an integer, got 1.7"):
        ops.kthvalue(x, 1.7, 1)


def test_patched_torch_calls_run_them_and_the_gradient_follows_the_index():
    x = data(4, (12, 10))
    with dt.patched(devices=("cpu",), ops=["kthvalue", "median.dim"]):
        leaf = x.clone().requires_grad_()
        values, indices = torch.kthvalue(leaf, 4, 1)
        values.nan_to_num().sum().backward()
        med = torch.median(x, 0)
        calls = dt.patch_state()["calls"]
    assert calls == {"kthvalue": 1, "median.dim": 1}
    assert torch.equal(indices, ops.kthvalue(x, 4, 1).indices)
    assert torch.equal(med.indices, ops.median(x, 0).indices)
    expected = torch.zeros_like(x).scatter_(1, indices[:, None], 1.0)
    assert torch.equal(leaf.grad, expected)
