"""grid_sample's backward, 2-D and 3-D, bilinear (trilinear) and nearest (detcoll.torch.ops).

Each output position reads, for every channel, the input at the grid's point: its corners (2^d of
them, those inside the input) with the usual linear weights, or the nearest position (rounded half
to even). The point's coordinates are torch's: unnormalized from [-1, 1] (align_corners or not),
then clipped (padding "border") or reflected and clipped ("reflection").

The input's gradient is one detcoll weighted_scatter per batch element: each output position's
corners in row-major order (depth, height, width), in the order of the output positions, each
adding weight × gradient, the product formed in the accumulation type. The grid's gradient has no sum across positions; each coordinate's is
Σ over channels of Σ over corners ± value × the other axes' weights × gradient, the channel sum by
detcoll's fixed tree (ops.sum), times the coordinate transform's derivative. Both run the same
way on the CPU and the GPU (README, "Deterministic ops").
"""

import itertools
import math

import torch

import detcoll
from detcoll.torch import ops
from detcoll.torch._adjoints import weighted_scatter
from detcoll.torch._op_args import _floating, _same_dtype

_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


def _unnormalize(coord, size, align_corners):
    """torch's grid_sampler_unnormalize, and its derivative."""
    if align_corners:
        return ((coord + 1) / 2) * (size - 1), (size - 1) / 2
    return ((coord + 1) * size - 1) / 2, size / 2


def _clip(coord, size):
    """torch's clip_coordinates_set_grad: [0, size - 1], derivative 0 where it clipped."""
    inside = (coord > 0) & (coord < size - 1)
    return coord.clamp(0, size - 1), inside.to(coord.dtype)


def _reflect(coord, twice_low, twice_high):
    """torch's reflect_coordinates_set_grad."""
    if twice_low == twice_high:
        return torch.zeros_like(coord), torch.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    shifted = coord - low
    sign = torch.where(shifted < 0, -1.0, 1.0).to(coord.dtype)
    distance = shifted.abs()
    # span as a tensor on coord's device: CUDA divides by a Python number as a multiply by its
    # reciprocal, which can floor an exact multiple one low.
    span_t = torch.full_like(distance, span)
    extra = torch.fmod(distance, span_t)
    flips = torch.floor(distance / span_t)
    even = torch.fmod(flips, 2) == 0
    return (torch.where(even, extra + low, span - extra + low),
            torch.where(even, sign, -sign))


def _source(coord, size, padding, align_corners):
    """torch's grid_sampler_compute_source_index_set_grad: the coordinate in input positions and
    its derivative with respect to the grid's value."""
    coord, derivative = _unnormalize(coord, size, align_corners)
    derivative = torch.full_like(coord, derivative)
    if padding == "border":
        coord, d = _clip(coord, size)
        derivative = derivative * d
    elif padding == "reflection":
        low, high = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        coord, d = _reflect(coord, low, high)
        derivative = derivative * d
        coord, d = _clip(coord, size)
        derivative = derivative * d
    return coord, derivative


def _scatter_corners(values, linear, inside, weights, inner):
    """One batch element's input gradient: corner k of position p (linear, inside and weights
    [positions, corners]) adds weights[p, k] × values[:, p] into its input position, positions in
    order and corners in order within one, through weighted_scatter."""
    corners = linear.shape[-1]
    keep = inside.reshape(-1).nonzero().reshape(-1)
    accumulation = torch.float64 if values.dtype == torch.float64 else torch.float32
    return weighted_scatter(values, linear.reshape(-1).index_select(0, keep), inner,
                            rows=torch.div(keep, corners, rounding_mode="floor"),
                            weights=weights.reshape(-1).index_select(0, keep).to(accumulation))


