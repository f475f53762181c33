"""kthvalue and median with indices that do not depend on the kernel (detcoll.torch.ops).

torch's CUDA kernels return, among equal values, whichever index their threads reach first.
Here the order is the stable ascending order along the dimension (NaN after every number, ties by
position): kthvalue is its k-th element, with that element's index; median is the lower median
(k = (n + 1) // 2) of a slice without NaN, and NaN with the index of the slice's first NaN
otherwise, as torch.median propagates NaN. A stable order is unique, so the CPU and CUDA give the
same values and indices: detcoll_kthvalue and detcoll_median (kernels/ops/selection.h).
"""

import math

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _placed
from detcoll.torch._tensors import DTYPES


def _slice_length(x, dim, op):
    if not isinstance(x, torch.Tensor):
        raise detcoll.InvalidArgumentError(f"{op}: input is not a torch.Tensor")
    _placed(x, op, "input")
    if x.is_complex():
        raise detcoll.InvalidArgumentError(f"{op}: complex input has no order")
    rank = max(x.dim(), 1)
    if not -rank <= dim < rank:
        raise detcoll.InvalidArgumentError(
            f"{op}: dim {dim} is out of range for {x.dim()} dimensions")
    return 1 if x.dim() == 0 else x.shape[dim]


def _kth(x, k, dim, keepdim, median=False):
    """detcoll_kthvalue (or detcoll_median): the k-th (1-based) element of the stable ascending
    order along dim, and its index (kernels/ops/selection.h). bool and 8- and 16-bit integers run
    as int32, which holds them exactly."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    shape = list(x.shape)
    length, outer, inner = shape[dim], math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    work = (x if x.dtype in DTYPES else x.to(torch.int32)).contiguous()
    values = torch.empty(outer * inner, dtype=work.dtype, device=x.device)
    indices = torch.empty(outer * inner, dtype=torch.int64, device=x.device)
    if values.numel():
        _detcoll.kthvalue(values.data_ptr(), indices.data_ptr(), work.data_ptr(),
                          DTYPES[work.dtype], outer, length, inner, k, median)
    kept = shape[:dim] + ([1] if keepdim else []) + shape[dim + 1:]
    return values.to(x.dtype).reshape(kept), indices.reshape(kept)


def kthvalue(input, k, dim=-1, keepdim=False):  # noqa: A002
    """torch.kthvalue(input, k, dim, keepdim): (values, indices), the index of the k-th element
    of the stable ascending order (NaN last)."""
    op = "kthvalue"
    n = _slice_length(input, int(dim), op)
    if isinstance(k, bool) or not isinstance(k, int) and not (
            isinstance(k, torch.Tensor) and k.dim() == 0 and not k.is_floating_point()):
        raise detcoll.InvalidArgumentError(f"{op}: k must be an integer, got {k!r}")
    if not 1 <= int(k) <= n:
        raise detcoll.InvalidArgumentError(
            f"{op}: k = {int(k)} is out of range for a dimension of {n} elements")
    return torch.return_types.kthvalue(_kth(input, int(k), int(dim), bool(keepdim)))


def median(input, dim=-1, keepdim=False):  # noqa: A002
    """torch.median(input, dim, keepdim): (values, indices), the lower median of the stable
    ascending order, or NaN at the slice's first NaN."""
    op = "median"
    dim = int(dim)
    n = _slice_length(input, dim, op)
    if n == 0:
        raise detcoll.InvalidArgumentError(f"{op}: a dimension of 0 elements has no median")
    return torch.return_types.median(_kth(input, (n + 1) // 2, dim, bool(keepdim), True))
