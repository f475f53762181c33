"""detcoll.torch.ops' resampling gathers in one process, no MPI: bilinear interpolation's backward
and 2-D max pooling (kernels/ops/resample.h).

float32 and float64 results equal PyTorch's CPU kernels bit for bit (PyTorch at its baseline CPU
capability: its AVX2 bilinear kernel contracts multiply-adds into FMAs); float16 and bfloat16
equal numpy loop references written here from the contract in resample.h (accumulate in float32,
round once). The bits do not depend on the thread count or the run. Bad input raises
detcoll.InvalidArgumentError naming the problem."""

import itertools
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import detcoll
from detcoll.torch import ops
from op_testing import (acc_of, assert_bits, bits, generator, narrow, one_torch_thread,  # noqa: F401
                        wide, widen)

EXACT = (torch.float32, torch.float64)  # PyTorch's CPU kernels are the reference
HALVES = (torch.float16, torch.bfloat16)  # the numpy loops are

# PyTorch's AVX2 build of upsample_bilinear2d_backward uses FMA and differs by rounding; its
# baseline build rounds as written. ctest runs this file with ATEN_CPU_CAPABILITY=default.
baseline_pytorch = pytest.mark.skipif(
    os.environ.get("ATEN_CPU_CAPABILITY") != "default",
    reason="bit equality with PyTorch's bilinear backward needs ATEN_CPU_CAPABILITY=default")



# ---- Bilinear: the reference, from the contract in resample.h ----------------------------------

def axis_weights(size_in, size_out, align_corners, scale, acc):
    """(i0, i1, l0, l1) for each output index of one axis. The scale is formed in the
    accumulation type acc, the source position in double, l1 rounded once from double to acc and
    l0 = 1 - l1 in acc."""
    if align_corners:
        step = acc(size_in - 1) / acc(size_out - 1) if size_out > 1 else acc(0)
    elif scale is not None and scale > 0:
        step = acc(1.0 / scale)
    else:
        step = acc(size_in) / acc(size_out)
    rows = []
    for o in range(size_out):
        if size_out == size_in:
            rows.append((o, o, acc(1), acc(0)))
            continue
        s = float(step)
        r = s * o if align_corners else s * (o + 0.5) - 0.5
        r = max(r, 0.0)
        i0 = min(math.floor(r), size_in - 1)
        i1 = i0 + (1 if i0 < size_in - 1 else 0)
        l1 = acc(min(max(r - i0, 0.0), 1.0))
        rows.append((i0, i1, acc(1) - l1, l1))
    return rows


def ref_bilinear_backward(grad, input_size, align_corners, scales=(None, None)):
    """PyTorch's scatter loop: for each output pixel (oh, ow), in order, the four terms
    (lh * lw) * g into (i0h, i0w), (i0h, i1w), (i1h, i0w), (i1h, i1w), in the accumulation type
    from +0, rounded once."""
    acc = acc_of(grad.dtype)
    n, c, out_h, out_w = grad.shape
    in_h, in_w = input_size[-2:]
    g = widen(grad).reshape(n * c, out_h, out_w)
    rows = axis_weights(in_h, out_h, align_corners, scales[0], acc)
    cols = axis_weights(in_w, out_w, align_corners, scales[1], acc)
    out = np.zeros((n * c, in_h, in_w), dtype=acc)
    for oh, (h0, h1, lh0, lh1) in enumerate(rows):
        for ow, (w0, w1, lw0, lw1) in enumerate(cols):
            v = g[:, oh, ow]
            for y, ly in ((h0, lh0), (h1, lh1)):
                for x, lx in ((w0, lw0), (w1, lw1)):
                    out[:, y, x] = out[:, y, x] + (ly * lx) * v
    return narrow(out.reshape(n, c, in_h, in_w), grad.dtype)


