"""The argument checks shared by detcoll.torch.ops and its gathers (_gathers.py)."""

import torch

import detcoll
from detcoll.torch._tensors import DTYPES


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
