"""detcoll.torch.ops in one process, no MPI: bit equality with loop references written from the
contract (each destination's sources in increasing position, accumulated in float32 for float32,
float16 and bfloat16, float64 for float64, int64 for ints, rounded once), PyTorch's CPU ops,
run-to-run and thread-count invariance, order sensitivity, forward values and bad input."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import detcoll
from detcoll.torch import ops
from op_testing import (acc_of, assert_bits, bits, generator, narrow, one_torch_thread,  # noqa: F401
                        wide, widen)

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


# ---- The reference: numpy loops over source positions, in the accumulation type ---------------

def ref_scatter_add(x, dim, index, src):
    """acc[.., index[p], ..] += src[p] for every p of index in row-major order."""
    acc, s, idx = widen(x), widen(src), index.numpy()
    for p in np.ndindex(*idx.shape):
        q = list(p)
        q[dim] = idx[p]
        q = tuple(q)
        acc[q] = acc[q] + s[p]
    return narrow(acc, x.dtype)


def ref_index_add(x, dim, index, source, alpha):
    """acc.select(dim, index[i]) += alpha * source.select(dim, i), i increasing; the product is
    rounded in the accumulation type, and formed only when alpha != 1."""
    acc, s = widen(x), widen(source)
    a, w = np.moveaxis(acc, dim, 0), np.moveaxis(s, dim, 0)  # views
    alpha_acc = acc_of(x.dtype)(alpha)
    for i, d in enumerate(index.tolist()):
        a[d] = a[d] + (w[i] if alpha == 1 else alpha_acc * w[i])
    return narrow(acc, x.dtype)


def ref_segment(data, ids, segments, mean):
    """acc[ids[i]] += data[i] over data's rows (ids flattened), negative ids dropped; a mean
    divides by the count in the accumulation type, 0 for an empty segment."""
    flat = ids.reshape(-1).tolist()
    rows = widen(data).reshape(len(flat), -1)
    acc = np.zeros((segments, rows.shape[1]), dtype=rows.dtype)
    count = [0] * segments
    for i, k in enumerate(flat):
        if k >= 0:
            acc[k] = acc[k] + rows[i]
            count[k] += 1
    if mean:
        for k in range(segments):
            if count[k]:
                acc[k] = acc[k] / rows.dtype.type(count[k])
    return narrow(acc, data.dtype).reshape((segments,) + tuple(data.shape[ids.dim():]))


def ref_bincount(values, weights, minlength):
    w = widen(weights)
    acc = np.zeros(max(minlength, max(values.tolist()) + 1), dtype=w.dtype)
    for i, v in enumerate(values.tolist()):
        acc[v] = acc[v] + w[i]
    return narrow(acc, weights.dtype)


def ref_embedding_backward(grad, ids, num_weights, padding_idx, by_freq):
    """Row ids[i] += grad[i] (ids flattened), padding skipped; with by_freq each term is
    (1 / count of its id) * grad[i], the reciprocal and the product rounded in the acc type."""
    flat = ids.reshape(-1).tolist()
    g = widen(grad).reshape(len(flat), -1)
    one = g.dtype.type(1)
    acc = np.zeros((num_weights, g.shape[1]), dtype=g.dtype)
    for i, k in enumerate(flat):
        if k == padding_idx:
            continue
        acc[k] = acc[k] + ((one / g.dtype.type(flat.count(k))) * g[i] if by_freq else g[i])
    return narrow(acc, grad.dtype)


def ref_embedding_bag_backward(grad, ids, offsets, num_weights, mode, psw, padding_idx):
    """Position k of bag b adds grad[b] into row ids[k]: times psw[k] (sum), times 1 / (the bag's
    non-padding count, at least 1) (mean), products rounded in the acc type; padding skipped."""
    g, flat, starts = widen(grad), ids.tolist(), offsets.tolist()
    weights = widen(psw) if psw is not None else None
    one = g.dtype.type(1)
    acc = np.zeros((num_weights, g.shape[1]), dtype=g.dtype)
    for b, begin in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(flat)
        size = sum(1 for k in range(begin, end) if flat[k] != padding_idx)
        for k in range(begin, end):
            row = flat[k]
            if row == padding_idx:
                continue
            if mode == "mean":
                term = (one / g.dtype.type(max(size, 1))) * g[b]
            elif weights is not None:
                term = weights[k] * g[b]
            else:
                term = g[b]
            acc[row] = acc[row] + term
    return narrow(acc, grad.dtype)


# ---- Inputs: few destinations, many sources --------------------------------------------------

def scatter_case(label, dtype, dim):
    """3-D self with 3 destinations along dim, index 40 long there and smaller than src."""
    g = generator(label)
    d = dim % 3
    self_shape, index_shape = [4, 5, 3], [3, 4, 2]
    self_shape[d], index_shape[d] = 3, 40
    x = wide(g, self_shape, dtype)
    src = wide(g, [n + 1 for n in index_shape], dtype)
    index = torch.randint(0, 3, index_shape, generator=g)
    return x, index, src


def index_add_case(label, dtype, dim):
    g = generator(label)
    self_shape = [5, 6, 3]
    self_shape[dim] = 4
    source_shape = list(self_shape)
    source_shape[dim] = 60
    return (wide(g, self_shape, dtype), torch.randint(0, 4, (60,), generator=g),
            wide(g, source_shape, dtype))


def bag_case(label, dtype=torch.float32, mode="sum", weighted=False, unique=False):
    """12 weight rows; 8 bags over 200 indices, with empty bags (first, middle and last)."""
    g = generator(label)
    weight = wide(g, (40 if unique else 12, 6), dtype)
    ids = (torch.randperm(40, generator=g)[:30] if unique
           else torch.randint(0, 12, (200,), generator=g))
    offsets = (torch.tensor([0, 0, 5, 5, 6, 20, 30]) if unique
               else torch.tensor([0, 0, 30, 30, 31, 100, 150, 200]))
    psw = wide(g, (ids.numel(),), dtype, k=3) if weighted else None
    grad = wide(g, (offsets.numel(), 6), dtype)
    return weight, ids, offsets, psw, grad


# ---- 1. Bit equality with the reference ------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_is_the_ordered_reference(dtype, dim):
    x, index, src = scatter_case(f"scatter/{dtype}/{dim}", dtype, dim)
    before = x.clone()
    assert_bits(ops.scatter_add(x, dim, index, src), ref_scatter_add(x, dim % 3, index, src))
    assert_bits(x, before)  # out of place
    inplace = x.clone()
    assert ops.scatter_add_(inplace, dim, index, src) is inplace
    assert_bits(inplace, ref_scatter_add(x, dim % 3, index, src))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("alpha", [1, 0.37])
def test_index_add_is_the_ordered_reference(dtype, dim, alpha):
    x, index, source = index_add_case(f"index_add/{dtype}/{dim}", dtype, dim)
    before = x.clone()
    out = ops.index_add(x, dim, index, source, alpha=alpha)
    assert_bits(out, ref_index_add(x, dim, index, source, alpha))
    assert_bits(x, before)
    inplace = x.clone()
    assert ops.index_add_(inplace, dim, index, source, alpha=alpha) is inplace
    assert_bits(inplace, out)


def test_in_place_ops_write_back_into_non_contiguous_input():
    x, index, src = scatter_case("noncontig", torch.float32, 0)
    view = x.clone().transpose(0, 2).contiguous().transpose(0, 2)  # x's values, other strides
    assert not view.is_contiguous()
    assert ops.scatter_add_(view, 0, index, src) is view
    assert_bits(view.contiguous(), ref_scatter_add(x, 0, index, src))
    x, index, source = index_add_case("noncontig", torch.float32, 1)
    view = x.clone().transpose(0, 1).contiguous().transpose(0, 1)
    ops.index_add_(view, 1, index, source, alpha=0.37)
    assert_bits(view.contiguous(), ref_index_add(x, 1, index, source, 0.37))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("id_dims", [1, 2])
def test_unsorted_segment_sum_and_mean_are_the_ordered_reference(dtype, id_dims):
    g = generator(f"segment/{dtype}/{id_dims}")
    data = wide(g, (40, 4, 5), dtype)
    ids = torch.randint(-2, 5, data.shape[:id_dims], generator=g)  # negative: dropped
    segments = 7  # 5 and 6 stay empty
    total = ops.unsorted_segment_sum(data, ids, segments)
    assert_bits(total, ref_segment(data, ids, segments, mean=False))
    mean = ops.unsorted_segment_mean(data, ids, segments)
    assert_bits(mean, ref_segment(data, ids, segments, mean=True))
    assert mean.shape == (segments,) + tuple(data.shape[id_dims:])
    present = set(ids.reshape(-1).tolist())
    for k in range(segments):  # an empty segment is 0
        assert bool(mean[k].all()) if k in present else not bool(mean[k].any())
    assert 5 not in present and 6 not in present


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bincount_with_weights_is_the_ordered_reference(dtype):
    g = generator(f"bincount/{dtype}")
    values = torch.randint(0, 17, (3000,), generator=g)
    weights = wide(g, (3000,), dtype)
    out = ops.bincount(values, weights, minlength=20)
    assert out.dtype == dtype and out.shape == (20,)
    assert_bits(out, ref_bincount(values, weights, 20))
    counts = ops.bincount(values)
    assert counts.dtype == torch.int64
    assert counts.tolist() == [values.tolist().count(v) for v in range(17)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("by_freq", [False, True])
def test_embedding_backward_is_the_ordered_reference(dtype, padding_idx, by_freq):
    g = generator(f"embedding/{dtype}/{padding_idx}/{by_freq}")
    weight = wide(g, (10, 6), dtype).requires_grad_()
    ids = torch.randint(0, 10, (30, 7), generator=g)
    grad = wide(g, (30, 7, 6), dtype)
    ops.embedding(ids, weight, padding_idx=padding_idx, scale_grad_by_freq=by_freq).backward(grad)
    pad = -100 if padding_idx is None else padding_idx % 10
    expected = ref_embedding_backward(grad, ids, 10, pad, by_freq)
    assert_bits(weight.grad, expected)
    if padding_idx is not None:
        assert not bool(weight.grad[pad].any())
    direct = ops.embedding_dense_backward(grad, ids, 10, -1 if padding_idx is None else pad,
                                          by_freq)
    assert_bits(direct, expected)


BAG_CASES = [  # mode, per_sample_weights, padding_idx
    ("sum", False, None), ("sum", False, 3), ("sum", True, None), ("sum", True, 3),
    ("mean", False, None), ("mean", False, 3),
]


@pytest.mark.parametrize("mode,weighted,padding_idx", BAG_CASES)
def test_embedding_bag_backward_is_the_ordered_reference(mode, weighted, padding_idx):
    weight, ids, offsets, psw, grad = bag_case(f"bag/{mode}/{weighted}/{padding_idx}",
                                               mode=mode, weighted=weighted)
    weight.requires_grad_()
    ops.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=psw,
                      padding_idx=padding_idx).backward(grad)
    pad = -1 if padding_idx is None else padding_idx
    expected = ref_embedding_bag_backward(grad, ids, offsets, 12, mode, psw, pad)
    assert_bits(weight.grad, expected)
    direct = ops.embedding_bag_backward(grad, ids, offsets, 12, mode, psw, pad)
    assert_bits(direct, expected)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_backward_of_2d_input_is_the_ordered_reference(mode):
    g = generator(f"bag2d/{mode}")
    weight = wide(g, (9, 5)).requires_grad_()
    ids = torch.randint(0, 9, (30, 7), generator=g)
    psw = wide(g, (30, 7), k=3) if mode == "sum" else None
    grad = wide(g, (30, 5))
    ops.embedding_bag(ids, weight, mode=mode, per_sample_weights=psw,
                      padding_idx=4).backward(grad)
    offsets = torch.arange(0, 210, 7)
    flat_psw = None if psw is None else psw.reshape(-1)
    assert_bits(weight.grad,
                ref_embedding_bag_backward(grad, ids.reshape(-1), offsets, 9, mode, flat_psw, 4))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_ops_wrap_like_torch(dtype):
    """int64 accumulation, two's complement: the same as PyTorch in any order."""
    g = generator(f"ints/{dtype}")
    top = torch.iinfo(dtype).max // 2
    x = torch.randint(-top, top, (4, 3), generator=g, dtype=dtype)
    src = torch.randint(-top, top, (50, 3), generator=g, dtype=dtype)
    index = torch.randint(0, 4, (50, 3), generator=g)
    assert_bits(ops.scatter_add(x, 0, index, src), torch.scatter_add(x, 0, index, src))
    rows = torch.randint(0, 4, (50,), generator=g)
    assert_bits(ops.index_add(x, 0, rows, src, alpha=3), torch.index_add(x, 0, rows, src, alpha=3))


