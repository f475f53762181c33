"""detcoll.torch.ops' accumulating writes through indices (_indexing.py): index_put_ with and
without accumulate (and so the backward of x[idx], through patch()), put_, histc, and
embedding_bag's weight gradient in modes sum, mean and max.

index_put_, put_ and embedding_bag's max gradient are compared bit for bit with torch's CPU
kernels, which add in index order; histc with a loop written here (torch 1.13's CPU kernel divides
before it multiplies) and with torch away from the edges. Bad arguments are refused by name.
"""

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops
from op_testing import bits, wide


def index_cases(gen):
    """Indexing expressions over a [5, 6, 7] tensor, with heavy repetition: adjacent and
    separated index tensors, broadcasting, negative indices, bool masks, slices."""
    r = lambda hi, shape, lo=0: torch.randint(lo, hi, shape, generator=gen)  # noqa: E731
    return [
        (slice(None), r(6, (3, 4)), r(7, (4,), -7)),
        (r(5, (9,)), slice(None), r(7, (9,))),
        (r(5, (2, 8)), r(6, (2, 8), -6)),
        (Ellipsis, r(7, (30,))),
        (slice(None), torch.rand(6, generator=gen) > 0.4),
        (torch.rand(5, 6, generator=gen) > 0.3,),
        (r(5, (40,)),),
    ]


def aten_indices(expression, rank=3):
    """The Tensor?[] list aten's index_put_ takes for an indexing expression."""
    out = []
    for e in expression:
        if e is Ellipsis:
            out += [None] * (rank - (len(expression) - 1))
        elif isinstance(e, slice):
            out.append(None)
        else:
            out.append(e)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_index_put_accumulate_is_torchs_cpu_bits(dtype):
    gen = torch.Generator().manual_seed(1)
    for expression in index_cases(gen):
        base = wide(gen, (5, 6, 7), dtype)
        values = wide(gen, tuple(base[expression].shape), dtype)
        theirs = torch.ops.aten.index_put_(base.clone(), aten_indices(expression), values, True)
        ours = ops.index_put_(base.clone(), aten_indices(expression), values, True)
        assert torch.equal(bits(ours), bits(theirs)), expression
        # The gradient of the read x[expression], through patch(): autograd's index backward.
        leaf = base.clone().requires_grad_()
        leaf[expression].backward(values)
        with dt.patched(devices=("cpu",)):
            patched_leaf = base.clone().requires_grad_()
            patched_leaf[expression].backward(values)
            calls = dt.patch_state()["calls"]
        assert calls.get("_index_put_impl_", 0) >= 1
        assert torch.equal(bits(patched_leaf.grad), bits(leaf.grad)), expression


def test_index_put_without_accumulate_writes_the_last_repeated_value():
    gen = torch.Generator().manual_seed(2)
    base = wide(gen, (6, 4), torch.float64)
    rows = torch.randint(0, 6, (50,), generator=gen)
    values = wide(gen, (50, 4), torch.float64)
    expected = base.clone()
    for row, value in zip(rows.tolist(), values):
        expected[row] = value
    assert torch.equal(ops.index_put_(base.clone(), [rows], values), expected)
    with dt.patched(devices=("cpu",)):
        assigned = base.clone()
        assigned[rows] = values            # x[idx] = v runs index_put_
        assert dt.patch_state()["calls"].get("_index_put_impl_") == 1
    assert torch.equal(assigned, expected)


