"""detcoll.torch.ops' gathers: bilinear resampling's backward and 2-D max pooling, with the
arguments of the PyTorch functions they replace (imported into detcoll.torch.ops)."""

import torch
from torch.autograd.function import once_differentiable

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _floating, _indices, _same_dtype, _values
from detcoll.torch._tensors import DTYPES

def _pair(value, op, what):
    if isinstance(value, int):
        return (value, value)
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * 2
    if len(value) != 2:
        raise detcoll.InvalidArgumentError(f"{op}: {what} {value} needs one or two values")
    return value


def _scale(value):
    return -1.0 if value is None else float(value)


def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners,
                                 scales_h=None, scales_w=None):
    """aten's upsample_bilinear2d_backward: the input's gradient [N, C, H, W], deterministic.
    scales_h, scales_w are the scale factors the forward was given (None: the sizes decide)."""
    op = "upsample_bilinear2d_backward"
    grad = _floating(grad_output, op, "grad_output")
    input_size, output_size = tuple(int(v) for v in input_size), tuple(int(v) for v in output_size)
    if len(input_size) != 4 or len(output_size) != 2:
        raise detcoll.InvalidArgumentError(
            f"{op}: input_size {input_size} needs 4 values and output_size {output_size} 2")
    expected = input_size[:2] + output_size
    if tuple(grad.shape) != expected:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output is {tuple(grad.shape)}, expected {expected}")
    out = torch.empty(input_size, dtype=grad.dtype, device=grad.device)
    _detcoll.upsample_bilinear2d_backward(
        out.data_ptr(), grad.data_ptr(), DTYPES[grad.dtype], input_size[0] * input_size[1],
        input_size[2], input_size[3], output_size[0], output_size[1], bool(align_corners),
        _scale(scales_h), _scale(scales_w))
    return out


class _Bilinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, size, scale_factor, align_corners, recompute_scale_factor):
        out = torch.nn.functional.interpolate(
            input, size=size, scale_factor=scale_factor, mode="bilinear",
            align_corners=align_corners, recompute_scale_factor=recompute_scale_factor)
        ctx.input_size = tuple(input.shape)
        ctx.align_corners = bool(align_corners)
        # The forward op sees the scale factors only when they are given and not recomputed.
        if scale_factor is not None and not recompute_scale_factor:
            factors = scale_factor if isinstance(scale_factor, (list, tuple)) else (scale_factor,)
            factors = tuple(float(v) for v in factors)
            ctx.scales = factors * 2 if len(factors) == 1 else factors
        else:
            ctx.scales = (None, None)
        return out

    @staticmethod
    @once_differentiable  # detcoll's kernels write through pointers: no graph
    def backward(ctx, grad):
        return (upsample_bilinear2d_backward(grad, grad.shape[2:], ctx.input_size,
                                             ctx.align_corners, *ctx.scales),
                None, None, None, None)


def interpolate(input, size=None, scale_factor=None, mode="bilinear", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate for mode 'bilinear' (4-D input, up or down), with a
    deterministic backward; the forward is PyTorch's."""
    op = "interpolate"
    if mode != "bilinear" or antialias:
        raise detcoll.InvalidArgumentError(
            f"{op}: mode {mode!r}{' with antialias' if antialias else ''}; only 'bilinear' "
            "without antialias has a deterministic backward here")
    x = _floating(input, op, "input")
    if x.dim() != 4:
        raise detcoll.InvalidArgumentError(
            f"{op}: bilinear needs a 4-D input (N, C, H, W), got {tuple(x.shape)}")
    return _Bilinear.apply(input, size, scale_factor, bool(align_corners),
                           recompute_scale_factor)


def _pool_arguments(op, kernel_size, stride, padding, dilation):
    kernel = _pair(kernel_size, op, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _pair(stride, op, "stride")
    return kernel, stride, _pair(padding, op, "padding"), _pair(dilation, op, "dilation")


def _planes(x, op):
    if x.dim() not in (3, 4):
        raise detcoll.InvalidArgumentError(
            f"{op}: the input must be 3-D (C, H, W) or 4-D (N, C, H, W), got {tuple(x.shape)}")
    return int(torch.tensor(x.shape[:-2]).prod()) if x.dim() > 2 else 1


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False):
    """F.max_pool2d(..., return_indices=True) computed by detcoll (no autograd): the values and
    the indices, ties and NaNs resolved as PyTorch does."""
    op = "max_pool2d"
    x = _floating(input, op, "input")
    planes = _planes(x, op)
    args = _pool_arguments(op, kernel_size, stride, padding, dilation)
    h, w = _detcoll.max_pool2d_output_size(x.shape[-2], x.shape[-1], *args, bool(ceil_mode))
    shape = tuple(x.shape[:-2]) + (h, w)
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    indices = torch.empty(shape, dtype=torch.int64, device=x.device)
    _detcoll.max_pool2d(out.data_ptr(), indices.data_ptr(), x.data_ptr(), DTYPES[x.dtype], planes,
                        x.shape[-2], x.shape[-1], *args, bool(ceil_mode))
    return out, indices


def max_pool2d_with_indices_backward(grad_output, input, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    """aten's max_pool2d_with_indices_backward: the input's gradient, deterministic."""
    op = "max_pool2d_backward"
    grad = _floating(grad_output, op, "grad_output")
    _same_dtype(op, input, grad, "grad_output")
    indices = _indices(indices, op, "indices")
    planes = _planes(input, op)
    args = _pool_arguments(op, kernel_size, stride, padding, dilation)
    h, w = _detcoll.max_pool2d_output_size(input.shape[-2], input.shape[-1], *args,
                                           bool(ceil_mode))
    expected = tuple(input.shape[:-2]) + (h, w)
    if tuple(grad.shape) != expected or tuple(indices.shape) != expected:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {tuple(grad.shape)} and indices {tuple(indices.shape)} must be "
            f"{expected}")
    out = torch.empty(tuple(input.shape), dtype=grad.dtype, device=grad.device)
    _detcoll.max_pool2d_backward(out.data_ptr(), grad.data_ptr(), indices.data_ptr(),
                                 DTYPES[grad.dtype], planes, input.shape[-2], input.shape[-1],
                                 *args, bool(ceil_mode))
    return out


class _MaxPool2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, kernel_size, stride, padding, dilation, ceil_mode):
        out, indices = max_pool2d_with_indices(input, kernel_size, stride, padding, dilation,
                                               ceil_mode)
        ctx.save_for_backward(input, indices)
        ctx.args = (kernel_size, stride, padding, dilation, ceil_mode)
        ctx.mark_non_differentiable(indices)
        return out, indices

    @staticmethod
    @once_differentiable  # detcoll's kernels write through pointers: no graph
    def backward(ctx, grad, _):
        input, indices = ctx.saved_tensors
        return (max_pool2d_with_indices_backward(grad, input, *ctx.args, indices),
                None, None, None, None, None)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """torch.nn.functional.max_pool2d, forward and backward computed by detcoll
    (deterministic; the indices equal PyTorch's)."""
    out, indices = _MaxPool2d.apply(input, kernel_size, stride, padding, dilation, ceil_mode)
    return (out, indices) if return_indices else out