def torch_bilinear_grad(x, g, **kwargs):
    """PyTorch's gradient of F.interpolate(x, mode='bilinear', **kwargs) for grad_output g."""
    leaf = x.detach().clone().requires_grad_()
    y = F.interpolate(leaf, mode="bilinear", **kwargs)
    assert y.shape == g.shape
    (grad,) = torch.autograd.grad(y, leaf, g)
    return grad


def ours_bilinear(x, g, **kwargs):
    """ops.interpolate's forward and its gradient for grad_output g."""
    leaf = x.detach().clone().requires_grad_()
    y = ops.interpolate(leaf, mode="bilinear", **kwargs)
    (grad,) = torch.autograd.grad(y, leaf, g)
    return y.detach(), grad


# (input H, W) -> (output H, W): up, down, odd, an identity axis, output 1, input 1.
SIZES = [
    ((4, 5), (9, 13)),    # upsampling
    ((3, 3), (8, 7)),
    ((13, 11), (5, 4)),   # downsampling
    ((17, 9), (6, 3)),
    ((7, 9), (11, 5)),    # up one axis, down the other
    ((6, 7), (6, 15)),    # identity rows
    ((9, 5), (4, 5)),     # identity columns
    ((5, 6), (1, 1)),     # output 1
    ((5, 6), (1, 4)),
    ((1, 1), (4, 5)),     # input 1
    ((1, 6), (5, 3)),
    ((16, 15), (31, 33)),
]

SCALES = [2, 0.5, 1.7, 0.3, (2, 3), (0.6, 2.5), 1.3]


@baseline_pytorch
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", EXACT)
def test_bilinear_backward_equals_pytorch_for_sizes(dtype, align_corners):
    g = generator(f"bilinear sizes {dtype} {align_corners}")
    for (in_h, in_w), (out_h, out_w) in SIZES:
        x = wide(g, (2, 3, in_h, in_w), dtype)
        grad = wide(g, (2, 3, out_h, out_w), dtype)
        expected = torch_bilinear_grad(x, grad, size=(out_h, out_w), align_corners=align_corners)
        y, actual = ours_bilinear(x, grad, size=(out_h, out_w), align_corners=align_corners)
        assert_bits(y, F.interpolate(x, size=(out_h, out_w), mode="bilinear",
                                     align_corners=align_corners))
        assert_bits(actual, expected)
        # The aten-style entry point gives the same bits.
        assert_bits(ops.upsample_bilinear2d_backward(grad, (out_h, out_w), x.shape,
                                                     align_corners), expected)


@baseline_pytorch
@pytest.mark.parametrize("recompute", [None, True])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", EXACT)
def test_bilinear_backward_equals_pytorch_for_scale_factors(dtype, align_corners, recompute):
    g = generator(f"bilinear scales {dtype} {align_corners} {recompute}")
    for scale, (in_h, in_w) in itertools.product(SCALES, [(7, 10), (13, 5)]):
        x = wide(g, (2, 3, in_h, in_w), dtype)
        kwargs = dict(scale_factor=scale, align_corners=align_corners,
                      recompute_scale_factor=recompute)
        out_shape = F.interpolate(x, mode="bilinear", **kwargs).shape
        grad = wide(g, out_shape, dtype)
        expected = torch_bilinear_grad(x, grad, **kwargs)
        y, actual = ours_bilinear(x, grad, **kwargs)
        assert y.shape == out_shape
        assert_bits(actual, expected)


@baseline_pytorch
@pytest.mark.parametrize("dtype", EXACT)
def test_given_scale_factors_change_the_weights_as_in_pytorch(dtype):
    """A scale factor whose reciprocal is not in / out (1.7: 7 -> 11) changes the weights, so the
    scale-factor tests above check that the factor reaches the backward; aten's backward with the
    same arguments agrees."""
    g = generator(f"given scales {dtype}")
    for align_corners in (False, True):
        grad = wide(g, (2, 3, 11, 17), dtype)
        by_sizes = ops.upsample_bilinear2d_backward(grad, (11, 17), (2, 3, 7, 10), align_corners)
        by_scales = ops.upsample_bilinear2d_backward(grad, (11, 17), (2, 3, 7, 10), align_corners,
                                                     1.7, 1.7)
        for scales, actual in (((None, None), by_sizes), ((1.7, 1.7), by_scales)):
            expected = torch.ops.aten.upsample_bilinear2d_backward(
                grad, [11, 17], [2, 3, 7, 10], align_corners, *scales)
            assert_bits(actual, expected)
        if align_corners:  # align_corners ignores the factors
            assert_bits(by_scales, by_sizes)
        else:
            assert not torch.equal(by_scales, by_sizes)