# ---- 2. PyTorch's CPU ops --------------------------------------------------------------------

def assert_within_order_error(ours, theirs, magnitude, terms, dtype):
    """|ours - theirs| <= 2 (terms + 1) u magnitude elementwise, magnitude = the sum of the
    |terms| (and |init|): two sums of the same terms, in any order, in a precision of unit
    roundoff u (or with products fused), each lie within (terms + 1) u magnitude of the exact
    sum. A wrong term or a lost term is far outside it."""
    u = torch.finfo(dtype).eps / 2
    bound = 2 * (terms + 1) * u * magnitude.double()
    diff = (ours.double() - theirs.double()).abs()
    assert bool((diff <= bound).all()), float((diff - bound).max())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_equals_torch(dtype, dim):
    x, index, src = scatter_case(f"torch/scatter/{dtype}/{dim}", dtype, dim)
    ours, theirs = ops.scatter_add(x, dim, index, src), torch.scatter_add(x, dim, index, src)
    if dtype in (torch.float32, torch.float64):
        assert_bits(ours, theirs)  # PyTorch's CPU kernel adds in index order, in the dtype
        return
    # PyTorch accumulates float16 / bfloat16 in the 16-bit type (a rounding per add), detcoll
    # in float32 with one rounding: equal within the order-error bound only.
    magnitude = torch.scatter_add(x.double().abs(), dim, index, src.double().abs())
    assert_within_order_error(ours, theirs, magnitude, 40, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("extra", [0, 7])
def test_one_dimensional_scatter_add_takes_src_by_position(dtype, extra):
    # Long enough for the one-pass loop on one thread; src may be longer than the index.
    g = generator(f"torch/scatter1d/{dtype}/{extra}")
    x, src = wide(g, [50], dtype), wide(g, [4000 + extra], dtype)
    index = torch.randint(0, 50, (4000,), generator=g)
    assert_bits(ops.scatter_add(x, 0, index, src), torch.scatter_add(x, 0, index, src))
    bad = index.clone()
    bad[3999] = 50
    before = x.clone()
    with pytest.raises(detcoll.InvalidArgumentError, match=r"index\[3999\] = 50 is out of range"):
        ops.scatter_add_(x, 0, bad, src)
    assert_bits(x, before)


def test_an_int64_alpha_past_two_to_the_53_is_exact():
    # A double cannot hold 2^53 + 1: the sum goes in two parts that it can, exact under int64's
    # wrapping sums; numpy's and 0-d tensors' integers alike.
    base = torch.arange(12).reshape(3, 4)
    index, source = torch.tensor([1, 3, 1]), torch.tensor([[1, -2, 3]] * 3)
    for alpha in (2**53 + 1, np.int64(-(2**53) - 3), torch.tensor(2**63 - 1), -(2**63)):
        expected = torch.index_add(base, 1, index, source, alpha=int(alpha))
        assert torch.equal(ops.index_add(base, 1, index, source, alpha=alpha), expected), alpha
    with pytest.raises(detcoll.InvalidArgumentError, match="alpha 2147483648 does not fit"):
        ops.index_add(base.int(), 1, index, source.int(), alpha=2**31)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("alpha", [1, 0.5, 0.37])
def test_index_add_equals_torch(dtype, dim, alpha):
    x, index, source = index_add_case(f"torch/index_add/{dtype}/{dim}", dtype, dim)
    ours = ops.index_add(x, dim, index, source, alpha=alpha)
    theirs = torch.index_add(x, dim, index, source, alpha=alpha)
    if dtype in (torch.float32, torch.float64) and alpha != 0.37:
        assert_bits(ours, theirs)  # exact products (alpha a power of 2), the same order
        return
    # 0.37: PyTorch fuses alpha * source + self (one rounding; detcoll rounds the product, as
    # the contract says); halves: PyTorch accumulates in the 16-bit type.
    magnitude = torch.index_add(x.double().abs(), dim, index, source.double().abs(), alpha=alpha)
    assert_within_order_error(ours, theirs, magnitude, 60, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bincount_equals_torch(dtype):
    g = generator(f"torch/bincount/{dtype}")
    values = torch.randint(0, 23, (5000,), generator=g)
    weights = wide(g, (5000,), dtype)
    assert_bits(ops.bincount(values, weights), torch.bincount(values, weights))
    assert_bits(ops.bincount(values, weights, 30), torch.bincount(values, weights, 30))
    assert_bits(ops.bincount(values), torch.bincount(values))


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("by_freq", [False, True])
def test_embedding_backward_equals_torch(padding_idx, by_freq):
    g = generator(f"torch/embedding/{padding_idx}/{by_freq}")
    weight = wide(g, (10, 6)).requires_grad_()
    ids = torch.randint(0, 10, (30, 7), generator=g)
    grad = wide(g, (30, 7, 6))
    F.embedding(ids, weight, padding_idx, scale_grad_by_freq=by_freq).backward(grad)
    theirs, weight.grad = weight.grad, None
    ops.embedding(ids, weight, padding_idx, scale_grad_by_freq=by_freq).backward(grad)
    ours, weight.grad = weight.grad, None
    ops.embedding(ids.int(), weight, padding_idx, scale_grad_by_freq=by_freq).backward(grad)
    assert_bits(weight.grad, ours)  # int32 ids, as torch takes them
    with pytest.raises(detcoll.InvalidArgumentError, match="embedding: input must be an int64 or int32 tensor, got torch.int16"):
        ops.embedding(ids.short(), weight)  # refused in the forward
    if not by_freq:
        assert_bits(weight.grad, theirs)  # PyTorch adds in position order, in float32
        return
    # PyTorch adds grad * (1 / count) with a fused multiply-add; detcoll rounds the product.
    magnitude = torch.zeros(10, 6, dtype=torch.float64).index_add_(
        0, ids.reshape(-1), grad.double().abs().reshape(-1, 6))
    terms = int(torch.bincount(ids.reshape(-1)).max())
    assert_within_order_error(weight.grad, theirs, magnitude, terms, torch.float32)


@pytest.mark.parametrize("mode,weighted,padding_idx", BAG_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_embedding_bag_backward_equals_torch(mode, weighted, padding_idx, dtype):
    """bfloat16 is left out: PyTorch 1.13's CPU embedding_bag refuses it."""
    for unique in (True, False):
        label = f"torch/bag/{mode}/{weighted}/{padding_idx}/{dtype}/{unique}"
        weight, ids, offsets, psw, grad = bag_case(label, dtype, mode, weighted, unique)
        weight.requires_grad_()
        F.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=psw,
                        padding_idx=padding_idx).backward(grad)
        theirs, weight.grad = weight.grad, None
        ops.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=psw,
                          padding_idx=padding_idx).backward(grad)
        if unique and (dtype, mode) != (torch.float16, "mean"):
            assert_bits(weight.grad, theirs)  # one term per row: no order, no accumulation
            continue
        # PyTorch orders a row's terms by an unstable sort of the indices (not by position),
        # accumulates float16 in float16 and rounds float16's 1 / bag size to float16 (detcoll:
        # to float32): equal within the order-error bound.
        magnitude = ops.embedding_bag_backward(
            grad.double().abs(), ids, offsets, weight.shape[0], mode,
            None if psw is None else psw.double().abs(),
            -1 if padding_idx is None else padding_idx)
        terms = int(torch.bincount(ids).max())
        assert_within_order_error(weight.grad, theirs, magnitude, terms, dtype)


# ---- 3. Run to run and threads ---------------------------------------------------------------

def big_calls():
    """Each op on 10^6 source elements into 1000 destinations."""
    g = generator("big")
    n, m = 10**6, 1000
    values, index = wide(g, (n,)), torch.randint(0, m, (n,), generator=g)
    target = wide(g, (m,))
    rows, width = n // 8, 8
    table, row_index = values.reshape(rows, width), index[:rows]
    offsets = torch.arange(0, rows, 100)
    return {
        "scatter_add": lambda: ops.scatter_add(target, 0, index, values),
        "index_add": lambda: ops.index_add(target.repeat(width).reshape(m, width), 0,
                                           row_index, table, alpha=0.37),
        "segment_mean": lambda: ops.unsorted_segment_mean(values, index - 1, m),
        "bincount": lambda: ops.bincount(index, values),
        "embedding": lambda: ops.embedding_dense_backward(table, row_index, m, 7, True),
        "embedding_bag": lambda: ops.embedding_bag_backward(
            table[:offsets.numel()], row_index, offsets, m, "mean", None, 7),
    }


def test_same_bits_run_to_run_and_for_any_thread_count():
    calls = big_calls()
    try:
        ops.set_num_threads(1)
        baseline = {name: call() for name, call in calls.items()}
        for threads in (1, 2, 7, 0):
            ops.set_num_threads(threads)
            for name, call in calls.items():
                assert torch.equal(bits(call()), bits(baseline[name])), (name, threads)
    finally:
        ops.set_num_threads(0)
    assert baseline["bincount"].shape == (1000,) and bool(baseline["bincount"].all())


def test_set_num_threads_refuses_a_negative_count():
    with pytest.raises(detcoll.InvalidArgumentError, match="threads is -1"):
        ops.set_num_threads(-1)


# ---- 4. The order is the defined one ---------------------------------------------------------

def order_case(name, perm=None):
    """(detcoll's result, the reference's) for one op on 400 sources into 4 destinations, the
    sources (with their indices) taken in the order perm."""
    g = generator(f"order/{name}")
    n = 400
    values, index = wide(g, (n, 3)), torch.randint(0, 4, (n,), generator=g)
    if perm is not None:
        values, index = values[perm], index[perm]
    x = wide(g, (4, 3))
    if name == "scatter_add":
        full = index[:, None].expand(n, 3).contiguous()
        return ops.scatter_add(x, 0, full, values), ref_scatter_add(x, 0, full, values)
    if name == "index_add":
        return (ops.index_add(x, 0, index, values, alpha=0.37),
                ref_index_add(x, 0, index, values, 0.37))
    if name == "segment_sum":
        return (ops.unsorted_segment_sum(values, index, 4),
                ref_segment(values, index, 4, mean=False))
    if name == "bincount":
        return ops.bincount(index, values[:, 0]), ref_bincount(index, values[:, 0], 0)
    if name == "embedding":
        return (ops.embedding_dense_backward(values, index, 4, -1, False),
                ref_embedding_backward(values, index, 4, -1, False))
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["scatter_add", "index_add", "segment_sum", "bincount",
                                  "embedding"])
