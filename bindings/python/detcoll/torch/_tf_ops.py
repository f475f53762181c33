"""Two ops of the TensorFlow determinism list, with TensorFlow's arguments (detcoll.torch.ops):
crop_and_resize (tf.image.crop_and_resize) and sparse_dense_matmul
(tf.sparse.sparse_dense_matmul), each with a deterministic backward.

crop_and_resize: detcoll_crop_and_resize and its backward (kernels/ops/crop.h). The forward
gathers; the image's gradient adds each crop position's gradient times its bilinear weights into
the four pixels it read (top-left, top-right, bottom-left, bottom-right), in the order of the
boxes, positions and corners, per channel; the boxes' gradient sums each box's terms over
positions and channels in order. sparse_dense_matmul: row r of the result adds value ×
dense[column] for the nonzeros of row r in the order they are given, through
detcoll_sparse_dense_matmul; the dense operand's gradient is the same product with the sparse
matrix transposed (README, "Deterministic ops").
"""

import torch
from torch.autograd.function import once_differentiable

import detcoll
from detcoll import _detcoll
from detcoll.torch import ops
from detcoll.torch._op_args import _floating, _indices, _same_dtype
from detcoll.torch._tensors import DTYPES


def _one_device(op, first, *named):
    """Every tensor on first's device, or the first that is not named."""
    for name, t in named:
        if t.device != first.device:
            raise detcoll.InvalidArgumentError(
                f"{op}: {name} is on {t.device} and the other inputs on {first.device}")


class _CropAndResize(torch.autograd.Function):
    """detcoll_crop_and_resize and detcoll_crop_and_resize_backward (kernels/ops/crop.h)."""

    @staticmethod
    def forward(ctx, image, boxes, box_indices, crop_size, method, extrapolation_value):
        n, height, width, channels = image.shape
        sizes = [n, height, width, channels, boxes.shape[0], crop_size[0], crop_size[1]]
        out = torch.empty(boxes.shape[0], crop_size[0], crop_size[1], channels,
                          dtype=image.dtype, device=image.device)
        # image, boxes and box_indices are contiguous (_floating, _indices).
        _detcoll.crop_and_resize(out.data_ptr(), image.data_ptr(), boxes.data_ptr(),
                                 box_indices.data_ptr(), DTYPES[image.dtype], sizes,
                                 method == "nearest", extrapolation_value)
        ctx.save_for_backward(image, boxes, box_indices)
        ctx.sizes, ctx.nearest = sizes, method == "nearest"
        return out

    @staticmethod
    @once_differentiable  # detcoll's kernels write through pointers: no graph
    def backward(ctx, grad):
        image, boxes, box_indices = ctx.saved_tensors
        grads = grad.contiguous()
        want_image, want_boxes = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        image_grad = torch.empty_like(image) if want_image else None
        box_grad = torch.empty_like(boxes) if want_boxes else None
        _detcoll.crop_and_resize_backward(
            0 if image_grad is None else image_grad.data_ptr(),
            0 if box_grad is None else box_grad.data_ptr(), grads.data_ptr(), image.data_ptr(),
            boxes.data_ptr(), box_indices.data_ptr(), DTYPES[image.dtype], ctx.sizes,
            ctx.nearest)
        return image_grad, box_grad, None, None, None, None


def crop_and_resize(image, boxes, box_indices, crop_size, method="bilinear",
                    extrapolation_value=0.0):
    """tf.image.crop_and_resize: image [batch, height, width, channels], boxes [n, 4] as
    normalized (y1, x1, y2, x2), box_indices [n] the image of each box, crop_size (height,
    width); method "bilinear" or "nearest". Differentiable in image and boxes, deterministic."""
    op = "crop_and_resize"
    image = _floating(image, op, "image")
    boxes = _floating(boxes, op, "boxes")
    _same_dtype(op, image, boxes, "boxes")
    box_indices = _indices(box_indices, op, "box_indices")
    if method not in ("bilinear", "nearest"):
        raise detcoll.InvalidArgumentError(f"{op}: method {method!r}; bilinear or nearest")
    if image.dim() != 4 or boxes.dim() != 2 or boxes.shape[1] != 4:
        raise detcoll.InvalidArgumentError(
            f"{op}: image {tuple(image.shape)} must be [batch, height, width, channels] and "
            f"boxes {tuple(boxes.shape)} [n, 4]")
    if tuple(box_indices.shape) != (boxes.shape[0],):
        raise detcoll.InvalidArgumentError(
            f"{op}: box_indices {tuple(box_indices.shape)} must have one entry per box "
            f"({boxes.shape[0]})")
    if box_indices.numel() and (int(box_indices.min()) < 0 or
                                int(box_indices.max()) >= image.shape[0]):
        raise detcoll.InvalidArgumentError(
            f"{op}: a box index is outside the batch of {image.shape[0]} images")
    _one_device(op, image, ("boxes", boxes), ("box_indices", box_indices))
    try:
        crop_size = tuple(int(v) for v in crop_size)
        extrapolation_value = float(extrapolation_value)
    except (TypeError, ValueError):
        raise detcoll.InvalidArgumentError(
            f"{op}: crop_size {crop_size!r} must be 2 sizes and extrapolation_value "
            f"{extrapolation_value!r} a number") from None
    if len(crop_size) != 2 or min(crop_size) < 1:
        raise detcoll.InvalidArgumentError(f"{op}: crop_size {crop_size} must be 2 positive sizes")
    if boxes.numel() and not bool(torch.isfinite(boxes).all()):
        raise detcoll.InvalidArgumentError(f"{op}: a box has a coordinate that is not finite")
    return _CropAndResize.apply(image, boxes, box_indices, crop_size, method,
                                extrapolation_value)