@baseline_pytorch
@pytest.mark.parametrize("dtype", EXACT)
def test_the_numpy_reference_equals_pytorch(dtype):
    """The reference used for float16 and bfloat16 below, checked on float32 and float64."""
    g = generator(f"reference {dtype}")
    for ((in_h, in_w), (out_h, out_w)), align_corners in itertools.product(SIZES[:8],
                                                                         (False, True)):
        grad = wide(g, (2, 2, out_h, out_w), dtype)
        expected = torch.ops.aten.upsample_bilinear2d_backward(
            grad, [out_h, out_w], [2, 2, in_h, in_w], align_corners, None, None)
        assert_bits(ref_bilinear_backward(grad, (in_h, in_w), align_corners), expected)
    grad = wide(g, (2, 2, 11, 3), dtype)  # 7 x 10 at scale factors (1.7, 0.3)
    expected = torch.ops.aten.upsample_bilinear2d_backward(grad, [11, 3], [2, 2, 7, 10], False,
                                                           1.7, 0.3)
    assert_bits(ref_bilinear_backward(grad, (7, 10), False, (1.7, 0.3)), expected)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", HALVES)
def test_half_bilinear_backward_equals_the_numpy_loop(dtype, align_corners):
    g = generator(f"half bilinear {dtype} {align_corners}")
    for (in_h, in_w), (out_h, out_w) in SIZES:
        grad = wide(g, (2, 3, out_h, out_w), dtype)
        actual = ops.upsample_bilinear2d_backward(grad, (out_h, out_w), (2, 3, in_h, in_w),
                                                  align_corners)
        assert_bits(actual, ref_bilinear_backward(grad, (in_h, in_w), align_corners))
    # Given scale factors: the reciprocal formed in float32.
    for scale, (in_h, in_w) in itertools.product(SCALES, [(7, 10), (13, 5)]):
        sh, sw = scale if isinstance(scale, tuple) else (scale, scale)
        out_h, out_w = math.floor(in_h * sh), math.floor(in_w * sw)
        grad = wide(g, (2, 3, out_h, out_w), dtype)
        actual = ops.upsample_bilinear2d_backward(grad, (out_h, out_w), (2, 3, in_h, in_w),
                                                  align_corners, sh, sw)
        assert_bits(actual, ref_bilinear_backward(grad, (in_h, in_w), align_corners, (sh, sw)))


def test_half_accumulates_in_float32_not_in_half():
    """Sanity of the reference above: with many terms per input pixel, summing in float16 gives
    other bits than summing in float32 and rounding once; detcoll gives the latter."""
    g = generator("half accumulation")
    grad = wide(g, (1, 4, 40, 40), torch.float16)
    actual = ops.upsample_bilinear2d_backward(grad, (40, 40), (1, 4, 5, 5), False)
    assert_bits(actual, ref_bilinear_backward(grad, (5, 5), False))
    rows = axis_weights(5, 40, False, None, np.float32)
    half = np.zeros((4, 5, 5), dtype=np.float16)
    gh = grad.numpy().reshape(4, 40, 40)
    for oh, (h0, h1, lh0, lh1) in enumerate(rows):
        for ow, (w0, w1, lw0, lw1) in enumerate(rows):
            for y, ly in ((h0, lh0), (h1, lh1)):
                for x, lx in ((w0, lw0), (w1, lw1)):
                    half[:, y, x] = half[:, y, x] + np.float16(ly * lx) * gh[:, oh, ow]
    assert not torch.equal(actual, torch.from_numpy(half).reshape(1, 4, 5, 5))