def test_permuted_sources_change_bits_and_the_reference_follows(name):
    perm = torch.randperm(400, generator=generator(f"perm/{name}"))
    ours, expected = order_case(name)
    assert_bits(ours, expected)
    permuted, permuted_expected = order_case(name, perm)
    assert_bits(permuted, permuted_expected)
    assert not torch.equal(bits(permuted), bits(ours)), "the order left no trace"


# ---- 5. Forward values -----------------------------------------------------------------------

@pytest.mark.parametrize("padding_idx", [None, 3, -2])
def test_embedding_forward_equals_functional(padding_idx):
    g = generator(f"forward/embedding/{padding_idx}")
    weight = wide(g, (10, 6))
    ids = torch.randint(0, 10, (5, 7), generator=g)
    assert_bits(ops.embedding(ids, weight, padding_idx),
                F.embedding(ids, weight, padding_idx))


@pytest.mark.parametrize("mode,weighted,padding_idx", BAG_CASES + [("mean", False, -3)])
def test_embedding_bag_forward_equals_functional(mode, weighted, padding_idx):
    weight, ids, offsets, psw, _ = bag_case(f"forward/bag/{mode}/{weighted}/{padding_idx}",
                                            mode=mode, weighted=weighted)
    assert_bits(ops.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=psw,
                                  padding_idx=padding_idx),
                F.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=psw,
                                padding_idx=padding_idx))
    square = ids[:196].reshape(28, 7)
    square_psw = None if psw is None else psw[:196].reshape(28, 7)
    assert_bits(ops.embedding_bag(square, weight, mode=mode, per_sample_weights=square_psw,
                                  padding_idx=padding_idx),
                F.embedding_bag(square, weight, mode=mode, per_sample_weights=square_psw,
                                padding_idx=padding_idx))


