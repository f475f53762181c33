"""detcoll.torch.ops.grid_sampler_backward (grid_sample's backward, 2-D and 3-D; bilinear,
nearest and 2-D bicubic; zeros, border and reflection padding; corners aligned or not).

torch's CPU kernel sums in a vectorized order of its own, so the float32 gradients are compared
with float64 ones: torch's, and for bilinear 2-D with zeros padding a loop written here, within a
stated bound. float64 agrees with torch's float64 to 1e-12 of the values' scale. F.grid_sample's
unchanged backward runs ours through patch(); bad arguments are refused by name.
"""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops
from op_testing import bits

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def case(seed, spatial, dtype):
    gen = torch.Generator().manual_seed(seed)
    shape = (2, 3, 5, 6) if spatial == 2 else (2, 3, 4, 5, 6)
    grid_shape = (2, 4, 7, 2) if spatial == 2 else (2, 3, 4, 5, 3)
    x = torch.randn(shape, generator=gen, dtype=dtype) * 10
    # Points inside and outside [-1, 1], many of them reading the same input positions.
    grid = torch.rand(grid_shape, generator=gen, dtype=dtype) * 3.2 - 1.6
    return gen, x, grid


def gradients(x, grid, up, **kw):
    a, b = x.clone().requires_grad_(), grid.clone().requires_grad_()
    F.grid_sample(a, b, **kw).backward(up)
    return a.grad, b.grad


COMBINATIONS = [(s, m, p, al) for s in (2, 3) for m in MODES for p in PADDINGS
                for al in (False, True) if not (s == 3 and m == "bicubic")]


@pytest.mark.parametrize("spatial,mode,padding,align", COMBINATIONS)
def test_against_torchs_float64_and_through_patch(spatial, mode, padding, align):
    kw = dict(mode=mode, padding_mode=padding, align_corners=align)
    gen, x, grid = case(spatial * 100 + len(mode) * 10 + len(padding) + align, spatial,
                        torch.float64)
    up = torch.randn(F.grid_sample(x, grid, **kw).shape, generator=gen, dtype=torch.float64)
    ref_input, ref_grid = gradients(x, grid, up, **kw)
    args = (MODES[mode], PADDINGS[padding], align)
    ours_input, ours_grid = ops.grid_sampler_backward(up, x, grid, *args)
    scale = up.abs().max() * x.abs().max() * 64
    assert (ours_input - ref_input).abs().max() <= 1e-12 * up.abs().max() * 64
    assert (ours_grid - ref_grid).abs().max() <= 1e-12 * scale
    # float32, through patch(): within float32's rounding of the same sums.
    x32, grid32, up32 = x.float(), grid.float(), up.float()
    with dt.patched(devices=("cpu",)):
        patched_input, patched_grid = gradients(x32, grid32, up32, **kw)
        calls = dt.patch_state()["calls"]
    assert calls.get(f"grid_sampler_{spatial}d_backward") == 1
    ref_input, ref_grid = gradients(x32.double(), grid32.double(), up32.double(), **kw)
    assert (patched_input.double() - ref_input).abs().max() <= 2 ** -18 * up.abs().max() * 64
    if mode != "nearest":
        assert (patched_grid.double() - ref_grid).abs().max() <= 2 ** -16 * scale
    else:
        assert not patched_grid.any()
    # The same bits again, and from the direct call.
    direct = ops.grid_sampler_backward(up32, x32, grid32, *args)
    assert torch.equal(bits(direct[0]), bits(patched_input))
    assert torch.equal(bits(direct[1]), bits(patched_grid))


def bilinear_loop(x, grid, up, align):
    """Bilinear, zeros padding, 2-D: the input's and the grid's gradients by loops, float64."""
    n, c, h, w = x.shape
    grad_x = torch.zeros_like(x, dtype=torch.float64)
    grad_grid = torch.zeros_like(grid, dtype=torch.float64)
    for b, i, j in itertools.product(range(n), range(grid.shape[1]), range(grid.shape[2])):
        gx, gy = float(grid[b, i, j, 0]), float(grid[b, i, j, 1])
        if align:
            px, py, mx, my = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1), (w - 1) / 2, \
                (h - 1) / 2
        else:
            px, py, mx, my = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2, w / 2, h / 2
        x0, y0 = math.floor(px), math.floor(py)
        for dy, dx in itertools.product((0, 1), (0, 1)):
            xx, yy = x0 + dx, y0 + dy
            if not (0 <= xx < w and 0 <= yy < h):
                continue
            fx = px - x0 if dx else x0 + 1 - px
            fy = py - y0 if dy else y0 + 1 - py
            for ch in range(c):
                g = float(up[b, ch, i, j])
                grad_x[b, ch, yy, xx] += fx * fy * g
                v = float(x[b, ch, yy, xx])
                grad_grid[b, i, j, 0] += (1 if dx else -1) * fy * v * g * mx
                grad_grid[b, i, j, 1] += (1 if dy else -1) * fx * v * g * my
    return grad_x, grad_grid


