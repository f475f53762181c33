"""detcoll.torch.ops: deterministic versions of the ops whose GPU kernels use atomicAdd, with the
arguments of the PyTorch functions they replace.

Each destination's contributions are reduced in increasing source position, accumulated in
float (float32, float16, bfloat16), double (float64) or int64, and rounded once: the same bits
run after run and for any number of threads (README, "Deterministic ops"). This version runs on
CPU tensors; inputs may be non-contiguous (they are copied).

    from detcoll.torch import ops
    out = ops.scatter_add(x, 0, index, src)           # torch.scatter_add
    y = ops.embedding(ids, weight, padding_idx=0)     # F.embedding, deterministic backward
"""

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._tensors import DTYPES

__all__ = [
    "set_num_threads", "scatter_add", "scatter_add_", "index_add", "index_add_",
    "unsorted_segment_sum", "unsorted_segment_mean", "embedding", "embedding_bag",
    "embedding_dense_backward", "embedding_bag_backward", "bincount", "sum", "bias_add_grad",
    "interpolate", "upsample_bilinear2d_backward", "max_pool2d", "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
]


def set_num_threads(threads):
    """Threads for the CPU ops (0: every core). The bits do not depend on it."""
    _detcoll.ops_set_threads(int(threads))


def _values(tensor, op, what):
    if not isinstance(tensor, torch.Tensor):
        raise detcoll.InvalidArgumentError(f"{op}: {what} is not a torch.Tensor")
    if tensor.dtype not in DTYPES:
        raise detcoll.InvalidArgumentError(
            f"{op}: {what} has dtype {tensor.dtype}; float32, float64, float16, bfloat16, int32 "
            "and int64 are supported")
    if tensor.device.type != "cpu":
        raise detcoll.InvalidArgumentError(
            f"{op}: {what} is on {tensor.device}; this version runs on CPU tensors")
    return tensor.contiguous()


def _indices(tensor, op, what):
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int64:
        raise detcoll.InvalidArgumentError(
            f"{op}: {what} must be an int64 tensor, got "
            f"{tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor)}")
    if tensor.device.type != "cpu":
        raise detcoll.InvalidArgumentError(f"{op}: {what} is on {tensor.device}")
    return tensor.contiguous()


def _same_dtype(op, a, b, what):
    if a.dtype != b.dtype:
        raise detcoll.InvalidArgumentError(f"{op}: {what} has dtype {b.dtype}, expected {a.dtype}")


def _in_place(target, compute):
    """Runs compute(contiguous) on target's values and writes the result back into target."""
    work = target if target.is_contiguous() else target.contiguous()
    compute(work)
    if work is not target:
        target.copy_(work)
    return target


# ---- scatter_add and index_add ----

def scatter_add_(input, dim, index, src):
    """input.scatter_add_(dim, index, src), deterministic."""
    op = "scatter_add"
    _values(input, op, "input")
    src, index = _values(src, op, "src"), _indices(index, op, "index")
    _same_dtype(op, input, src, "src")

    if not input.dim() == index.dim() == src.dim():
        raise detcoll.InvalidArgumentError(
            f"{op}: input {tuple(input.shape)}, index {tuple(index.shape)} and src "
            f"{tuple(src.shape)} must have the same number of dimensions")

    def compute(out):
        _detcoll.scatter_add(out.data_ptr(), list(out.shape), DTYPES[out.dtype], int(dim),
                             index.data_ptr(), list(index.shape), src.data_ptr(),
                             list(src.shape))
    return _in_place(input, compute)


def scatter_add(input, dim, index, src):
    """torch.scatter_add(input, dim, index, src), deterministic."""
    return scatter_add_(_values(input, "scatter_add", "input").clone(), dim, index, src)


def index_add_(input, dim, index, source, alpha=1):
    """input.index_add_(dim, index, source, alpha=alpha), deterministic."""
    op = "index_add"
    _values(input, op, "input")
    source, index = _values(source, op, "source"), _indices(index, op, "index")
    _same_dtype(op, input, source, "source")
    if index.dim() > 1:
        raise detcoll.InvalidArgumentError(f"{op}: index must be 1-D, got {tuple(index.shape)}")

    if source.dim() != input.dim():
        raise detcoll.InvalidArgumentError(
            f"{op}: source {tuple(source.shape)} and input {tuple(input.shape)} must have the "
            "same number of dimensions")

    def compute(out):
        _detcoll.index_add(out.data_ptr(), list(out.shape), DTYPES[out.dtype], int(dim),
                           index.data_ptr(), index.numel(), source.data_ptr(),
                           list(source.shape), float(alpha))
    return _in_place(input, compute)


def index_add(input, dim, index, source, alpha=1):
    """torch.index_add(input, dim, index, source, alpha=alpha), deterministic."""
    return index_add_(_values(input, "index_add", "input").clone(), dim, index, source, alpha)


# ---- segment reductions and bincount ----