def test_bfloat16_interpolate_backward_equals_the_numpy_loop():
    """Through autograd (PyTorch's CPU forward takes bfloat16), sizes and a given factor."""
    g = generator("bfloat16 interpolate")
    for align_corners in (False, True):
        x = wide(g, (2, 3, 6, 9), torch.bfloat16)
        for kwargs, scales in ((dict(size=(13, 4)), (None, None)),
                               (dict(scale_factor=(1.7, 0.5)), (1.7, 0.5))):
            out_shape = F.interpolate(x, mode="bilinear", align_corners=align_corners,
                                      **kwargs).shape
            grad = wide(g, out_shape, torch.bfloat16)
            _, actual = ours_bilinear(x, grad, align_corners=align_corners, **kwargs)
            assert_bits(actual, ref_bilinear_backward(grad, (6, 9), align_corners, scales))


@pytest.mark.parametrize("dtype", EXACT + HALVES)
def test_bilinear_backward_ignores_threads_and_repeats(dtype):
    """Enough planes and pixels for the host loop to split over threads, by planes or pixels."""
    g = generator(f"bilinear threads {dtype}")
    grad = wide(g, (4, 8, 96, 101), dtype)
    runs = []
    for threads in (1, 2, 0, 2, 1):
        ops.set_num_threads(threads)
        runs.append(ops.upsample_bilinear2d_backward(grad, (96, 101), (4, 8, 50, 47), False))
    for other in runs[1:]:
        assert_bits(other, runs[0])
    assert bool(runs[0].ne(0).any())
    x = wide(g, (4, 16, 50, 47), torch.float32)
    grad = wide(g, (4, 16, 30, 101), torch.float32)
    grads = []
    for threads in (1, 2, 0):
        ops.set_num_threads(threads)
        grads.append(ours_bilinear(x, grad, size=(30, 101), align_corners=True)[1])
    for other in grads[1:]:
        assert_bits(other, grads[0])


# ---- Max pooling -------------------------------------------------------------------------------

def tied(g, shape, dtype, specials=True):
    """Small integers (many ties), with some NaNs of distinct payloads and -infs; one plane all
    -inf and one window's worth of NaNs in a row."""
    x = torch.randint(-2, 3, shape, generator=g).to(torch.float32)
    if specials:
        u = torch.rand(shape, generator=g)
        x[u < 0.04] = float("-inf")
        nan_at = (u >= 0.04) & (u < 0.08)
        # NaNs with payloads 1, 2, 3, ...: which NaN a window reports shows in the bits.
        payloads = torch.arange(1, int(nan_at.sum()) + 1, dtype=torch.int32)
        x[nan_at] = (payloads | 0x7FC00000).view(torch.float32)
        x.view(-1, shape[-2], shape[-1])[0] = float("-inf")
    if dtype == torch.float32:
        return x
    return x.to(dtype)  # keeps NaN-ness (payloads may change), -inf and small integers


POOLS = [  # kernel_size, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 1, 1, 1, False),
    (3, 2, 1, 1, True),
    (2, 2, 1, 1, True),               # ceil: the last window would start in the padding
    (3, 3, 1, 1, True),
    ((3, 2), (2, 1), (1, 0), 1, False),
    (3, 2, 1, 2, True),
    ((2, 4), (1, 3), (1, 2), (2, 1), True),
    (4, 3, 2, 1, True),
    (1, 2, 0, 1, False),
    (5, 1, 2, 1, False),
]

SHAPES = [(2, 3, 9, 11), (3, 8, 7), (1, 2, 5, 6)]


