"""Nearest-neighbour upsampling's backward, 1-D to 3-D (detcoll.torch.ops).

Each output position reads one input position, torch's `nearest_idx`: the same position when the
sizes are equal, half of it when the output is twice the input, otherwise
min(floor(dst · scale), in - 1) in float32, with scale = 1 / scale_factor where the forward was
given one and in / out otherwise. The backward adds each output position's gradient into the
input position it read, in the order of the output positions (row-major), from zero
(detcoll_upsample_nearest_backward): the order of torch's CPU loop, where its CUDA kernel adds
with atomicAdd.
"""

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _floating
from detcoll.torch._tensors import DTYPES


def upsample_nearest_backward(grad_output, output_size, input_size, scales=None):
    """aten's upsample_nearest{1,2,3}d_backward: the input's gradient, input_size [N, C, *in],
    output_size the spatial sizes, scales the forward's scale factors (None: from the sizes)."""
    op = "upsample_nearest_backward"
    g = _floating(grad_output, op, "grad_output")
    input_size = [int(s) for s in input_size]
    output_size = [int(s) for s in output_size]
    spatial = len(output_size)
    if not 1 <= spatial <= 3 or len(input_size) != spatial + 2:
        raise detcoll.InvalidArgumentError(
            f"{op}: input_size {input_size} and output_size {output_size}: 1 to 3 spatial "
            "dimensions, input_size with 2 more")
    if list(g.shape) != input_size[:2] + output_size:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {list(g.shape)} is not {input_size[:2] + output_size}")
    scales = list(scales or ())[:spatial]
    scales = [-1.0 if v is None else float(v) for v in scales]
    out = torch.empty(input_size, dtype=g.dtype, device=g.device)
    if out.numel():
        # detcoll_upsample_nearest_backward (kernels/ops/taps.h); g is contiguous (_floating).
        _detcoll.upsample_nearest_backward(out.data_ptr(), g.data_ptr(), DTYPES[g.dtype],
                                           input_size[0] * input_size[1], input_size[2:],
                                           output_size, scales)
    return out


def upsample_nearest_backward_vec(grad_output, output_size, input_size, scale_factors):
    """The .vec overloads: output_size, or scale factors that give it as torch does."""
    if (output_size is None) == (scale_factors is None):
        raise detcoll.InvalidArgumentError(
            "upsample_nearest_backward: give exactly one of output_size and scale_factors")
    if output_size is None:
        output_size = [int(float(input_size[2 + i]) * f) for i, f in enumerate(scale_factors)]
    return upsample_nearest_backward(grad_output, output_size, input_size, scale_factors)