def test_index_put_on_a_non_contiguous_tensor_and_narrow_integers():
    gen = torch.Generator().manual_seed(3)
    base = wide(gen, (7, 5), torch.float32).t()       # [5, 7], not contiguous
    index = torch.randint(0, 7, (20,), generator=gen)
    values = wide(gen, (5, 20), torch.float32)
    theirs = torch.ops.aten.index_put_(base.clone(), [None, index], values, True)
    ours = ops.index_put_(base.clone(), [None, index], values, True)
    assert torch.equal(bits(ours), bits(theirs))
    counts = torch.zeros(6, dtype=torch.int16)
    with dt.patched(devices=("cpu",)):
        counts.index_put_((torch.tensor([1, 1, 5, 1]),), torch.tensor(2, dtype=torch.int16),
                          accumulate=True)
    assert counts.tolist() == [0, 6, 0, 0, 0, 2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_put_accumulate_is_torchs_cpu_bits(dtype):
    gen = torch.Generator().manual_seed(4)
    base = wide(gen, (4, 5), dtype)
    index = torch.randint(-20, 20, (300,), generator=gen)
    source = wide(gen, (300,), dtype)
    theirs = base.clone().put_(index, source, accumulate=True)
    assert torch.equal(bits(ops.put_(base.clone(), index, source, True)), bits(theirs))
    with dt.patched(devices=("cpu",)):
        patched = base.clone().put_(index, source, accumulate=True)
        assert dt.patch_state()["calls"].get("put_") == 1
    assert torch.equal(bits(patched), bits(theirs))
    # Without accumulate, the last of repeated indices.
    expected = base.clone().reshape(-1)
    for i, v in zip(index.tolist(), source):
        expected[i] = v
    assert torch.equal(ops.put_(base.clone(), index, source).reshape(-1), expected)


def histc_loop(values, bins, low, high, dtype):
    """floor((x - low) * bins / (high - low)) in dtype's arithmetic, by a loop."""
    import numpy as np
    np_type = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
    lo, hi = np_type(low), np_type(high)
    counts = [0] * bins
    for x in values.numpy().astype(np_type):
        if not (lo <= x <= hi):
            continue
        k = int((x - lo) * np_type(bins) / (hi - lo))
        counts[min(k, bins - 1)] += 1
    return torch.tensor(counts, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_against_a_loop_and_torch(dtype):
    gen = torch.Generator().manual_seed(5)
    for bins, low, high in ((300, 0, 0), (7, -1, 2), (100, -2.5, 1.75), (1, 0, 0), (33, 3, 3)):
        for values in (torch.linspace(-1, 2, 1001, dtype=dtype),   # values on the edges
                       torch.randn(3000, generator=gen, dtype=dtype) * 3):
            ours = ops.histc(values, bins, low, high)
            lo, hi = (low, high)
            if lo == hi:
                lo, hi = float(values.min()), float(values.max())
                if lo == hi:
                    lo, hi = lo - 1, hi + 1
            assert torch.equal(ours, histc_loop(values, bins, lo, hi, dtype))
            assert ours.dtype == dtype
    # Away from the edges torch 1.13's division-first kernel gives the same counts.
    values = torch.randn(3000, generator=gen, dtype=dtype) * 3
    with dt.patched(devices=("cpu",)):
        patched = torch.histc(values, 50, -4, 4)
        assert dt.patch_state()["calls"].get("histc") == 1
    assert torch.equal(patched, torch.histc(values, 50, -4, 4))


def test_histc_ignores_nan_and_takes_an_empty_input():
    counts = ops.histc(torch.tensor([1.0, float("nan"), 2.0, 5.0]), 4, 0, 4)
    assert counts.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert ops.histc(torch.zeros(0), 3, 0, 1).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_embedding_bag_gradient_through_patch(mode, dtype):
    gen = torch.Generator().manual_seed(6)
    weight = wide(gen, (12, 5), dtype)
    indices = torch.randint(0, 12, (60,), generator=gen)         # heavy repetition
    offsets = torch.tensor([0, 7, 7, 19, 30, 44, 44, 59])        # empty bags included
    up = wide(gen, (8, 5), dtype)

    def gradient():
        leaf = weight.clone().requires_grad_()
        F.embedding_bag(indices, leaf, offsets, mode=mode).backward(up)
        return leaf.grad

    theirs = gradient()
    with dt.patched(devices=("cpu",)):
        ours = gradient()
        calls = dt.patch_state()["calls"]
    assert calls.get("_embedding_bag_dense_backward") == 1
    if mode == "max":
        assert torch.equal(bits(ours), bits(theirs))   # torch's CPU loop: index_add per bag
    else:
        assert torch.allclose(ours, theirs, rtol=1e-12 if dtype == torch.float64 else 1e-5,
                              atol=0)
    # max: a loop over the bags' maxima.
    if mode == "max":
        _, _, _, maxima = torch.ops.aten._embedding_bag(weight, indices, offsets, False, 2)
        expected = torch.zeros_like(weight)
        bags = offsets.tolist() + [indices.numel()]
        for b in range(8):
            if bags[b + 1] > bags[b]:
                for d in range(5):
                    expected[maxima[b, d], d] += up[b, d]
        assert torch.equal(bits(ours), bits(expected))


def test_bad_arguments_are_refused_by_name():
    x = torch.zeros(5, 6)
    with pytest.raises(detcoll.InvalidArgumentError, match="index 5 is out of bounds for "
                                                           "dimension 0 with size 5"):
        ops.index_put_(x, [torch.tensor([5])], torch.tensor(1.0), True)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"indices\[0\] has dtype"):
        ops.index_put_(x, [torch.tensor([1.0])], torch.tensor(1.0), True)
    with pytest.raises(detcoll.InvalidArgumentError, match="do not broadcast together"):
        ops.index_put_(x, [torch.tensor([1, 2]), torch.tensor([1, 2, 3])], torch.tensor(1.0))
    with pytest.raises(detcoll.InvalidArgumentError, match="values of shape"):
        ops.index_put_(x, [torch.tensor([1, 2])], torch.zeros(3, 6))
    with pytest.raises(detcoll.InvalidArgumentError, match="values has dtype torch.float64"):
        ops.index_put_(x, [torch.tensor([1, 2])], torch.zeros(2, 6, dtype=torch.float64))
    with pytest.raises(detcoll.InvalidArgumentError, match="3 indices for a tensor of 2"):
        ops.index_put_(x, [torch.tensor([1])] * 3, torch.tensor(1.0))
    with pytest.raises(detcoll.InvalidArgumentError, match="mask"):
        ops.index_put_(x, [torch.ones(4, dtype=torch.bool)], torch.tensor(1.0))
    with pytest.raises(detcoll.InvalidArgumentError, match="index 30 is out of bounds"):
        ops.put_(x, torch.tensor([30]), torch.tensor([1.0]), True)
    with pytest.raises(detcoll.InvalidArgumentError, match="index has 2 elements and source 1"):
        ops.put_(x, torch.tensor([1, 2]), torch.tensor([1.0]), True)
    with pytest.raises(detcoll.InvalidArgumentError, match="bins must be > 0"):
        ops.histc(torch.zeros(3), 0)
    with pytest.raises(detcoll.InvalidArgumentError, match="must be larger than min"):
        ops.histc(torch.zeros(3), 4, 3, 1)
    with pytest.raises(detcoll.InvalidArgumentError, match="not finite"):
        ops.histc(torch.tensor([1.0, float("inf")]), 4)
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"histc: the range \[1.0001, 1.0002\] is empty in float16"):
        ops.histc(torch.zeros(3, dtype=torch.float16), 4, 1.0001, 1.0002)
    with pytest.raises(detcoll.InvalidArgumentError, match="floating point only"):
        ops.histc(torch.tensor([1, 2]), 4)
    grad = torch.zeros(2, 3)
    maxima = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(detcoll.InvalidArgumentError, match="mode 3"):
        ops.embedding_bag_dense_backward(grad, maxima, maxima, maxima, maxima, 4, False, 3)
    with pytest.raises(detcoll.InvalidArgumentError, match="scale_grad_by_freq"):
        ops.embedding_bag_dense_backward(grad, maxima, maxima, maxima, maxima, 4, True, 2)
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"maximum_indices\[0\] = 4 is out of range \[0, 4\)"):
        ops.embedding_bag_dense_backward(grad, maxima, maxima, torch.ones(2, dtype=torch.int64),
                                         maxima + 4, 4, False, 2)