@pytest.mark.parametrize("pool", POOLS, ids=str)
@pytest.mark.parametrize("dtype", EXACT)
def test_max_pool_forward_equals_pytorch(dtype, pool):
    g = generator(f"pool forward {dtype} {pool}")
    seen_nan = seen_minus_inf = False
    for shape in SHAPES:
        x = tied(g, shape, dtype)
        expected, expected_indices = F.max_pool2d(x, *pool, return_indices=True)
        seen_nan |= bool(torch.isnan(expected).any())
        seen_minus_inf |= bool(torch.isneginf(expected).any())
        out, indices = ops.max_pool2d_with_indices(x, *pool)
        assert torch.equal(indices, expected_indices)
        assert_bits(out, expected)
        out2, indices2 = ops.max_pool2d(x, *pool, return_indices=True)
        assert_bits(out2, expected)
        assert torch.equal(indices2, expected_indices)
        assert_bits(ops.max_pool2d(x, *pool), expected)
    # The inputs had what the rules are about: ties, NaNs in a window, an all -inf window.
    assert seen_nan and seen_minus_inf


@pytest.mark.parametrize("pool", POOLS, ids=str)
@pytest.mark.parametrize("dtype", HALVES)
def test_half_max_pool_forward_picks_what_float32_picks(dtype, pool):
    """float16 and bfloat16 values widen to float32 exactly, so PyTorch's float32 indices are the
    reference; each value is the input's own bits at its index."""
    g = generator(f"half pool forward {dtype} {pool}")
    for shape in SHAPES:
        x = tied(g, shape, dtype)
        _, expected_indices = F.max_pool2d(x.to(torch.float32), *pool, return_indices=True)
        out, indices = ops.max_pool2d_with_indices(x, *pool)
        assert torch.equal(indices, expected_indices)
        picked = torch.gather(bits(x).flatten(-2), -1, indices.flatten(-2)).reshape(out.shape)
        assert torch.equal(bits(out), picked)


def ref_max_pool_backward(grad, indices, input_shape, round_each=False):
    """gradInput[index[o]] += grad[o] for the outputs o of each plane in row-major order, in the
    accumulation type from +0, rounded once (round_each: to grad's dtype after every addition, a
    wrong sum to show that the tests can tell the two apart)."""
    h, w = input_shape[-2:]
    g = widen(grad).reshape(-1, grad.shape[-2] * grad.shape[-1])
    idx = indices.reshape(g.shape).numpy()
    out = np.zeros((g.shape[0], h * w), dtype=g.dtype)
    planes = np.arange(g.shape[0])
    for o in range(g.shape[1]):
        total = out[planes, idx[:, o]] + g[:, o]
        if round_each:
            total = widen(narrow(total, grad.dtype))
        out[planes, idx[:, o]] = total
    return narrow(out.reshape(input_shape), grad.dtype)


def most_hits(indices):
    """The largest number of outputs of one plane that name the same input position."""
    flat = indices.reshape(-1, indices.shape[-2] * indices.shape[-1])
    return max(int(torch.bincount(row).max()) for row in flat)


OVERLAPPING = [  # stride < kernel: several outputs may point at one input
    (3, 1, 1, 1, False),
    (3, 2, 1, 1, True),
    (4, 1, 2, 1, False),
    ((3, 2), (1, 2), (1, 1), (2, 1), True),
    (5, 2, 2, 2, True),
]


@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("pool", OVERLAPPING, ids=str)
@pytest.mark.parametrize("dtype", EXACT)
def test_max_pool_backward_equals_pytorch(dtype, pool, specials):
    g = generator(f"pool backward {dtype} {pool} {specials}")
    hits = 0
    for shape in ((2, 3, 12, 13), (3, 9, 8)):
        x = tied(g, shape, dtype, specials)
        leaf = x.clone().requires_grad_()
        y = F.max_pool2d(leaf, *pool)
        grad = wide(g, y.shape, dtype)
        (expected,) = torch.autograd.grad(y, leaf, grad)
        leaf = x.clone().requires_grad_()
        y, indices = ops.max_pool2d(leaf, *pool, return_indices=True)
        (actual,) = torch.autograd.grad(y, leaf, grad)
        assert_bits(actual, expected)
        assert_bits(ops.max_pool2d_with_indices_backward(grad, x, *pool, indices), expected)
        assert_bits(actual, ref_max_pool_backward(grad, indices, x.shape))
        hits = max(hits, most_hits(indices))
    assert hits >= 3  # sums of several terms, whose order shows in the bits


