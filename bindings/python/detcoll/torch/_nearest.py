"""Nearest-neighbour upsampling's backward, 1-D to 3-D (detcoll.torch.ops).

Each output position reads one input position, torch's `nearest_idx`: the same position when the
sizes are equal, half of it when the output is twice the input, otherwise
min(floor(dst · scale), in - 1) in float32, with scale = 1 / scale_factor where the forward was
given one and in / out otherwise. The backward adds each output position's gradient into the
input position it read, through detcoll's index_add, in the order of the output positions
(row-major), from zero: the order of torch's CPU loop, where its CUDA kernel adds with atomicAdd.
"""

import torch

import detcoll
from detcoll.torch import ops
from detcoll.torch._op_args import _floating


def _sources(out, size, scale, device):
    """The input position each of `out` output positions reads along one axis of `size`."""
    dst = torch.arange(out, device=device)
    if out == size:
        return dst
    if out == 2 * size:
        return dst // 2
    step = (1.0 / scale) if scale is not None and scale > 0 else size / out
    step = torch.tensor(step, dtype=torch.float32, device=device)  # torch's float scale
    return torch.minimum((dst.to(torch.float32) * step).floor().long(),
                         torch.tensor(size - 1, device=device))


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
    scales = list(scales or ())
    scales += [None] * (spatial - len(scales))  # the overloads' defaults may be left out
    linear = torch.zeros((), dtype=torch.int64, device=g.device)
    for axis in range(spatial):
        src = _sources(output_size[axis], input_size[2 + axis], scales[axis], g.device)
        linear = (linear * input_size[2 + axis]).unsqueeze(-1) + src
    planes = input_size[0] * input_size[1]
    inner = 1
    for s in input_size[2:]:
        inner *= s
    out = torch.zeros(planes, inner, dtype=g.dtype, device=g.device)
    ops.index_add_(out, 1, linear.reshape(-1), g.reshape(planes, -1))
    return out.reshape(input_size)


def upsample_nearest_backward_vec(grad_output, output_size, input_size, scale_factors):
    """The .vec overloads: output_size, or scale factors that give it as torch does."""
    if (output_size is None) == (scale_factors is None):
        raise detcoll.InvalidArgumentError(
            "upsample_nearest_backward: give exactly one of output_size and scale_factors")
    if output_size is None:
        output_size = [int(float(input_size[2 + i]) * f) for i, f in enumerate(scale_factors)]
    return upsample_nearest_backward(grad_output, output_size, input_size, scale_factors)
