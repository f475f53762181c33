"""detcoll.torch.ops.upsample_nearest_backward (nearest-neighbour upsampling's backward, 1-D to
3-D): bit for bit against PyTorch's CPU kernel, whose loop adds in the same order, for sizes and
scale factors up and down; against a loop written here; through patch(), F.interpolate's
unchanged backward; bad arguments refused by name."""

import math

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops
from op_testing import bits, wide

CASES = [
    ((2, 3, 7), dict(scale_factor=2.5)),
    ((2, 3, 7), dict(size=3)),
    ((2, 3, 5, 7), dict(size=(11, 13))),
    ((2, 3, 5, 7), dict(scale_factor=2)),
    ((1, 4, 9, 8), dict(size=(4, 5))),
    ((2, 2, 6, 6), dict(scale_factor=(0.7, 1.9))),
    ((1, 2, 3, 4, 5), dict(scale_factor=(1.7, 2, 0.6))),
    ((1, 2, 4, 3, 2), dict(size=(4, 7, 5))),
    # Where torch's float32 scale and a double one read different sources (6 -> 74), and where
    # the sizes take torch's shortcuts although a scale factor was given (10 -> 20, 10 -> 10).
    ((1, 2, 6), dict(size=74)),
    ((1, 2, 10, 10), dict(scale_factor=(2.05, 1.05))),
]


def gradients(x, up, **kw):
    leaf = x.clone().requires_grad_()
    F.interpolate(leaf, mode="nearest", **kw).backward(up)
    return leaf.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,kw", CASES)
def test_bits_are_torchs_cpu_kernels_and_the_patch_runs_them(shape, kw, dtype):
    gen = torch.Generator().manual_seed(len(shape) * 100 + len(str(kw)))
    x = wide(gen, shape, dtype)
    out_shape = F.interpolate(x, mode="nearest", **kw).shape
    up = wide(gen, tuple(out_shape), dtype)
    theirs = gradients(x, up, **kw)
    with dt.patched(devices=("cpu",)):
        ours = gradients(x, up, **kw)
        calls = dt.patch_state()["calls"]
    assert sum(v for k, v in calls.items() if k.startswith("upsample_nearest")) == 1
    assert torch.equal(bits(ours), bits(theirs))
    scales = kw.get("scale_factor")
    if scales is not None and not isinstance(scales, tuple):
        scales = (scales,) * (len(shape) - 2)
    direct = ops.upsample_nearest_backward(up, list(out_shape[2:]), list(shape), scales)
    assert torch.equal(bits(direct), bits(theirs))


def loop_reference(up, in_size, scales):
    """The backward written as a loop: each output position, in row-major order, adds its
    gradient into the input position it reads (float32 scale, as torch computes it)."""
    out_size = list(up.shape[2:])
    def source(o, i, axis):
        if o == i or o == 2 * i:
            return lambda d: d if o == i else d // 2
        step = torch.tensor(1.0 / scales[axis] if scales else i / o, dtype=torch.float32)
        return lambda d: min(int(math.floor(float(torch.tensor(float(d)) * step))), i - 1)
    maps = [source(o, i, a) for a, (o, i) in enumerate(zip(out_size, in_size[2:]))]
    grad = torch.zeros(in_size, dtype=up.dtype)
    for pos in torch.cartesian_prod(*[torch.arange(o) for o in out_size]).reshape(
            -1, len(out_size)).tolist():
        src = tuple(m(p) for m, p in zip(maps, pos))
        grad[(slice(None), slice(None)) + src] += up[(slice(None), slice(None)) + tuple(pos)]
    return grad


def test_against_a_loop_with_many_sources_per_pixel():
    gen = torch.Generator().manual_seed(9)
    up = wide(gen, (2, 3, 17, 13), torch.float32)
    ours = ops.upsample_nearest_backward(up, [17, 13], [2, 3, 5, 4], (3.3, 3.1))
    assert torch.equal(bits(ours), bits(loop_reference(up, [2, 3, 5, 4], (3.3, 3.1))))
    ours = ops.upsample_nearest_backward(up, [17, 13], [2, 3, 6, 4])
    assert torch.equal(bits(ours), bits(loop_reference(up, [2, 3, 6, 4], None)))


def test_the_sized_overloads_with_and_without_scales():
    gen = torch.Generator().manual_seed(4)
    up = wide(gen, (2, 3, 13, 11), torch.float32)
    calls = [lambda: torch.ops.aten.upsample_nearest2d_backward(up, [13, 11], [2, 3, 5, 4]),
             lambda: torch.ops.aten.upsample_nearest2d_backward(up, [13, 11], [2, 3, 5, 4],
                                                                2.7, 2.9),
             lambda: torch.ops.aten.upsample_nearest1d_backward(up[0], [11], [3, 13, 4])]
    theirs = [f() for f in calls]
    with dt.patched(devices=("cpu",)):
        ours = [f() for f in calls]
        counted = dt.patch_state()["calls"]
    assert counted == {"upsample_nearest2d_backward": 2, "upsample_nearest1d_backward": 1}
    for a, b in zip(ours, theirs):
        assert torch.equal(bits(a), bits(b))


def test_bad_arguments_are_refused_by_name():
    up = torch.ones(2, 3, 8, 8)
    with pytest.raises(detcoll.InvalidArgumentError, match="grad_output .2, 3, 8, 8. is not"):
        ops.upsample_nearest_backward(up, [8, 9], [2, 3, 4, 4])
    with pytest.raises(detcoll.InvalidArgumentError, match="1 to 3 spatial dimensions"):
        ops.upsample_nearest_backward(up, [8, 8], [2, 3, 4])
    with pytest.raises(detcoll.InvalidArgumentError, match="grad_output has dtype torch.int64; floating point only"):
        ops.upsample_nearest_backward(up.long(), [8, 8], [2, 3, 4, 4])