@pytest.mark.parametrize("pool", OVERLAPPING, ids=str)
@pytest.mark.parametrize("dtype", HALVES)
def test_half_max_pool_backward_equals_the_numpy_loop(dtype, pool):
    g = generator(f"half pool backward {dtype} {pool}")
    for shape in ((2, 3, 12, 13), (3, 9, 8)):
        x = tied(g, shape, dtype, specials=False)
        leaf = x.clone().requires_grad_()
        y, indices = ops.max_pool2d(leaf, *pool, return_indices=True)
        grad = wide(g, y.shape, dtype)
        (actual,) = torch.autograd.grad(y, leaf, grad)
        assert_bits(actual, ref_max_pool_backward(grad, indices, x.shape))
        assert most_hits(indices) >= 3


@pytest.mark.parametrize("dtype", HALVES)
def test_half_max_pool_backward_rounds_once(dtype):
    """Many outputs on one input (a 5 x 5 stride-1 window over few distinct values): the float32
    sum rounded once, which differs from rounding after every term."""
    g = generator(f"half pool rounding {dtype}")
    x = (torch.rand(3, 4, 20, 20, generator=g) < 0.1).to(dtype)
    y, indices = ops.max_pool2d_with_indices(x, 5, 1, 2)
    assert most_hits(indices) >= 10
    grad = wide(g, y.shape, dtype)
    actual = ops.max_pool2d_with_indices_backward(grad, x, 5, 1, 2, 1, False, indices)
    assert_bits(actual, ref_max_pool_backward(grad, indices, x.shape))
    wrong = ref_max_pool_backward(grad, indices, x.shape, round_each=True)
    assert not torch.equal(bits(actual), bits(wrong))


def test_max_pool_backward_takes_any_position_of_each_window():
    """Indices need not be maxima: random positions of each window (many outputs on few inputs)
    are summed in output order as PyTorch's backward sums them."""
    g = generator("arbitrary indices")
    x = torch.zeros(2, 3, 10, 11)
    kernel, stride, padding, dilation = (3, 4), (1, 2), (1, 2), (2, 1)
    out_h, out_w = F.max_pool2d(x, kernel, stride, padding, dilation, True).shape[-2:]
    indices = torch.empty(2, 3, out_h, out_w, dtype=torch.int64)
    for oh, ow in itertools.product(range(out_h), range(out_w)):
        ys = [oh * stride[0] - padding[0] + k * dilation[0] for k in range(kernel[0])]
        xs = [ow * stride[1] - padding[1] + k * dilation[1] for k in range(kernel[1])]
        taps = [y * 11 + c for y in ys for c in xs if 0 <= y < 10 and 0 <= c < 11]
        pick = torch.randint(0, len(taps), (2, 3), generator=g)
        indices[:, :, oh, ow] = torch.tensor(taps)[pick]
    for dtype in EXACT + HALVES:
        grad = wide(g, (2, 3, out_h, out_w), dtype)
        actual = ops.max_pool2d_with_indices_backward(grad, x.to(dtype), kernel, stride, padding,
                                                      dilation, True, indices)
        assert_bits(actual, ref_max_pool_backward(grad, indices, x.shape))
        if dtype in EXACT:
            expected = torch.ops.aten.max_pool2d_with_indices_backward(
                grad, x.to(dtype), kernel, stride, padding, dilation, True, indices)
            assert_bits(actual, expected)