def _segment(data, segment_ids, num_segments, mean):
    op = "unsorted_segment_mean" if mean else "unsorted_segment_sum"
    data, ids = _values(data, op, "data"), _indices(segment_ids, op, "segment_ids")
    if tuple(data.shape[:ids.dim()]) != tuple(ids.shape):
        raise detcoll.InvalidArgumentError(
            f"{op}: segment_ids {tuple(ids.shape)} must be a prefix of data's shape "
            f"{tuple(data.shape)}")
    if int(num_segments) < 0:
        raise detcoll.InvalidArgumentError(f"{op}: num_segments is {num_segments}")
    out = torch.empty((int(num_segments),) + tuple(data.shape[ids.dim():]), dtype=data.dtype)
    _detcoll.unsorted_segment_reduce(out.data_ptr(), int(num_segments), DTYPES[data.dtype],
                                     data.data_ptr(), list(data.shape), ids.data_ptr(), ids.dim(),
                                     mean)
    return out


def unsorted_segment_sum(data, segment_ids, num_segments):
    """tf.math.unsorted_segment_sum: out[k] = sum of data[i] with segment_ids[i] == k (negative
    ids dropped)."""
    return _segment(data, segment_ids, num_segments, False)


def unsorted_segment_mean(data, segment_ids, num_segments):
    """tf.math.unsorted_segment_mean (an empty segment is 0)."""
    return _segment(data, segment_ids, num_segments, True)


def bincount(input, weights=None, minlength=0):
    """torch.bincount(input, weights, minlength), deterministic with weights."""
    op = "bincount"
    input = _indices(input, op, "input")
    if input.dim() != 1:
        raise detcoll.InvalidArgumentError(f"{op}: input must be 1-D, got {tuple(input.shape)}")
    if weights is not None:
        weights = _values(weights, op, "weights")
        if weights.shape != input.shape:
            raise detcoll.InvalidArgumentError(
                f"{op}: weights {tuple(weights.shape)} and input {tuple(input.shape)} differ")
    dtype = weights.dtype if weights is not None else torch.int64
    wptr = weights.data_ptr() if weights is not None else 0
    length = _detcoll.bincount(0, DTYPES[dtype], input.data_ptr(), input.numel(), wptr,
                               int(minlength))
    out = torch.empty(length, dtype=dtype)
    _detcoll.bincount(out.data_ptr(), DTYPES[dtype], input.data_ptr(), input.numel(), wptr,
                      int(minlength))
    return out


# ---- embedding and embedding_bag ----

def embedding_dense_backward(grad_output, indices, num_weights, padding_idx=-1,
                             scale_grad_by_freq=False):
    """aten's embedding_dense_backward: the weight's gradient, deterministic."""
    op = "embedding_backward"
    indices = _indices(indices, op, "indices").reshape(-1)
    grad = _values(grad_output, op, "grad_output")
    dim = grad.shape[-1] if grad.dim() else 1
    if grad.numel() != indices.numel() * dim:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {tuple(grad.shape)} does not match indices of "
            f"{indices.numel()} elements")
    out = torch.empty((int(num_weights), dim), dtype=grad.dtype)
    _detcoll.embedding_backward(out.data_ptr(), int(num_weights), DTYPES[grad.dtype],
                                grad.data_ptr(), indices.numel(), dim, indices.data_ptr(),
                                -1 if padding_idx is None else int(padding_idx),
                                bool(scale_grad_by_freq))
    return out


class _Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, padding_idx, scale_grad_by_freq):
        ctx.save_for_backward(input)
        ctx.num_weights, ctx.padding_idx = weight.shape[0], padding_idx
        ctx.scale_grad_by_freq = scale_grad_by_freq
        return torch.nn.functional.embedding(input, weight, padding_idx)

    @staticmethod
    def backward(ctx, grad):
        input, = ctx.saved_tensors
        return (None, embedding_dense_backward(grad, input, ctx.num_weights, ctx.padding_idx,
                                               ctx.scale_grad_by_freq), None, None)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """torch.nn.functional.embedding with a deterministic backward (dense gradients only)."""
    if max_norm is not None or sparse:
        raise detcoll.InvalidArgumentError(
            "embedding: max_norm and sparse gradients are not supported")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return _Embedding.apply(input, weight, -1 if padding_idx is None else padding_idx,
                            scale_grad_by_freq)


def embedding_bag_backward(grad_output, indices, offsets, num_weights, mode="sum",
                           per_sample_weights=None, padding_idx=-1):
    """The weight's gradient of embedding_bag (mode sum or mean), deterministic."""
    op = "embedding_bag_backward"
    if mode not in ("sum", "mean"):
        raise detcoll.InvalidArgumentError(f"{op}: mode {mode!r}; sum and mean are supported")
    grad = _values(grad_output, op, "grad_output")
    indices, offsets = _indices(indices, op, "indices"), _indices(offsets, op, "offsets")
    if grad.dim() != 2 or grad.shape[0] != offsets.numel():
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {tuple(grad.shape)} must be [bags, dim] with bags = "
            f"{offsets.numel()} offsets")
    weights = 0
    if per_sample_weights is not None:
        per_sample_weights = _values(per_sample_weights, op, "per_sample_weights")
        _same_dtype(op, grad, per_sample_weights, "per_sample_weights")
        if per_sample_weights.numel() != indices.numel():
            raise detcoll.InvalidArgumentError(
                f"{op}: {per_sample_weights.numel()} per_sample_weights for "
                f"{indices.numel()} indices")
        weights = per_sample_weights.data_ptr()
    out = torch.empty((int(num_weights), grad.shape[1]), dtype=grad.dtype)
    _detcoll.embedding_bag_backward(out.data_ptr(), int(num_weights), DTYPES[grad.dtype],
                                    grad.data_ptr(), offsets.numel(), grad.shape[1],
                                    indices.data_ptr(), indices.numel(), offsets.data_ptr(),
                                    mode == "mean", weights,
                                    -1 if padding_idx is None else int(padding_idx))
    return out


