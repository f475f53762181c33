"""grid_sample's backward, 2-D and 3-D, bilinear (trilinear), nearest and 2-D bicubic
(detcoll.torch.ops): detcoll_grid_sampler_backward (kernels/ops/grid_sample.h).

Each output position reads, for every channel, the input at the grid's point: its corners (2^d of
them, those inside the input) with the usual linear weights, the nearest position (rounded half
to even), or bicubic's 16 taps. The point's coordinates are torch's: unnormalized from [-1, 1]
(align_corners or not), then clipped (padding "border") or reflected and clipped ("reflection").
The input's gradient adds each tap's weight × gradient in the order of the output positions and
then of the taps, per channel; the grid's gradient of a position is Σ over channels (in order)
of the gradient times Σ over taps (in order) of the tap's slope × the input there, times the
coordinate transform's derivative. Both run the same way on the CPU and the GPU (README,
"Deterministic ops").
"""

import math

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _floating, _same_dtype
from detcoll.torch._tensors import DTYPES

_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


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
    positions = math.prod(outs)
    want_input, want_grid = (bool(v) for v in output_mask)
    grad_input = (torch.empty_like if want_input else torch.zeros_like)(
        x, memory_format=torch.contiguous_format)
    grad_grid = (torch.empty_like if want_grid else torch.zeros_like)(
        grid, memory_format=torch.contiguous_format)
    _detcoll.grid_sampler_backward(
        grad_input.data_ptr() if want_input else 0, grad_grid.data_ptr() if want_grid else 0,
        g.data_ptr(), x.data_ptr(), grid.data_ptr(),   # contiguous (_floating)
        DTYPES[x.dtype], n, channels, list(x.shape[2:]), positions, int(interpolation_mode),
        int(padding_mode), bool(align_corners))
    return grad_input, grad_grid