def test_index_select_and_repeat_interleave_backward_run_index_add():
    # Their backward is index_add (torch's formula), which patch() replaces.
    gen = torch.Generator().manual_seed(8)
    x = wide(gen, (9, 6), torch.float32)
    picks = torch.randint(0, 9, (200,), generator=gen)
    repeats = torch.randint(0, 5, (9,), generator=gen)
    up_select = wide(gen, (200, 6), torch.float32)
    up_repeat = wide(gen, (int(repeats.sum()), 6), torch.float32)

    def gradients():
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        a.index_select(0, picks).backward(up_select)
        b.repeat_interleave(repeats, dim=0).backward(up_repeat)
        return a.grad, b.grad

    theirs = gradients()
    with dt.patched(devices=("cpu",)):
        ours = gradients()
        calls = dt.patch_state()["calls"]
    assert calls.get("index_add_", 0) + calls.get("index_add", 0) >= 2, calls
    expected = ops.index_add(torch.zeros(9, 6), 0, picks, up_select)
    assert torch.equal(bits(ours[0]), bits(expected))
    assert torch.equal(bits(ours[0]), bits(theirs[0]))     # torch's CPU loop: the same order
    rows = torch.repeat_interleave(torch.arange(9), repeats)
    assert torch.equal(bits(ours[1]), bits(ops.index_add(torch.zeros(9, 6), 0, rows, up_repeat)))


