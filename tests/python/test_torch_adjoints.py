"""detcoll.torch.ops' window and resampling backwards (_adjoints.py): reflection and replication
padding, average, adaptive average and max pooling (through indices), max_unpool, and linear,
bilinear, trilinear and bicubic interpolation.

Where torch's CPU loop adds in the order detcoll's does (padding, pooling, bicubic), the bits
are compared with torch's CPU kernel, through patch() so that the unchanged F.* backward runs ours.
torch's CPU build fuses the linear family's multiply-adds, so that family is compared with a
float64 loop written here, within a bound on float32 rounding. Bad arguments are refused by name.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops
from op_testing import bits, wide


def input_gradient(fn, x, up):
    leaf = x.clone().requires_grad_()
    fn(leaf).backward(up)
    return leaf.grad


def torch_and_patched(fn, x, gen, prefix):
    """torch's CPU gradient and the patched one for the same upstream gradient, and how many times
    a patched kernel whose name starts with prefix ran."""
    up = wide(gen, tuple(fn(x).shape), x.dtype)
    theirs = input_gradient(fn, x, up)
    with dt.patched(devices=("cpu",)):
        ours = input_gradient(fn, x, up)
        calls = dt.patch_state()["calls"]
    return theirs, ours, sum(v for k, v in calls.items() if k.startswith(prefix)), up


DTYPES = [torch.float32, torch.float64]

PADS = [
    ((2, 3, 9), (2, 3)), ((2, 3, 9), (0, 8)), ((2, 3, 6, 7), (1, 2, 3, 4)),
    ((3, 6, 7), (5, 0, 2, 1)), ((1, 2, 4, 5, 6), (1, 2, 2, 1, 3, 0)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", PADS)
def test_padding_backward_is_torchs_cpu_bits(shape, pad, mode, dtype):
    gen = torch.Generator().manual_seed(sum(shape) + sum(pad))
    x = wide(gen, shape, dtype)
    theirs, ours, calls, up = torch_and_patched(lambda t: F.pad(t, pad, mode=mode), x, gen,
                                                "re")
    assert calls == 1
    assert torch.equal(bits(ours), bits(theirs))
    direct = (ops.reflection_pad_backward if mode == "reflect" else
              ops.replication_pad_backward)(up, shape, pad)
    assert torch.equal(bits(direct), bits(theirs))


def test_replication_with_negative_padding_crops():
    gen = torch.Generator().manual_seed(3)
    x = wide(gen, (2, 3, 9), torch.float64)
    theirs, ours, calls, _ = torch_and_patched(lambda t: F.pad(t, (-2, 3), mode="replicate"), x,
                                               gen, "replication")
    assert calls == 1 and torch.equal(bits(ours), bits(theirs))


AVG = [
    ((2, 3, 9, 10), (3, 3), (2, 2), (1, 1), False, True, None),
    ((2, 3, 9, 10), (3, 2), (2, 1), (1, 0), True, False, None),
    ((1, 2, 7, 8), (2, 2), (2, 2), (0, 0), True, True, 3),
    ((1, 2, 5, 6, 7), (3, 2, 3), (2, 2, 1), (1, 0, 1), True, False, None),
    ((1, 2, 5, 6, 7), (2, 2, 2), (1, 2, 2), (0, 1, 1), False, True, None),
    ((2, 5, 6, 7), (3, 3, 3), (2, 2, 2), (1, 1, 1), True, True, 5),   # unbatched 3-D
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,kernel,stride,padding,ceil,include,divisor", AVG)
def test_avg_pool_backward_is_torchs_cpu_bits(shape, kernel, stride, padding, ceil, include,
                                             divisor, dtype):
    gen = torch.Generator().manual_seed(sum(shape) + sum(kernel))
    x = wide(gen, shape, dtype)
    pool = F.avg_pool2d if len(kernel) == 2 else F.avg_pool3d
    theirs, ours, calls, up = torch_and_patched(
        lambda t: pool(t, kernel, stride, padding, ceil, include, divisor), x, gen, "avg_pool")
    assert calls == 1
    assert torch.equal(bits(ours), bits(theirs))
    direct = ops.avg_pool_backward(up, shape, kernel, stride, padding, ceil, include, divisor)
    assert torch.equal(bits(direct), bits(theirs))


def test_avg_pool1d_runs_as_2d():
    gen = torch.Generator().manual_seed(5)
    x = wide(gen, (2, 3, 11), torch.float32)
    theirs, ours, calls, _ = torch_and_patched(lambda t: F.avg_pool1d(t, 3, 2, 1, True, False),
                                               x, gen, "avg_pool2d")
    assert calls == 1 and torch.equal(bits(ours), bits(theirs))


ADAPTIVE = [((2, 3, 9, 10), (4, 3)), ((2, 3, 7, 5), (7, 9)), ((1, 2, 5, 6, 7), (2, 4, 3)),
            ((1, 2, 5, 6, 7), (5, 6, 7)), ((2, 3, 11), (4,))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,size", ADAPTIVE)
def test_adaptive_pooling_backward_is_torchs_cpu_bits(shape, size, dtype):
    gen = torch.Generator().manual_seed(sum(shape) * 7 + sum(size))
    x = wide(gen, shape, dtype)
    avg = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
    mx = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
    theirs, ours, calls, up = torch_and_patched(lambda t: avg[len(size)](t, size), x, gen,
                                                "_adaptive_avg")
    assert calls == 1 and torch.equal(bits(ours), bits(theirs))
    theirs, ours, calls, up = torch_and_patched(lambda t: mx[len(size)](t, size), x, gen,
                                                "adaptive_max")
    assert calls == 1 and torch.equal(bits(ours), bits(theirs))
    _, indices = mx[len(size)](x, size, return_indices=True)
    assert torch.equal(bits(ops.max_pool_backward(up, shape, indices)), bits(theirs))


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool3d_backward_is_torchs_cpu_bits_with_heavy_overlap(dtype):
    gen = torch.Generator().manual_seed(11)
    # Few distinct values: many windows pick the same input position.
    x = torch.randint(0, 3, (2, 2, 6, 7, 8), generator=gen).to(dtype)
    theirs, ours, calls, _ = torch_and_patched(lambda t: F.max_pool3d(t, 3, 1, 1), x, gen,
                                               "max_pool3d")
    assert calls == 1 and torch.equal(bits(ours), bits(theirs))


def test_max_unpool_writes_the_last_of_repeated_indices():
    gen = torch.Generator().manual_seed(13)
    for spatial in (2, 3):
        shape = (2, 3) + (4,) * spatial
        out_size = (5,) * spatial
        x = wide(gen, shape, torch.float32)
        inner = 5 ** spatial
        indices = torch.randint(0, inner, shape, generator=gen)   # repeats in every plane
        ours = ops.max_unpool(x, indices, out_size)
        expected = torch.zeros(6, inner)
        for plane, (values, index) in enumerate(zip(x.reshape(6, -1), indices.reshape(6, -1))):
            for v, i in zip(values, index):
                expected[plane, i] = v          # later writes win
        assert torch.equal(bits(ours.reshape(6, -1)), bits(expected))
        # Unique indices (as max pooling gives them): torch's forward, through patch().
        pooled, pool_indices = (F.max_pool2d if spatial == 2 else F.max_pool3d)(
            wide(gen, (2, 3) + (8,) * spatial, torch.float32), 2, return_indices=True)
        unpool = F.max_unpool2d if spatial == 2 else F.max_unpool3d
        theirs = unpool(pooled, pool_indices, 2)
        with dt.patched(devices=("cpu",)):
            patched = unpool(pooled, pool_indices, 2)
            calls = dt.patch_state()["calls"]
        assert calls.get(f"max_unpool{spatial}d") == 1
        assert torch.equal(bits(patched), bits(theirs))


# ---- interpolation ----

def _area_scale(n, m, align, scale):
    if align:
        return (n - 1) / (m - 1) if m > 1 else 0.0
    return 1.0 / scale if scale else n / m


def _linear_taps(n, m, align, scale):
    """(index, weight) pairs of each output position along one axis, in float64."""
    r = _area_scale(n, m, align, scale)
    taps = []
    for o in range(m):
        if n == m:
            taps.append([(o, 1.0), (o, 0.0)])
            continue
        real = r * o if align else max(r * (o + 0.5) - 0.5, 0.0)
        i0 = int(real)
        i1 = i0 + (1 if i0 < n - 1 else 0)
        lam = min(max(real - i0, 0.0), 1.0)
        taps.append([(i0, 1.0 - lam), (i1, lam)])
    return taps


def linear_reference(up, input_shape, align, scales):
    """The gradient of (bi/tri)linear interpolation in float64 by loops, and a bound on the error
    of float32 arithmetic for each element."""
    spatial = len(input_shape) - 2
    planes = input_shape[0] * input_shape[1]
    g = up.double().reshape(planes, *up.shape[2:])
    axes = [_linear_taps(n, m, align, s)
            for n, m, s in zip(input_shape[2:], up.shape[2:], scales)]
    out = torch.zeros(planes, *input_shape[2:], dtype=torch.float64)
    mag = torch.zeros_like(out)
    # float32 rounds the scale and the source index: each weight may be off by this much.
    weight_error = spatial * 2.0 ** -21 * (max(input_shape[2:]) + 2)
    import itertools
    for pos in itertools.product(*[range(m) for m in up.shape[2:]]):
        for taps in itertools.product(*[axes[a][pos[a]] for a in range(spatial)]):
            w = math.prod(t[1] for t in taps)
            where = (slice(None),) + tuple(t[0] for t in taps)
            value = g[(slice(None),) + pos]
            out[where] += w * value
            mag[where] += (abs(w) * 2.0 ** -23 * (16 + 2 * up[0, 0].numel())
                           + weight_error) * value.abs()
    return out.reshape(input_shape), mag.reshape(input_shape)


LINEAR = [((2, 3, 7), dict(size=11), False), ((2, 3, 7), dict(scale_factor=0.6), True),
          ((2, 3, 5, 6), dict(size=(9, 4)), False), ((2, 3, 5, 6), dict(scale_factor=(1.7, 2.3)),
                                                     False),
          ((1, 2, 3, 4, 5), dict(size=(5, 7, 3)), False),
          ((1, 2, 3, 4, 5), dict(scale_factor=2.0), True), ((1, 2, 4, 4), dict(size=(4, 4)), True)]


@pytest.mark.parametrize("shape,kw,align", LINEAR)
def test_linear_family_backward_against_a_float64_loop(shape, kw, align):
    mode = {3: "linear", 4: "bilinear", 5: "trilinear"}[len(shape)]
    gen = torch.Generator().manual_seed(sum(shape) + len(kw))
    x = wide(gen, shape, torch.float32)
    fn = lambda t: F.interpolate(t, mode=mode, align_corners=align, **kw)  # noqa: E731
    up = wide(gen, tuple(fn(x).shape), torch.float32)
    spatial = len(shape) - 2
    factor = kw.get("scale_factor")
    scales = ([None] * spatial if factor is None else
              list(factor) if isinstance(factor, tuple) else [factor] * spatial)
    reference, magnitude = linear_reference(up, shape, align, scales)
    with dt.patched(devices=("cpu",)):
        ours = input_gradient(fn, x, up)
        calls = dt.patch_state()["calls"]
    assert sum(v for k, v in calls.items() if k.startswith("upsample_")) == 1
    # Each term's weight and product, and each sum, rounded in float32 (linear_reference).
    assert ((ours.double() - reference).abs() <= magnitude).all()
    # The direct entry gives the same bits, and a second run too.
    direct = ops.upsample_backward(up, up.shape[2:], shape, align, scales, "linear")
    assert torch.equal(bits(direct), bits(ours))
    assert torch.equal(bits(ops.upsample_backward(up, up.shape[2:], shape, align, scales,
                                                  "linear")), bits(direct))


BICUBIC = [((2, 3, 5, 6), dict(size=(9, 4)), False), ((2, 3, 5, 6), dict(scale_factor=(1.7, 2.3)),
                                                      False),
           ((1, 2, 9, 2), dict(size=(11, 17)), True), ((2, 1, 5, 8), dict(scale_factor=0.45),
                                                       False),
           ((2, 3, 5, 6), dict(size=(5, 6)), False)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,kw,align", BICUBIC)
def test_bicubic_backward_is_torchs_cpu_bits(shape, kw, align, dtype):
    gen = torch.Generator().manual_seed(sum(shape) * 3 + len(kw))
    x = wide(gen, shape, dtype)
    theirs, ours, calls, _ = torch_and_patched(
        lambda t: F.interpolate(t, mode="bicubic", align_corners=align, **kw), x, gen,
        "upsample_bicubic")
    assert calls == 1 and torch.equal(bits(ours), bits(theirs))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_gradients_are_close_to_float64(dtype):
    gen = torch.Generator().manual_seed(17)
    shape = (2, 3, 8, 9)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    up = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64)
    cases = [(lambda t: F.adaptive_avg_pool2d(t, (4, 5)),
              lambda g: ops.adaptive_avg_pool_backward(g, shape)),
             (lambda t: F.avg_pool2d(t, 3, 2, 1, True)[..., :4, :],
              lambda g: ops.avg_pool_backward(
                  torch.cat([g, torch.zeros(2, 3, 1, 5, dtype=g.dtype)], 2), shape, (3, 3),
                  (2, 2), (1, 1), True)),
             (lambda t: F.pad(t, (1, 2, 2, 1), mode="reflect")[..., :4, :5],
              lambda g: ops.reflection_pad_backward(F.pad(g, (0, 7, 0, 7)), shape,
                                                    (1, 2, 2, 1)))]
    for forward, ours in cases:
        reference = input_gradient(forward, x, up)
        result = ours(up.to(dtype))
        assert result.dtype == dtype
        # One rounding of each value to 16 bits, then one of the sum.
        assert torch.allclose(result.double(), reference, rtol=2 ** -6, atol=2 ** -7)


def test_bad_arguments_are_refused_by_name():
    g = torch.zeros(2, 3, 9)
    with pytest.raises(detcoll.InvalidArgumentError, match="padding .* needs 2 values per spatial"):
        ops.reflection_pad_backward(g, (2, 3, 5), (2, 2, 1))
    with pytest.raises(detcoll.InvalidArgumentError, match="does not fit"):
        ops.reflection_pad_backward(torch.zeros(2, 3, 13), (2, 3, 5), (6, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match=r"grad_output \[2, 3, 9\] is not"):
        ops.replication_pad_backward(g, (2, 3, 5), (1, 1))
    with pytest.raises(detcoll.InvalidArgumentError, match="floating point only"):
        ops.replication_pad_backward(torch.zeros(2, 3, 9, dtype=torch.int64), (2, 3, 5), (2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="not a pooling window"):
        ops.avg_pool_backward(torch.zeros(1, 1, 2, 2), (1, 1, 4, 4), (2, 2), (2, 2), (2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="divisor_override is 0"):
        ops.avg_pool_backward(torch.zeros(1, 1, 2, 2), (1, 1, 4, 4), (2, 2), (2, 2), (0, 0),
                              divisor_override=0)
    with pytest.raises(detcoll.InvalidArgumentError, match="outside the 16 positions"):
        ops.max_pool_backward(torch.zeros(1, 1, 2, 2), (1, 1, 4, 4),
                              torch.tensor([[[[0, 1], [2, 16]]]]))
    with pytest.raises(detcoll.InvalidArgumentError, match="indices must be an int64"):
        ops.max_pool_backward(torch.zeros(1, 1, 2, 2), (1, 1, 4, 4),
                              torch.zeros(1, 1, 2, 2, dtype=torch.int32))
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"max_unpool: indices\[3\] = 25 is out of range \[0, 25\)"):
        ops.max_unpool(torch.zeros(1, 1, 2, 2), torch.tensor([[[[0, 1], [2, 25]]]]), (5, 5))
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"max_unpool: indices\[2\] = -1 is out of range \[0, 4\)"):
        ops.max_unpool(torch.zeros(2, 2, 1), torch.tensor([[[0], [3]], [[-1], [0]]]), (2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="indices .* and input .* differ"):
        ops.max_unpool(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 1, dtype=torch.int64),
                       (5, 5))
    with pytest.raises(detcoll.InvalidArgumentError, match="mode 'nearest'"):
        ops.upsample_backward(torch.zeros(1, 1, 4), [4], [1, 1, 2], False, mode="nearest")
    with pytest.raises(detcoll.InvalidArgumentError, match="2 spatial"):
        ops.upsample_backward(torch.zeros(1, 1, 4), [4], [1, 1, 2], False, mode="bicubic")
    with pytest.raises(detcoll.InvalidArgumentError, match="grad_output"):
        ops.upsample_backward(torch.zeros(1, 1, 5), [4], [1, 1, 2], False)


class Net(torch.nn.Module):
    """Padding, pooling, resampling, advanced indexing and a max embedding bag: layers whose
    backward torch computes with the operators patch() replaces; the model knows nothing of
    detcoll."""

    def __init__(self, gen):
        super().__init__()
        self.table = torch.nn.Parameter(wide(gen, (10, 4), torch.float32))
        self.bag = torch.nn.EmbeddingBag(10, 4, mode="max")
        with torch.no_grad():
            self.bag.weight.copy_(self.table)

    def forward(self, images, volume, ids, offsets, picks):
        a = F.avg_pool2d(F.pad(images[0], (1, 2, 2, 1), mode="reflect"), 3, 2, 1)
        b = F.adaptive_avg_pool2d(images[1], (3, 5))
        c = F.interpolate(images[2], scale_factor=1.7, mode="bicubic", align_corners=False)
        d = F.interpolate(volume[0], size=(5, 7, 3), mode="trilinear", align_corners=False)
        e = F.max_pool3d(F.pad(volume[1], (1, 1, 0, 2, 1, 0), mode="replicate"), 2, 1)
        f = self.table[picks]                                      # advanced indexing
        g = self.bag(ids, offsets)
        return a, b, c, d, e, f, g


def run_net(seed):
    gen = torch.Generator().manual_seed(seed)
    net = Net(gen)
    images = [wide(gen, (2, 3, 7, 8), torch.float32).requires_grad_() for _ in range(3)]
    volume = [wide(gen, (1, 2, 3, 4, 5), torch.float32).requires_grad_() for _ in range(2)]
    ids = torch.randint(0, 10, (40,), generator=gen)
    offsets = torch.tensor([0, 5, 5, 17, 30])
    picks = torch.randint(0, 10, (25,), generator=gen)
    outputs = net(images, volume, ids, offsets, picks)
    ups = [wide(gen, tuple(o.shape), torch.float32) for o in outputs]
    torch.autograd.backward(outputs, ups)
    grads = [t.grad for t in images + volume] + [net.table.grad, net.bag.weight.grad]
    return grads, ups, (images, volume, ids, offsets, picks)


def test_an_unchanged_model_runs_the_new_kernels_and_unpatch_restores_torchs():
    before, ups, inputs = run_net(21)
    with dt.patched(devices=("cpu",)):
        during, _, _ = run_net(21)
        calls = dict(dt.patch_state()["calls"])
    for name in ("reflection_pad2d_backward", "avg_pool2d_backward",
                 "_adaptive_avg_pool2d_backward", "upsample_bicubic2d_backward.vec",
                 "upsample_trilinear3d_backward.vec", "replication_pad3d_backward",
                 "max_pool3d_with_indices_backward", "_index_put_impl_",
                 "_embedding_bag_dense_backward"):
        assert calls.get(name, 0) >= 1, (name, calls)
    after, _, _ = run_net(21)
    assert dt.patch_state()["calls"] == calls           # none of ours ran after unpatch
    for theirs, again in zip(before, after):
        assert torch.equal(bits(theirs), bits(again))
    # Our bits, from the ops called directly with what aten's backward formulas pass.
    images, volume, ids, offsets, picks = inputs
    ups_a, ups_b, ups_c, ups_d, _, ups_f, _ = ups
    padded = F.pad(images[0].detach(), (1, 2, 2, 1), mode="reflect")
    expected = [
        ops.reflection_pad_backward(
            ops.avg_pool_backward(ups_a, padded.shape, (3, 3), (2, 2), (1, 1)),
            (2, 3, 7, 8), (1, 2, 2, 1)),
        ops.adaptive_avg_pool_backward(ups_b, (2, 3, 7, 8)),
        ops.upsample_backward(ups_c, ups_c.shape[2:], (2, 3, 7, 8), False, (1.7, 1.7),
                              "bicubic"),
        ops.upsample_backward(ups_d, (5, 7, 3), (1, 2, 3, 4, 5), False),
    ]
    for ours, direct in zip(during, expected):
        assert torch.equal(bits(ours), bits(direct))
    table = ops.index_put_(torch.zeros(10, 4), [picks], ups_f, True)
    assert torch.equal(bits(during[5]), bits(table))
    # The trilinear backward's bits differ from torch's fused multiply-adds: the patch ran.
    assert not torch.equal(bits(during[3]), bits(before[3]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_weighted_scatter_is_the_loop(dtype):
    gen = torch.Generator().manual_seed(31)
    planes, values_inner, out_inner, n = 3, 40, 11, 300
    values = wide(gen, (planes, values_inner), dtype)
    destination = torch.randint(0, out_inner, (n,), generator=gen)
    rows = torch.randint(0, values_inner, (n,), generator=gen)
    accumulation = torch.float64 if dtype == torch.float64 else torch.float32
    weights = wide(gen, (n,), accumulation)
    ours = ops.weighted_scatter(values, destination, out_inner, rows, weights)
    expected = torch.zeros(planes, out_inner, dtype=accumulation)
    for s in range(n):   # in the accumulation type, the product rounded, then the sum
        expected[:, destination[s]] += weights[s] * values[:, rows[s]].to(accumulation)
    assert torch.equal(bits(ours), bits(expected.to(dtype)))
    with pytest.raises(detcoll.InvalidArgumentError, match=f"weights must be {n} values of "):
        ops.weighted_scatter(values, destination, out_inner, rows, weights.to(dtype).half())
    with pytest.raises(detcoll.InvalidArgumentError, match="2 rows for 300 sources"):
        ops.weighted_scatter(values, destination, out_inner, rows[:2], weights)
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"destination\[0\] = .* is out of range \[0, 0\)"):
        ops.weighted_scatter(values, destination, 0, rows, weights)
    with pytest.raises(detcoll.InvalidArgumentError, match="300 sources read in place from "
                                                           "planes of 40 values"):
        ops.weighted_scatter(values, destination, out_inner)


def test_negative_divisor_override_divides_as_torch_does():
    for pool, shape in ((F.avg_pool2d, (1, 2, 4, 4)), (F.avg_pool3d, (1, 2, 4, 4, 4))):
        gen = torch.Generator().manual_seed(len(shape))
        x = wide(gen, shape, torch.float32)
        theirs, ours, calls, _ = torch_and_patched(lambda t: pool(t, 2, divisor_override=-3), x,
                                                   gen, "avg_pool")
        assert calls == 1 and torch.equal(bits(ours), bits(theirs))


@pytest.mark.parametrize("fn,shape", [
    (lambda t: F.adaptive_max_pool2d(t, (3, 4)), (2, 7, 9)),
    (lambda t: F.adaptive_max_pool3d(t, (2, 3, 4)), (2, 5, 7, 9)),
    (lambda t: F.max_pool3d(t, 2, 1), (2, 5, 7, 9)),
    (lambda t: F.adaptive_avg_pool3d(t, (2, 3, 4)), (2, 5, 7, 9)),
    (lambda t: F.adaptive_avg_pool2d(t, (3, 4)), (2, 7, 9)),
])
def test_unbatched_inputs(fn, shape):
    gen = torch.Generator().manual_seed(sum(shape))
    x = wide(gen, shape, torch.float64)
    theirs, ours, calls, _ = torch_and_patched(fn, x, gen, "")
    assert calls >= 1 and torch.equal(bits(ours), bits(theirs))


@pytest.mark.parametrize("fn,shape", [
    (lambda t: F.pad(t, (1, 2), mode="reflect"), (0, 3, 7)),
    (lambda t: F.avg_pool2d(t, 2), (0, 3, 6, 6)),
    (lambda t: F.adaptive_avg_pool2d(t, 3), (2, 0, 6, 6)),
    (lambda t: F.adaptive_max_pool2d(t, 3), (0, 3, 6, 6)),
    (lambda t: F.max_pool3d(t, 2), (0, 1, 4, 4, 4)),
    (lambda t: F.interpolate(t, scale_factor=2, mode="linear"), (0, 3, 5)),
    (lambda t: F.interpolate(t, scale_factor=2, mode="bicubic"), (0, 3, 5, 5)),
    (lambda t: F.grid_sample(t, torch.zeros(0, 3, 3, 2)), (0, 3, 5, 5)),
])
def test_empty_batches_give_empty_gradients(fn, shape):
    x = torch.zeros(shape)
    with dt.patched(devices=("cpu",)):
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        out.backward(torch.zeros(out.shape))
    assert leaf.grad.shape == x.shape and not leaf.grad.any()


def test_max_unpool_of_an_empty_batch():
    x, i = torch.zeros(0, 2, 3, 3), torch.zeros(0, 2, 3, 3, dtype=torch.long)
    assert ops.max_unpool(x, i, (6, 6)).shape == (0, 2, 6, 6)


def test_more_bad_arguments_are_refused_by_name():
    with pytest.raises(detcoll.InvalidArgumentError, match="scales .* are not numbers"):
        ops.upsample_backward(torch.zeros(1, 1, 4), [4], [1, 1, 2], False, ["two"])
    with pytest.raises(detcoll.InvalidArgumentError, match="2 scale factors for 1 spatial"):
        ops.upsample_backward(torch.zeros(1, 1, 4), [4], [1, 1, 2], False, [2.0, 2.0])
    with pytest.raises(detcoll.InvalidArgumentError, match="larger than the input"):
        ops.avg_pool_backward(torch.zeros(1, 1, 0, 0), (1, 1, 2, 2), (5, 5), (1, 1), (1, 1))
    with pytest.raises(detcoll.InvalidArgumentError, match="out_inner is -1"):
        ops.weighted_scatter(torch.zeros(1, 2), torch.zeros(2, dtype=torch.long), -1)