@pytest.mark.parametrize("dtype", EXACT + HALVES)
def test_max_pool_ignores_threads_and_repeats(dtype):
    g = generator(f"pool threads {dtype}")
    x = tied(g, (4, 16, 64, 65), dtype, specials=dtype in EXACT)
    pool = (3, 1, 1, 1, False)
    runs = []
    for threads in (1, 2, 0, 2):
        ops.set_num_threads(threads)
        leaf = x.clone().requires_grad_()
        y, indices = ops.max_pool2d(leaf, *pool, return_indices=True)
        if not runs:
            grad = wide(g, y.shape, dtype)
        (gx,) = torch.autograd.grad(y, leaf, grad)
        runs.append((y.detach(), indices, gx))
    for y, indices, gx in runs[1:]:
        assert_bits(y, runs[0][0])
        assert torch.equal(indices, runs[0][1])
        assert_bits(gx, runs[0][2])
    assert most_hits(runs[0][1]) >= 3


# A window wholly in the padding: possible when the dilation exceeds the input (2 wide, padding 1,
# kernel 2, dilation 3: taps -1 and 2). PyTorch reports -inf there with its first tap's index;
# the backward sends that output's gradient nowhere.
def test_a_window_wholly_in_the_padding_gives_minus_infinity():
    storage = torch.arange(1.0, 65.0)  # the plane's 4 values, then more of the same storage
    x = storage[:4].view(1, 1, 2, 2)
    expected, expected_indices = F.max_pool2d(x, 2, padding=1, dilation=3, return_indices=True)
    out, indices = ops.max_pool2d_with_indices(x, 2, padding=1, dilation=3)
    assert torch.equal(indices, expected_indices)
    assert_bits(out, expected)
    grad = torch.ones_like(out)
    back = ops.max_pool2d_with_indices_backward(grad, x, 2, None, 1, 3, False, indices)
    assert torch.equal(back, torch.zeros_like(x))


# ---- Bad input ---------------------------------------------------------------------------------

def test_integer_tensors_are_refused():
    xi = torch.ones(1, 1, 4, 4, dtype=torch.int32)
    with pytest.raises(detcoll.InvalidArgumentError, match="floating point"):
        ops.interpolate(xi, size=(8, 8))
    with pytest.raises(detcoll.InvalidArgumentError, match="grad_output.*floating point"):
        ops.upsample_bilinear2d_backward(torch.ones(1, 1, 8, 8, dtype=torch.int64), (8, 8),
                                         (1, 1, 4, 4), False)
    with pytest.raises(detcoll.InvalidArgumentError, match="floating point"):
        ops.max_pool2d(xi, 2)
    with pytest.raises(detcoll.InvalidArgumentError, match="floating point"):
        ops.max_pool2d_with_indices(xi, 2)


def test_grad_output_of_the_wrong_shape_is_refused():
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"grad_output is \(2, 3, 8, 9\), expected \(2, 3, 8, 8\)"):
        ops.upsample_bilinear2d_backward(torch.zeros(2, 3, 8, 9), (8, 8), (2, 3, 4, 4), False)
    with pytest.raises(detcoll.InvalidArgumentError, match="input_size"):
        ops.upsample_bilinear2d_backward(torch.zeros(2, 3, 8, 8), (8, 8), (3, 4, 4), False)
    x = torch.rand(2, 3, 8, 8)
    out, indices = ops.max_pool2d_with_indices(x, 2)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"grad_output \(2, 3, 4, 5\)"):
        ops.max_pool2d_with_indices_backward(torch.zeros(2, 3, 4, 5), x, 2, 2, 0, 1, False,
                                             indices)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"indices \(2, 3, 4, 3\)"):
        ops.max_pool2d_with_indices_backward(torch.zeros_like(out), x, 2, 2, 0, 1, False,
                                             indices[..., :3])
    with pytest.raises(detcoll.InvalidArgumentError, match="int64"):
        ops.max_pool2d_with_indices_backward(torch.zeros_like(out), x, 2, 2, 0, 1, False,
                                             indices.to(torch.int32))