def grid_sampler_backward(grad_output, input, grid, interpolation_mode, padding_mode,
                          align_corners, output_mask=(True, True)):
    """aten's grid_sampler_{2,3}d_backward: (the input's gradient, the grid's gradient).
    interpolation_mode 0 (bilinear) or 1 (nearest); padding_mode 0 (zeros), 1 (border) or
    2 (reflection)."""
    op = "grid_sampler_backward"
    x = _floating(input, op, "input")
    grid = _floating(grid, op, "grid")
    g = _floating(grad_output, op, "grad_output")
    _same_dtype(op, x, grid, "grid")
    _same_dtype(op, x, g, "grad_output")
    mode = _MODES.get(int(interpolation_mode))
    padding = _PADDINGS.get(int(padding_mode))
    if mode is None:
        raise detcoll.InvalidArgumentError(
            f"{op}: interpolation_mode {interpolation_mode}; 0 (bilinear), 1 (nearest) or "
            "2 (bicubic, 2-D)")
    if padding is None:
        raise detcoll.InvalidArgumentError(
            f"{op}: padding_mode {padding_mode}; 0 (zeros), 1 (border) or 2 (reflection)")
    spatial = x.dim() - 2
    if spatial not in (2, 3) or grid.dim() != x.dim() or grid.shape[-1] != spatial or \
            grid.shape[0] != x.shape[0]:
        raise detcoll.InvalidArgumentError(
            f"{op}: input {tuple(x.shape)} and grid {tuple(grid.shape)} must be [N, C, *in] "
            f"and [N, *out, {max(spatial, 2)}] with 2 or 3 spatial dimensions")
    if mode == "bicubic" and spatial != 2:
        raise detcoll.InvalidArgumentError(f"{op}: bicubic interpolation is 2-D only")
    n, channels = x.shape[:2]
    outs = list(grid.shape[1:-1])
    if list(g.shape) != [n, channels] + outs:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {tuple(g.shape)} is not {tuple([n, channels] + outs)}")
    sizes = list(x.shape[2:])                                  # (D,) H, W
    positions = math.prod(outs)
    if x.numel() == 0 or positions == 0:
        # Nothing is read (or nothing to read from): both gradients are 0.
        return torch.zeros_like(x), torch.zeros_like(grid)
    # Axis a of the input (depth, height, width) is read by grid coordinate spatial - 1 - a.
    coords, derivatives = [], []
    for a, size in enumerate(sizes):
        c, d = _source(grid[..., spatial - 1 - a].reshape(n, positions), size,
                       "zeros" if mode == "bicubic" else padding, bool(align_corners))
        coords.append(c)
        derivatives.append(d)
    grad_input = torch.zeros(n, channels, math.prod(sizes), dtype=x.dtype, device=x.device)
    grad_grid = torch.zeros(n, positions, spatial, dtype=x.dtype, device=x.device)

    planes = x.reshape(n, channels, -1)
    values = g.reshape(n, channels, positions)
    want_input, want_grid = (bool(v) for v in output_mask)
    if mode == "bicubic":
        return _bicubic(x, grid, values, coords, derivatives, sizes, padding,
                        bool(align_corners), want_input, want_grid)
    if mode == "nearest":
        linear, inside = None, None
        for c, size in zip(coords, sizes):
            i = torch.round(c)
            ok = (i >= 0) & (i < size)
            i = torch.where(ok, i, torch.zeros_like(i)).long()
            linear = i if linear is None else linear * size + i
            inside = ok if inside is None else inside & ok
        if want_input:
            for b in range(n):
                keep = inside[b].nonzero().reshape(-1)
                grad_input[b] = weighted_scatter(values[b], linear[b].index_select(0, keep),
                                                 grad_input.shape[2], rows=keep)
        return grad_input.reshape(x.shape), grad_grid.reshape(grid.shape)

    lows = [torch.floor(c) for c in coords]
    corner_list = list(itertools.product((0, 1), repeat=spatial))   # row-major (d, h, w)
    linear, inside, weights, partial = [], [], [], []
    for corner in corner_list:
        index, ok, factors = None, None, []
        for a, bit in enumerate(corner):
            i = lows[a] + bit
            ok_a = (i >= 0) & (i < sizes[a])
            i = torch.where(ok_a, i, torch.zeros_like(i)).long()
            index = i if index is None else index * sizes[a] + i
            ok = ok_a if ok is None else ok & ok_a
            # The weight along axis a: distance to the opposite corner.
            factors.append(coords[a] - lows[a] if bit else (lows[a] + 1) - coords[a])
        linear.append(index)
        inside.append(ok)
        # torch multiplies the width factor first: x, then y, then z.
        w = factors[-1]
        for f in reversed(factors[:-1]):
            w = w * f
        weights.append(w)
        partial.append(factors)
    linear = torch.stack(linear, -1)                     # [n, positions, corners]
    inside = torch.stack(inside, -1)
    weights = torch.stack(weights, -1)
    if want_input:
        for b in range(n):
            grad_input[b] = _scatter_corners(values[b], linear[b], inside[b], weights[b],
                                             grad_input.shape[2])
    if want_grid:
        # The input's value at each corner (0 outside), [n, channels, positions, corners].
        gathered = torch.gather(planes, 2, linear.reshape(n, 1, -1).expand(n, channels, -1))
        gathered = gathered.reshape(n, channels, positions, len(corner_list))
        gathered = torch.where(inside.unsqueeze(1), gathered, torch.zeros_like(gathered))
        for a in range(spatial):
            # d weight / d coordinate a: ± the product of the other axes' factors.
            slopes = []
            for corner, factors in zip(corner_list, partial):
                others = [f for b, f in enumerate(factors) if b != a]
                s = others[-1] if others else torch.ones_like(coords[a])
                for f in reversed(others[:-1]):
                    s = s * f
                slopes.append(s if corner[a] else -s)
            slopes = torch.stack(slopes, -1).unsqueeze(1)            # [n, 1, positions, corners]
            per_channel = ops.sum(gathered * slopes, dim=3) * values    # [n, channels, positions]
            total = ops.sum(per_channel, dim=1)                          # the fixed tree
            grad_grid[..., spatial - 1 - a] = total * derivatives[a]
    return grad_input.reshape(x.shape), grad_grid.reshape(grid.shape)