class _EmbeddingBag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, offsets, mode, per_sample_weights, padding_idx):
        ctx.save_for_backward(input, offsets, per_sample_weights)
        ctx.num_weights, ctx.mode, ctx.padding_idx = weight.shape[0], mode, padding_idx
        return torch.nn.functional.embedding_bag(
            input, weight, offsets, mode=mode, per_sample_weights=per_sample_weights,
            padding_idx=None if padding_idx < 0 else padding_idx)

    @staticmethod
    def backward(ctx, grad):
        input, offsets, per_sample_weights = ctx.saved_tensors
        return (None, embedding_bag_backward(grad, input, offsets, ctx.num_weights, ctx.mode,
                                             per_sample_weights, ctx.padding_idx),
                None, None, None, None)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """torch.nn.functional.embedding_bag (1-D input with offsets, or 2-D input of equal bags),
    mode sum or mean, with a deterministic backward for the weight."""
    if max_norm is not None or sparse or scale_grad_by_freq or include_last_offset:
        raise detcoll.InvalidArgumentError(
            "embedding_bag: max_norm, sparse, scale_grad_by_freq and include_last_offset are "
            "not supported")
    if per_sample_weights is not None and per_sample_weights.requires_grad:
        raise detcoll.InvalidArgumentError(
            "embedding_bag: gradients for per_sample_weights are not supported")
    if input.dim() == 2:
        bags, width = input.shape
        offsets = torch.arange(0, bags * width, width, dtype=torch.int64)
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return _EmbeddingBag.apply(input, weight, offsets, mode, per_sample_weights,
                               -1 if padding_idx is None else padding_idx)


# ---- sums with a fixed tree ----

def sum(input, dim=None, keepdim=False):  # noqa: A001 (torch.sum's name)
    """torch.sum(input, dim, keepdim) with a fixed summation tree: chunks of 32 consecutive
    values summed in order, then pairwise (README, "Deterministic ops")."""
    op = "sum"
    x = _values(input, op, "input")
    rank = x.dim()
    if dim is None:
        axes = list(range(rank))
    else:
        axes = [int(d) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    normalized = []
    for d in axes:
        if not -max(rank, 1) <= d < max(rank, 1):
            raise detcoll.InvalidArgumentError(
                f"{op}: dim {d} is out of range for {rank} dimensions")
        normalized.append(d % max(rank, 1))
    if rank == 0:
        normalized = []
    if len(set(normalized)) != len(normalized):
        raise detcoll.InvalidArgumentError(f"{op}: dim {axes} names an axis twice")
    kept = [s for i, s in enumerate(x.shape) if i not in normalized]
    out = torch.empty(kept, dtype=x.dtype)
    _detcoll.sum_over_axes(x.data_ptr(), list(x.shape), DTYPES[x.dtype], normalized,
                           out.data_ptr())
    if keepdim:
        out = out.reshape([1 if i in normalized else s for i, s in enumerate(x.shape)])
    return out


def bias_add_grad(grad, data_format="NHWC"):
    """tf.nn.bias_add's gradient (BiasAddGrad): the sum over every axis but the channels'."""
    op = "bias_add_grad"
    if data_format not in ("NHWC", "NCHW"):
        raise detcoll.InvalidArgumentError(f"{op}: data_format {data_format!r}; NHWC or NCHW")
    g = _values(grad, op, "grad")
    if g.dim() < 2:
        raise detcoll.InvalidArgumentError(
            f"{op}: the gradient needs at least 2 dimensions, has {g.dim()}")
    channels = g.shape[1] if data_format == "NCHW" else g.shape[-1]
    out = torch.empty(channels, dtype=g.dtype)
    _detcoll.bias_add_grad(g.data_ptr(), list(g.shape), DTYPES[g.dtype], data_format == "NCHW",
                           out.data_ptr())
    return out


# ---- gathers: bilinear resampling's backward, 2-D max pooling ----

def _floating(tensor, op, what):
    x = _values(tensor, op, what)
    if not x.is_floating_point():
        raise detcoll.InvalidArgumentError(f"{op}: {what} has dtype {x.dtype}; floating point only")
    return x


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
    out = torch.empty(input_size, dtype=grad.dtype)
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
    out = torch.empty(shape, dtype=x.dtype)
    indices = torch.empty(shape, dtype=torch.int64)
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
    out = torch.empty(tuple(input.shape), dtype=grad.dtype)
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
