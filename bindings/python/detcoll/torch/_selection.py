"""kthvalue and median with indices that do not depend on the kernel (detcoll.torch.ops).

torch's CUDA kernels return, among equal values, whichever index their threads reach first.
Here the order is the stable ascending order along the dimension (NaN after every number, ties by
position): kthvalue is its k-th element, with that element's index; median is the lower median
(k = (n + 1) // 2) of a slice without NaN, and NaN with the index of the slice's first NaN
otherwise, as torch.median propagates NaN. A stable order is unique, so the CPU and CUDA give the
same values and indices whatever sort runs underneath.
"""

import torch

import detcoll
from detcoll.torch._op_args import _placed


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


def _kth(x, k, dim, keepdim):
    """The k-th (1-based) element of the stable ascending order along dim, and its index."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    values, order = torch.sort(x, dim=dim, stable=True)
    value, index = values.narrow(dim, k - 1, 1), order.narrow(dim, k - 1, 1)
    if not keepdim:
        value, index = value.squeeze(dim), index.squeeze(dim)
    return value.contiguous(), index.contiguous()


def kthvalue(input, k, dim=-1, keepdim=False):  # noqa: A002
    """torch.kthvalue(input, k, dim, keepdim): (values, indices), the index of the k-th element
    of the stable ascending order (NaN last)."""
    op = "kthvalue"
    n = _slice_length(input, int(dim), op)
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
    value, index = _kth(input, (n + 1) // 2, dim, bool(keepdim))
    if not input.is_floating_point() or input.dim() == 0:
        return torch.return_types.median((value, index))
    nan = torch.isnan(input)
    has_nan = nan.any(dim=dim, keepdim=bool(keepdim))
    first_nan = nan.to(torch.uint8).argmax(dim=dim, keepdim=bool(keepdim))  # the first maximum
    value = torch.where(has_nan, torch.full_like(value, float("nan")), value)
    index = torch.where(has_nan, first_nan, index)
    return torch.return_types.median((value, index))