# ---- 6. Bad input ----------------------------------------------------------------------------

def longs(*values):
    return torch.tensor(values, dtype=torch.int64)


X = torch.zeros(4, 3)
BAD = [  # (call, a pattern of the message)
    (lambda: ops.scatter_add(X, 0, longs(0, 1, 2, 3, 0, 4).reshape(2, 3), torch.ones(2, 3)),
     r"scatter_add: index value 4 at position 5 is out of range \[0, 4\) of dim 0"),
    (lambda: ops.scatter_add(X, 1, longs(0, -1, 2).reshape(1, 3), torch.ones(1, 3)),
     r"index value -1 at position 1 is out of range \[0, 3\) of dim 1"),
    (lambda: ops.index_add(X, 0, longs(0, 4), torch.ones(2, 3)),
     r"index_add: index\[1\] = 4 is out of range \[0, 4\)"),
    (lambda: ops.embedding_dense_backward(torch.ones(3, 2), longs(0, 5, 1), 5),
     r"embedding_backward: indices\[1\] = 5 is out of range \[0, 5\)"),
    (lambda: ops.embedding_bag_backward(torch.ones(2, 3), longs(0, 9), longs(0, 1), 4),
     r"embedding_bag_backward: indices\[1\] = 9 is out of range \[0, 4\)"),
    (lambda: ops.bincount(longs(0, -1, 1)), r"bincount: input\[1\] = -1 is negative"),
    (lambda: ops.unsorted_segment_sum(torch.ones(4, 3), longs(0, 1, 2, 0), 2),
     r"segment_ids\[2\] = 2 is out of range \[0, 2\)"),
    # shapes
    (lambda: ops.scatter_add(X, 0, torch.zeros(5, 3, dtype=torch.int64), torch.ones(4, 3)),
     r"index \[5, 3\] is larger than src \[4, 3\]"),
    (lambda: ops.scatter_add(X, 0, torch.zeros(2, 4, dtype=torch.int64), torch.ones(4, 4)),
     r"than self \[4, 3\] in dimension 1"),
    (lambda: ops.scatter_add(X, 2, torch.zeros(2, 3, dtype=torch.int64), torch.ones(4, 4)),
     r"dim 2 is out of range for a tensor of 2 dimensions"),
    (lambda: ops.index_add(X, 0, longs(0, 1), torch.ones(3, 3)),
     r"source \[3, 3\] must be self \[4, 3\] with dimension 0 of the index's length 2"),
    (lambda: ops.index_add(X, 0, longs(0, 1), torch.ones(2, 4)), r"source \[2, 4\] must be self"),
    (lambda: ops.index_add(X, 0, longs(0, 1).reshape(1, 2), torch.ones(2, 3)),
     r"index must be 1-D"),
    (lambda: ops.unsorted_segment_sum(torch.ones(4, 3), longs(0, 0, 1), 2),
     r"segment_ids \(3,\) must be a prefix of data's shape \(4, 3\)"),
    (lambda: ops.bincount(longs(0, 1, 1), torch.ones(2)),
     r"weights \(2,\) and input \(3,\) differ"),
    (lambda: ops.bincount(longs(0, 1, 1).reshape(1, 3)), r"input must be 1-D"),
    (lambda: ops.embedding_dense_backward(torch.ones(3, 2), longs(0, 1), 5),
     r"grad_output \(3, 2\) does not match indices of 2 elements"),
    (lambda: ops.embedding_bag_backward(torch.ones(3, 3), longs(0, 1), longs(0, 1), 4),
     r"grad_output \(3, 3\) must be \[bags, dim\] with bags = 2 offsets"),
    (lambda: ops.embedding_bag_backward(torch.ones(3, 3), longs(0, 1), longs(0, 2, 1), 4),
     r"offsets\[2\] = 1 breaks the rule"),  # the first that breaks the order
    # dtypes
    (lambda: ops.scatter_add(X, 0, torch.zeros(4, 3, dtype=torch.int32), torch.ones(4, 3)),
     r"scatter_add: index must be an int64 tensor, got torch.int32"),
    (lambda: ops.index_add(X, 0, longs(0, 1).int(), torch.ones(2, 3)),
     r"index_add: index must be an int64 tensor, got torch.int32"),
    (lambda: ops.unsorted_segment_sum(torch.ones(4, 3), longs(0, 1, 1, 0).int(), 2),
     r"segment_ids must be an int64 tensor, got torch.int32"),
    (lambda: ops.bincount(longs(0, 1).int()), r"bincount: input must be an int64 tensor"),
    (lambda: ops.embedding_dense_backward(torch.ones(2, 2), longs(0, 1).int(), 5),
     r"indices must be an int64 tensor, got torch.int32"),
    (lambda: ops.scatter_add(X, 0, torch.zeros(4, 3, dtype=torch.int64), torch.ones(4, 3).double()
                             ),
     r"scatter_add: src has dtype torch.float64, expected torch.float32"),
    (lambda: ops.index_add(X, 0, longs(0, 1), torch.ones(2, 3).half()),
     r"index_add: source has dtype torch.float16, expected torch.float32"),
    (lambda: ops.embedding_bag_backward(torch.ones(2, 3), longs(0, 1), longs(0, 1), 4,
                                        per_sample_weights=torch.ones(2).double()),
     r"per_sample_weights has dtype torch.float64, expected torch.float32"),
    (lambda: ops.scatter_add(torch.zeros(3, dtype=torch.uint8), 0, longs(0),
                             torch.ones(1, dtype=torch.uint8)),
     r"input has dtype torch.uint8"),
    (lambda: ops.embedding_dense_backward(torch.ones(3, 2, dtype=torch.int32), longs(0, 1, 1), 5),
     r"gradients are floating point, not int32"),
    # modes
    (lambda: ops.embedding_bag_backward(torch.ones(2, 3), longs(0, 1), longs(0, 1), 4, mode="max"),
     r"mode 'max'; sum and mean are supported"),
    (lambda: ops.embedding_bag_backward(torch.ones(2, 3), longs(0, 1), longs(0, 1), 4, mode="mean",
                                        per_sample_weights=torch.ones(2)),
     r"per_sample_weights need mode sum"),
    (lambda: ops.embedding(longs(0), torch.ones(3, 2), max_norm=1.0), r"max_norm"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_invalid_argument_naming_the_problem(call, message):
    with pytest.raises(detcoll.InvalidArgumentError, match=message):
        call()


@pytest.mark.parametrize("contiguous", [True, False])
def test_a_failed_in_place_op_leaves_its_input_untouched(contiguous):
    g = generator(f"untouched/{contiguous}")
    x = wide(g, (3, 4)) if contiguous else wide(g, (4, 3)).t()
    before = x.clone()
    index = torch.randint(0, 3, (3, 4), generator=g)
    index[2, 3] = 3  # the last position: every other one could already have been added
    with pytest.raises(detcoll.InvalidArgumentError, match="at position 11"):
        ops.scatter_add_(x, 0, index, wide(g, (3, 4)))
    assert_bits(x.contiguous(), before.contiguous())
    with pytest.raises(detcoll.InvalidArgumentError, match=r"index\[5\] = -1"):
        ops.index_add_(x, 0, longs(0, 1, 2, 0, 1, -1), wide(g, (6, 4)))
    assert_bits(x.contiguous(), before.contiguous())


def test_rank_mismatch_raises_invalid_argument():
    with pytest.raises(detcoll.InvalidArgumentError, match="same number of dimensions"):
        ops.scatter_add(X, 0, longs(0, 1), torch.ones(2))
    with pytest.raises(detcoll.InvalidArgumentError, match="same number of dimensions"):
        ops.index_add(X, 0, longs(0, 1), torch.ones(2))


def test_negative_segment_count_raises_invalid_argument():
    with pytest.raises(detcoll.InvalidArgumentError, match="num_segments is -1"):
        ops.unsorted_segment_sum(torch.ones(4, 3), longs(0, 1, 1, 0), -1)


def test_short_per_sample_weights_raise_invalid_argument():
    with pytest.raises(detcoll.InvalidArgumentError, match="3 per_sample_weights for 4 indices"):
        ops.embedding_bag_backward(torch.ones(2, 4), longs(0, 1, 2, 3), longs(0, 2), 4,
                                   per_sample_weights=torch.ones(3))


def test_zero_dimensional_scatter_add_checks_its_index():
    one = torch.tensor(1.0)
    assert ops.scatter_add(one, 0, torch.tensor(0), torch.tensor(2.0)).item() == 3.0
    with pytest.raises(detcoll.InvalidArgumentError, match="out of range"):
        ops.scatter_add(one, 0, torch.tensor(10**9), torch.tensor(2.0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: CUDA tensors cannot be made")
def test_cuda_tensors_are_refused():
    with pytest.raises(detcoll.InvalidArgumentError, match="is on cuda"):
        ops.scatter_add(X.cuda(), 0, torch.zeros(4, 3, dtype=torch.int64).cuda(),
                        torch.ones(4, 3).cuda())


# ---- sums with a fixed tree ----

def tree_reference(values):
    """The fixed tree from its definition, in float32: chunks of 32 summed in order, then
    adjacent pairs level by level, an odd last one carried up."""
    x = [np.float32(v) for v in values]
    if not x:
        return np.float32(0)
    level = []
    for start in range(0, len(x), 32):
        s = x[start]
        for v in x[start + 1:start + 32]:
            s = np.float32(s + v)
        level.append(s)
    while len(level) > 1:
        level = [np.float32(level[i] + level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


def test_sum_follows_the_fixed_tree_and_not_the_thread_count():
    g = torch.Generator().manual_seed(31)
    x = wide(g, (3, 200, 7))
    for dim in (1, (0, 1), -1):
        ours = ops.sum(x, dim)
        axes = [d % 3 for d in (dim if isinstance(dim, tuple) else (dim,))]
        moved = x.permute([d for d in range(3) if d not in axes] + axes)
        rows = moved.reshape(-1, math.prod(x.shape[d] for d in axes))
        expected = torch.tensor([tree_reference(r.tolist()) for r in rows]).reshape(ours.shape)
        assert_bits(ours, expected)
        torch.testing.assert_close(ours, x.sum(dim), rtol=1e-4, atol=1e-3)
        for threads in (1, 2, 7):
            ops.set_num_threads(threads)
            assert_bits(ops.sum(x, dim), ours)
        ops.set_num_threads(0)
    assert ops.sum(x, 1, keepdim=True).shape == (3, 1, 7)
    for empty in ((), []):  # torch's empty dim list: every axis
        expected = ops.sum(x)
        assert_bits(ops.sum(x, empty), expected)
        assert ops.sum(x, empty).shape == torch.sum(x, dim=empty).shape == ()
        assert_bits(ops.sum(x, empty, keepdim=True), expected.reshape(1, 1, 1))
        assert torch.sum(x, dim=empty, keepdim=True).shape == (1, 1, 1)


def test_bias_add_grad_is_the_same_in_both_layouts():
    g = torch.Generator().manual_seed(32)
    nchw = wide(g, (4, 6, 9, 11))
    first = ops.bias_add_grad(nchw, "NCHW")
    assert_bits(first, ops.bias_add_grad(nchw.permute(0, 2, 3, 1).contiguous(), "NHWC"))
    torch.testing.assert_close(first, nchw.sum((0, 2, 3)), rtol=1e-4, atol=1e-3)
    with pytest.raises(detcoll.InvalidArgumentError, match="data_format"):
        ops.bias_add_grad(nchw, "NWC")
    with pytest.raises(detcoll.InvalidArgumentError, match="at least 2 dimensions"):
        ops.bias_add_grad(torch.ones(5))
    with pytest.raises(detcoll.InvalidArgumentError, match="out of range"):
        ops.sum(nchw, 4)
    with pytest.raises(detcoll.InvalidArgumentError, match="twice"):
        ops.sum(nchw, (1, -3))