_A = -0.75   # torch's cubic convolution parameter


def _cubic(t):
    """torch's get_cubic_upsample_coefficients and get_cubic_coefficients_grad for t in [0, 1)."""
    a = _A

    def near(v):
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    coefficients = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    v0, v1, v2, v3 = -1 - t, -t, 1 - t, 2 - t
    slopes = [(-3 * a * v0 - 10 * a) * v0 - 8 * a,
              (-3 * (a + 2) * v1 - 2 * (a + 3)) * v1,
              (3 * (a + 2) * v2 - 2 * (a + 3)) * v2,
              (3 * a * v3 - 10 * a) * v3 + 8 * a]
    return coefficients, slopes


def _tap(i, size, padding, align_corners):
    """A tap's position after padding (torch's compute_coordinates), and whether it is inside."""
    if padding == "border":
        i = i.clamp(0, size - 1)
    elif padding == "reflection":
        low, high = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        i = _reflect(i, low, high)[0].clamp(0, size - 1)
    ok = (i >= 0) & (i < size)
    return torch.where(ok, i, torch.zeros_like(i)).long(), ok


def _bicubic(x, grid, values, coords, derivatives, sizes, padding, align_corners, want_input,
             want_grid):
    """Bicubic grid_sample's backward (2-D): the 16 taps of each position, x outer and y inner
    as torch's loop runs them, each tap's position padded on its own."""
    n, channels = x.shape[:2]
    positions = values.shape[-1]
    (iy, ix), (height, width) = coords, sizes
    y0, x0 = torch.floor(iy), torch.floor(ix)
    y_coefficients, y_slopes = _cubic(iy - y0)
    x_coefficients, x_slopes = _cubic(ix - x0)
    linear, inside, weights, gx_terms, gy_terms = [], [], [], [], []
    for i in range(4):
        xi, x_ok = _tap(x0 - 1 + i, width, padding, align_corners)
        for j in range(4):
            yj, y_ok = _tap(y0 - 1 + j, height, padding, align_corners)
            linear.append(yj * width + xi)
            inside.append(x_ok & y_ok)
            weights.append(x_coefficients[i] * y_coefficients[j])
            gx_terms.append(x_slopes[i] * y_coefficients[j])
            gy_terms.append(y_slopes[j] * x_coefficients[i])
    linear, inside = torch.stack(linear, -1), torch.stack(inside, -1)
    grad_input = torch.zeros(n, channels, height * width, dtype=x.dtype, device=x.device)
    grad_grid = torch.zeros(n, positions, 2, dtype=x.dtype, device=x.device)
    if want_input:
        weights = torch.stack(weights, -1)
        for b in range(n):
            grad_input[b] = _scatter_corners(values[b], linear[b], inside[b], weights[b],
                                             height * width)
    if want_grid:
        planes = x.reshape(n, channels, -1)
        gathered = torch.gather(planes, 2, linear.reshape(n, 1, -1).expand(n, channels, -1))
        gathered = gathered.reshape(n, channels, positions, 16)
        gathered = torch.where(inside.unsqueeze(1), gathered, torch.zeros_like(gathered))
        for axis, terms in ((0, gx_terms), (1, gy_terms)):
            slopes = -torch.stack(terms, -1).unsqueeze(1)
            per_channel = ops.sum(gathered * slopes, dim=3) * values
            grad_grid[..., axis] = ops.sum(per_channel, dim=1) * derivatives[1 - axis]
    return grad_input.reshape(x.shape), grad_grid.reshape(grid.shape)