@pytest.mark.parametrize("align", [False, True])
def test_bilinear_against_a_loop(align):
    gen, x, grid = case(7 + align, 2, torch.float32)
    up = torch.randn(2, 3, 4, 7, generator=gen)
    ref_x, ref_grid = bilinear_loop(x, grid, up, align)
    ours_x, ours_grid = ops.grid_sampler_backward(up, x, grid, 0, 0, align)
    assert (ours_x.double() - ref_x).abs().max() <= 2 ** -18 * up.abs().max() * 64
    bound = 2 ** -16 * up.abs().max() * x.abs().max() * 64
    assert (ours_grid.double() - ref_grid).abs().max() <= bound


def test_output_mask_computes_what_is_asked():
    gen, x, grid = case(3, 2, torch.float32)
    up = torch.randn(2, 3, 4, 7, generator=gen)
    full = ops.grid_sampler_backward(up, x, grid, 0, 1, False)
    only_input = ops.grid_sampler_backward(up, x, grid, 0, 1, False, (True, False))
    only_grid = ops.grid_sampler_backward(up, x, grid, 0, 1, False, (False, True))
    assert torch.equal(only_input[0], full[0]) and not only_input[1].any()
    assert torch.equal(only_grid[1], full[1]) and not only_grid[0].any()


def test_bad_arguments_are_refused_by_name():
    x, grid, up = torch.zeros(1, 2, 4, 4), torch.zeros(1, 3, 3, 2), torch.zeros(1, 2, 3, 3)
    with pytest.raises(detcoll.InvalidArgumentError, match="interpolation_mode 5"):
        ops.grid_sampler_backward(up, x, grid, 5, 0, False)
    with pytest.raises(detcoll.InvalidArgumentError, match="padding_mode 3"):
        ops.grid_sampler_backward(up, x, grid, 0, 3, False)
    with pytest.raises(detcoll.InvalidArgumentError, match="bicubic interpolation is 2-D only"):
        ops.grid_sampler_backward(torch.zeros(1, 2, 3, 3, 3), torch.zeros(1, 2, 4, 4, 4),
                                  torch.zeros(1, 3, 3, 3, 3), 2, 0, False)
    with pytest.raises(detcoll.InvalidArgumentError, match="grid .* must be"):
        ops.grid_sampler_backward(up, x, torch.zeros(1, 3, 3, 3), 0, 0, False)
    with pytest.raises(detcoll.InvalidArgumentError, match="grad_output .* is not"):
        ops.grid_sampler_backward(torch.zeros(1, 2, 3, 4), x, grid, 0, 0, False)
    with pytest.raises(detcoll.InvalidArgumentError, match="grid has dtype torch.float64"):
        ops.grid_sampler_backward(up, x, grid.double(), 0, 0, False)


def test_cudnns_sampler_backward_is_the_bilinear_zeros_aligned_kernel():
    # CUDA runs cudnn_grid_sampler for bilinear, zeros padding, align_corners=True on 4-D input;
    # patch() gives its backward the same kernel (reached here through the CPU registration).
    gen, x, grid = case(12, 2, torch.float32)
    up = torch.randn(2, 3, 4, 7, generator=gen)
    with dt.patched(devices=("cpu",), ops=["cudnn_grid_sampler_backward"]):
        grad_x, grad_grid = torch.ops.aten.cudnn_grid_sampler_backward(x, grid, up)
        assert dt.patch_state()["calls"] == {"cudnn_grid_sampler_backward": 1}
    expected = ops.grid_sampler_backward(up, x, grid, 0, 0, True)
    assert torch.equal(bits(grad_x), bits(expected[0]))
    assert torch.equal(bits(grad_grid), bits(expected[1]))


@pytest.mark.parametrize("size", [41, 42, 47, 55, 61, 82])
def test_reflection_at_exact_multiples_of_the_span(size):
    # Points on the pixel grid's edges (an identity grid, aligned corners) put the reflected
    # distance at exact multiples of the span, where a division rounded low would reflect to the
    # other edge.
    x = torch.randn(1, 2, 3, size, dtype=torch.float64)
    theta = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]], dtype=torch.float64)
    grid = F.affine_grid(theta, (1, 2, 3, size), align_corners=True) * 1.0
    grid[..., 0] = grid[..., 0] * 3            # beyond the edges: several reflections
    up = torch.randn(1, 2, 3, size, dtype=torch.float64)
    kw = dict(mode="bilinear", padding_mode="reflection", align_corners=True)
    ref_input, ref_grid = gradients(x, grid, up, **kw)
    ours_input, ours_grid = ops.grid_sampler_backward(up, x, grid, 0, 2, True)
    assert (ours_input - ref_input).abs().max() <= 1e-12 * up.abs().max() * 64