def test_bad_pooling_parameters_are_refused():
    x = torch.rand(1, 2, 6, 6)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"padding \(2, 2\).*half the kernel"):
        ops.max_pool2d(x, 3, padding=2)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"padding \(1, 3\).*half the kernel"):
        ops.max_pool2d(x, (3, 4), padding=(1, 3))
    with pytest.raises(detcoll.InvalidArgumentError, match="kernel size must be positive"):
        ops.max_pool2d(x, 0)
    with pytest.raises(detcoll.InvalidArgumentError, match="stride must be positive"):
        ops.max_pool2d(x, 2, stride=0)
    with pytest.raises(detcoll.InvalidArgumentError, match="dilation must be positive"):
        ops.max_pool2d(x, 2, dilation=(1, 0))
    with pytest.raises(detcoll.InvalidArgumentError, match="too small"):
        ops.max_pool2d(torch.rand(1, 1, 2, 2), 3)
    with pytest.raises(detcoll.InvalidArgumentError, match="3-D"):
        ops.max_pool2d(torch.rand(6, 6), 2)
    with pytest.raises(detcoll.InvalidArgumentError, match="one or two values"):
        ops.max_pool2d(x, (2, 2, 2))
    # PyTorch refuses the same parameters.
    with pytest.raises(RuntimeError):
        F.max_pool2d(x, 3, padding=2)


def test_an_index_outside_its_window_is_refused():
    g = generator("corrupt indices")
    x = tied(g, (2, 3, 9, 10), torch.float32, specials=False)
    pool = (3, 2, 1, 2, False)  # kernel, stride, padding, dilation, ceil_mode
    out, indices = ops.max_pool2d_with_indices(x, *pool)
    out_h, out_w = out.shape[-2:]
    grad = wide(g, out.shape)
    ops.max_pool2d_with_indices_backward(grad, x, *pool, indices)  # the real ones are fine
    # Output 7 of plane 1 (flat position out_h * out_w + 7): its window's taps.
    oh, ow = divmod(7, out_w)
    ys = [oh * 2 - 1 + 2 * k for k in range(3)]
    xs = [ow * 2 - 1 + 2 * k for k in range(3)]
    y, c = max(y for y in ys if 0 <= y < 9), max(c for c in xs if 0 <= c < 10)
    position = out_h * out_w + 7
    for bad in (-1, 90, 9 * 10 + 1000, (y + 1) * 10 + c, y * 10 + c - 1, (y + 2) * 10 + c):
        corrupt = indices.clone()
        corrupt.view(-1)[position] = bad
        with pytest.raises(detcoll.InvalidArgumentError,
                           match=rf"indices\[{position}\] = {bad} is not a position of output 7"):
            ops.max_pool2d_with_indices_backward(grad, x, *pool, corrupt)
    # Two bad: the first is named.
    corrupt = indices.clone()
    corrupt.view(-1)[position] = -5
    corrupt.view(-1)[3] = -7
    with pytest.raises(detcoll.InvalidArgumentError, match=r"indices\[3\] = -7"):
        ops.max_pool2d_with_indices_backward(grad, x, *pool, corrupt)


def test_unsupported_interpolation_is_refused():
    x = torch.rand(1, 2, 4, 4)
    with pytest.raises(detcoll.InvalidArgumentError, match="mode 'nearest'"):
        ops.interpolate(x, size=(8, 8), mode="nearest")
    with pytest.raises(detcoll.InvalidArgumentError, match="mode 'bicubic'"):
        ops.interpolate(x, size=(8, 8), mode="bicubic")
    with pytest.raises(detcoll.InvalidArgumentError, match="antialias"):
        ops.interpolate(x, size=(2, 2), antialias=True)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"4-D input.*\(2, 4, 4\)"):
        ops.interpolate(torch.rand(2, 4, 4), size=(8, 8))
    with pytest.raises(detcoll.InvalidArgumentError, match="4-D input"):
        ops.interpolate(torch.rand(1, 1, 2, 4, 4), size=(8, 8))
    with pytest.raises(detcoll.InvalidArgumentError, match="torch.Tensor"):
        ops.interpolate(np.zeros((1, 1, 4, 4), dtype=np.float32), size=(8, 8))
