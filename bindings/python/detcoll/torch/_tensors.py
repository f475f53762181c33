"""The checks every detcoll.torch entry point makes on a tensor before its address goes to C."""

import torch

import detcoll
from detcoll import _detcoll

# torch dtype -> detcoll_dtype_t, as the extension exports it
DTYPES = {
    torch.float32: _detcoll.FLOAT32, torch.float64: _detcoll.FLOAT64,
    torch.float16: _detcoll.FLOAT16, torch.bfloat16: _detcoll.BFLOAT16,
    torch.int32: _detcoll.INT32, torch.int64: _detcoll.INT64,
}


def checked_dtype(tensor, call, verb, any_dtype=False):
    """The tensor's detcoll dtype; raises InvalidArgumentError naming `call` for anything but a
    contiguous CPU tensor of a supported dtype (of any dtype with any_dtype, which returns None).
    `verb` says what the call does ("reduces")."""
    if not isinstance(tensor, torch.Tensor):
        raise detcoll.InvalidArgumentError(f"{call}: expected a torch.Tensor, got {type(tensor)}")
    if not any_dtype and tensor.dtype not in DTYPES:
        raise detcoll.InvalidArgumentError(
            f"{call}: unsupported dtype {tensor.dtype}; detcoll {verb} float32, float64, "
            "float16, bfloat16, int32 and int64")
    if not tensor.is_contiguous():
        raise detcoll.InvalidArgumentError(
            f"{call}: the tensor is not contiguous (shape {tuple(tensor.shape)}, stride "
            f"{tensor.stride()}); pass tensor.contiguous()")
    if tensor.device.type != "cpu":
        raise detcoll.InvalidArgumentError(
            f"{call}: the tensor is on {tensor.device}; this version {verb} CPU tensors only")
    return DTYPES.get(tensor.dtype)