def test_ops_indexed_writes_refuse_tensors_that_want_a_gradient():
    # With or without accumulate, the ops write the data: autograd would give the values none
    # and the input a wrong one.
    x = torch.zeros(4)
    v = torch.ones(3, requires_grad=True)
    w = torch.zeros(4, requires_grad=True) * 1.0  # not a leaf: torch would let it be written
    for accumulate in (True, False):
        for call, wanted in (
                (lambda: ops.index_put(x, (torch.tensor([0, 0, 2]),), v, accumulate), "values"),
                (lambda: ops.index_put_(x.clone(), (torch.tensor([0, 0, 2]),), v, accumulate),
                 "values"),
                (lambda: ops.put_(x.clone(), torch.tensor([0, 0, 2]), v, accumulate), "source"),
                (lambda: ops.index_put(w, (torch.tensor([1]),), torch.ones(1), accumulate),
                 "input"),
                (lambda: ops.put_(w.clone(), torch.tensor([1]), torch.ones(1), accumulate),
                 "input")):
            with pytest.raises(detcoll.InvalidArgumentError, match=f"{wanted} require grad"):
                call()
    with pytest.raises(detcoll.InvalidArgumentError, match="index has dtype torch.uint8"):
        ops.put_(x.clone(), torch.tensor([0], dtype=torch.uint8), torch.ones(1))
    with torch.no_grad():
        assert ops.index_put(x, (torch.tensor([0, 0, 2]),), v, True).tolist() == [2, 0, 1, 0]
    # Under patch(), torch's formula gives the values their gradient through detcoll's kernel.
    with dt.patched(devices=("cpu",)):
        torch.index_put(x, (torch.tensor([0, 0, 2]),), v, accumulate=True).sum().backward()
    assert v.grad.tolist() == [1.0, 1.0, 1.0]


def test_index_put_on_a_channels_last_tensor_is_torchs():
    with dt.patched(devices=("cpu",)):
        x = torch.zeros(2, 1, 3, 3).to(memory_format=torch.channels_last)
        x.index_put_((torch.tensor([1, 1]),), torch.ones(1, 3, 3), accumulate=True)
    assert x.sum() == 18 and x[1].eq(2).all()


def test_the_gradient_of_an_empty_read_is_empty():
    with dt.patched(devices=("cpu",)):
        leaf = torch.randn(4, 0, requires_grad=True)
        leaf[torch.tensor([1, 1, 3])].sum().backward()
    assert leaf.grad.shape == (4, 0)


def test_histc_where_the_scaled_values_overflow():
    for values in (torch.tensor([-3e38, 3e38, 0.0]), torch.tensor([0.0, 30000.0, 60000.0]).half()):
        counts = ops.histc(values, 10)
        assert counts.tolist() == [1.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 1.0], values
    with pytest.raises(detcoll.InvalidArgumentError, match="bins must be an integer"):
        ops.histc(torch.zeros(3), 2.5)
    with pytest.raises(detcoll.InvalidArgumentError, match="must be numbers"):
        ops.histc(torch.zeros(3), 4, "a", 1)


def test_embedding_bag_gradient_refuses_inconsistent_bags():
    grad, rows = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(detcoll.InvalidArgumentError, match="bag_size has 3 elements for 2 bags"):
        ops.embedding_bag_dense_backward(grad, rows, rows, torch.ones(3, dtype=torch.int64), rows,
                                         4, False, 2)
    ids = torch.tensor([1, 2, 3])
    with pytest.raises(detcoll.InvalidArgumentError, match="offset2bag must be non-decreasing"):
        ops.embedding_bag_dense_backward(grad, ids, torch.tensor([1, 0, 1]), rows[0], rows, 4,
                                         False, 0)