def _spmm(rows, cols, values, out_rows, dense):
    """Row r of the result: Σ values[k] × dense[cols[k]] over the nonzeros k of row r, in order:
    detcoll_sparse_dense_matmul (kernels/ops/scatter.h), the segment engine over dense's rows."""
    # Held in locals: a temporary's memory could be freed before the call reads it.
    dense, rows, cols, values = (t.contiguous() for t in (dense, rows, cols, values))
    out = torch.empty(out_rows, dense.shape[1], dtype=dense.dtype, device=dense.device)
    _detcoll.sparse_dense_matmul(out.data_ptr(), out_rows, DTYPES[dense.dtype],
                                 rows.data_ptr(), cols.data_ptr(),
                                 values.data_ptr(), rows.numel(), dense.data_ptr(),
                                 dense.shape[0], dense.shape[1])
    return out


class _SparseDense(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, cols, values, shape, dense):
        ctx.save_for_backward(rows, cols, values, dense)
        ctx.shape = shape
        return _spmm(rows, cols, values, shape[0], dense)

    @staticmethod
    @once_differentiable  # detcoll's kernels write through pointers: no graph
    def backward(ctx, grad):
        rows, cols, values, dense = ctx.saved_tensors
        grad_values = grad_dense = None
        if ctx.needs_input_grad[4]:
            grad_dense = _spmm(cols, rows, values, ctx.shape[1], grad.contiguous())
        if ctx.needs_input_grad[2]:
            # d out[r] / d values[k] = dense[cols[k]]: a dot product per nonzero (fixed tree).
            grad_values = ops.sum(grad.index_select(0, rows) * dense.index_select(0, cols),
                                  dim=1)
        return None, None, grad_values, None, grad_dense


def sparse_dense_matmul(sp_indices, sp_values, dense_shape, dense, adjoint_a=False,
                        adjoint_b=False):
    """tf.sparse.sparse_dense_matmul for a sparse matrix given as indices [nnz, 2] (row, column),
    values [nnz] and dense_shape (rows, columns): A · B (A or B transposed with adjoint_a,
    adjoint_b; real values). Differentiable in values and dense, deterministic."""
    op = "sparse_dense_matmul"
    sp_indices = _indices(sp_indices, op, "sp_indices")
    values = _floating(sp_values, op, "sp_values")
    dense = _floating(dense, op, "dense")
    _same_dtype(op, values, dense, "dense")
    _one_device(op, dense, ("sp_indices", sp_indices), ("sp_values", values))
    shape = tuple(int(v) for v in dense_shape)
    if dense.dim() != 2:
        raise detcoll.InvalidArgumentError(
            f"{op}: dense must be a matrix, got {tuple(dense.shape)}")
    if len(shape) != 2 or min(shape, default=0) < 0 or sp_indices.dim() != 2 or \
            sp_indices.shape[1] != 2 or tuple(values.shape) != (sp_indices.shape[0],):
        raise detcoll.InvalidArgumentError(
            f"{op}: sp_indices {tuple(sp_indices.shape)} must be [nnz, 2], sp_values "
            f"{tuple(values.shape)} [nnz] and dense_shape {shape} 2 sizes")
    rows, cols = sp_indices[:, 0].contiguous(), sp_indices[:, 1].contiguous()
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= shape[0] or
                         int(cols.min()) < 0 or int(cols.max()) >= shape[1]):
        raise detcoll.InvalidArgumentError(f"{op}: an index lies outside dense_shape {shape}")
    if adjoint_a:
        rows, cols, shape = cols, rows, (shape[1], shape[0])
    b = dense.transpose(0, 1) if adjoint_b else dense
    if b.dim() != 2 or b.shape[0] != shape[1]:
        raise detcoll.InvalidArgumentError(
            f"{op}: the sparse matrix is {shape} and the dense one {tuple(b.shape)}")
    return _SparseDense.apply(rows, cols, values, shape, b)
