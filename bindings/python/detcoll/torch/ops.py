"""detcoll.torch.ops: deterministic versions of the ops whose GPU kernels use atomicAdd, with the
arguments of the PyTorch functions they replace.

Each destination's contributions are reduced in increasing source position, accumulated in
float (float32, float16, bfloat16), double (float64) or int64, and rounded once: the same bits
run after run and for any number of threads (README, "Deterministic ops"). CPU tensors run the
CPU reference, CUDA tensors the device kernels on torch's current stream, with the same bits; inputs
may be non-contiguous (they are copied).

    from detcoll.torch import ops
    out = ops.scatter_add(x, 0, index, src)           # torch.scatter_add
    y = ops.embedding(ids, weight, padding_idx=0)     # F.embedding, deterministic backward
"""

import numbers

import torch
from torch.autograd.function import once_differentiable

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _in_place, _indices, _same_dtype, _values
from detcoll.torch._tensors import DTYPES

__all__ = [
    "set_num_threads", "scatter_add", "scatter_add_", "index_add", "index_add_",
    "unsorted_segment_sum", "unsorted_segment_mean", "embedding", "embedding_bag",
    "embedding_dense_backward", "embedding_bag_backward", "bincount", "sum", "bias_add_grad",
    "interpolate", "upsample_bilinear2d_backward", "max_pool2d", "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward", "nll_loss", "kthvalue", "median",
    "upsample_nearest_backward", "reflection_pad_backward", "replication_pad_backward",
    "avg_pool_backward", "adaptive_avg_pool_backward", "max_pool_backward", "max_unpool",
    "upsample_backward", "index_put_", "index_put", "put_", "histc",
    "embedding_bag_dense_backward", "grid_sampler_backward", "ctc_loss_backward",
    "crop_and_resize", "sparse_dense_matmul", "weighted_scatter",
]


def set_num_threads(threads):
    """Threads for the CPU ops (0: every core). The bits do not depend on it."""
    _detcoll.ops_set_threads(int(threads))


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

    # The C entry takes alpha as a double. An integer alpha a double cannot hold (an int64
    # tensor's, past 2^53) goes as two that it can: integer sums wrap modulo 2^64, so adding
    # source · high and then source · low is adding source · alpha, exactly.
    if isinstance(alpha, torch.Tensor) and alpha.dim() == 0:
        alpha = alpha.item()
    if isinstance(alpha, numbers.Integral) and not isinstance(alpha, bool):
        alpha = int(alpha)  # numpy's integers too
    parts = [alpha]
    if isinstance(alpha, int) and not isinstance(alpha, bool) and not input.is_floating_point():
        info = torch.iinfo(input.dtype)
        if not info.min <= alpha <= info.max:
            raise detcoll.InvalidArgumentError(f"{op}: alpha {alpha} does not fit {input.dtype}")
        if float(alpha) != alpha:
            parts = [alpha >> 32 << 32, alpha - (alpha >> 32 << 32)]

    def compute(out):
        for part in parts:
            _detcoll.index_add(out.data_ptr(), list(out.shape), DTYPES[out.dtype], int(dim),
                               index.data_ptr(), index.numel(), source.data_ptr(),
                               list(source.shape), float(part))
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
    out = torch.empty((int(num_segments),) + tuple(data.shape[ids.dim():]), dtype=data.dtype,
                      device=data.device)
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
    out = torch.empty(length, dtype=dtype, device=input.device)
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
    out = torch.empty((int(num_weights), dim), dtype=grad.dtype, device=grad.device)
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
    @once_differentiable  # detcoll's kernels write through pointers: no graph
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
    if not isinstance(input, torch.Tensor) or input.dtype not in (torch.int64, torch.int32):
        raise detcoll.InvalidArgumentError(  # here, not in the backward
            "embedding: input must be an int64 or int32 tensor, got "
            f"{input.dtype if isinstance(input, torch.Tensor) else type(input)}")
    input = _indices(input.long(), "embedding", "input")  # torch takes int32 ids too
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
    out = torch.empty((int(num_weights), grad.shape[1]), dtype=grad.dtype, device=grad.device)
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
    @once_differentiable  # detcoll's kernels write through pointers: no graph
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
        offsets = torch.arange(0, bags * width, width, dtype=torch.int64, device=input.device)
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
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        axes = list(range(rank))  # torch 1.13 reduces every axis for an empty dim list too
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
    out = torch.empty(kept, dtype=x.dtype, device=x.device)
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
    out = torch.empty(channels, dtype=g.dtype, device=g.device)
    _detcoll.bias_add_grad(g.data_ptr(), list(g.shape), DTYPES[g.dtype], data_format == "NCHW",
                           out.data_ptr())
    return out


# The gathers (bilinear resampling's backward, 2-D max pooling) live in _gathers.py.
from detcoll.torch._gathers import (  # noqa: E402  (after the helpers they share)
    interpolate, max_pool2d, max_pool2d_with_indices, max_pool2d_with_indices_backward,
    upsample_bilinear2d_backward)

# The loss with a fixed summation order lives in _losses.py.
from detcoll.torch._losses import nll_loss  # noqa: E402,F401

# kthvalue and median with indices that do not depend on the kernel live in _selection.py.
from detcoll.torch._selection import kthvalue, median  # noqa: E402,F401

# Nearest-neighbour upsampling's backward (1-D to 3-D) lives in _nearest.py.
from detcoll.torch._nearest import upsample_nearest_backward  # noqa: E402,F401

# The backward of padding, pooling and interpolation lives in _adjoints.py.
from detcoll.torch._adjoints import (  # noqa: E402,F401
    adaptive_avg_pool_backward, avg_pool_backward, max_pool_backward, max_unpool,
    reflection_pad_backward, replication_pad_backward, upsample_backward, weighted_scatter)

# Accumulating writes through indices (index_put_, put_, histc, embedding_bag's gradient) live in
# _indexing.py.
from detcoll.torch._indexing import (  # noqa: E402,F401
    embedding_bag_dense_backward, histc, index_put, index_put_, put_)

# grid_sample's backward (2-D and 3-D) lives in _grid_sample.py.
from detcoll.torch._grid_sample import grid_sampler_backward  # noqa: E402,F401

# ctc_loss's backward lives in _ctc.py.
from detcoll.torch._ctc import ctc_loss_backward  # noqa: E402,F401

# crop_and_resize and sparse_dense_matmul, with TensorFlow's arguments, live in _tf_ops.py.
from detcoll.torch._tf_ops import crop_and_resize, sparse_dense_matmul  # noqa: E402,F401
