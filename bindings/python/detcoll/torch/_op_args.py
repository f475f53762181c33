"""The argument checks shared by detcoll.torch.ops and its gathers (_gathers.py)."""

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._tensors import DTYPES, use_current_stream


def _values(tensor, op, what):
    if not isinstance(tensor, torch.Tensor):
        raise detcoll.InvalidArgumentError(f"{op}: {what} is not a torch.Tensor")
    if tensor.dtype not in DTYPES:
        raise detcoll.InvalidArgumentError(
            f"{op}: {what} has dtype {tensor.dtype}; float32, float64, float16, bfloat16, int32 "
            "and int64 are supported")
    _placed(tensor, op, what)
    return tensor.contiguous()


def _floating(tensor, op, what):
    """_values, of a floating-point dtype."""
    x = _values(tensor, op, what)
    if not x.is_floating_point():
        raise detcoll.InvalidArgumentError(f"{op}: {what} has dtype {x.dtype}; floating point only")
    return x


def _indices(tensor, op, what):
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int64:
        raise detcoll.InvalidArgumentError(
            f"{op}: {what} must be an int64 tensor, got "
            f"{tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor)}")
    _placed(tensor, op, what)
    return tensor.contiguous()


def _placed(tensor, op, what):
    """A CPU tensor, or a CUDA tensor in a build with CUDA: the op then runs on torch's current
    stream (detcoll_set_cuda_stream), and the library names any buffer on another device."""
    if tensor.device.type == "cpu":
        return
    if tensor.device.type == "cuda" and _detcoll.cuda_built():
        use_current_stream(tensor.device)
        return
    why = ("this build of detcoll has no CUDA" if tensor.device.type == "cuda" else
           "the ops take CPU and CUDA tensors")
    raise detcoll.InvalidArgumentError(f"{op}: {what} is on {tensor.device}; {why}")


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
