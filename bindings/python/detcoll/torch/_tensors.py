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
    contiguous CPU or CUDA (check_device) tensor of a supported dtype (of any dtype with
    any_dtype, which returns None).
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
    check_device(tensor, call, verb)
    return DTYPES.get(tensor.dtype)


def check_device(tensor, call, verb):
    """Raises InvalidArgumentError naming `call` unless the tensor is on the CPU, or on a CUDA
    device and detcoll was built with CUDA (docs/design.md, "Device tensors in the engine")."""
    if tensor.device.type == "cpu":
        return
    if tensor.device.type == "cuda":
        if not _detcoll.cuda_built():
            raise detcoll.InvalidArgumentError(
                f"{call}: the tensor is on {tensor.device}, but this build of detcoll has no CUDA "
                "(build it where the CUDA toolkit is found); it takes CPU tensors")
        return
    raise detcoll.InvalidArgumentError(
        f"{call}: the tensor is on {tensor.device}; detcoll {verb} CPU and CUDA tensors")


def same_device(tensors, call):
    """The one torch.device of `tensors` (CUDA, or None for the CPU); InvalidArgumentError naming
    `call` when they are on different devices (a mix of CPU and CUDA tensors, or two GPUs)."""
    devices = []
    for t in tensors:
        if t.device not in devices:
            devices.append(t.device)
    if len(devices) > 1:
        raise detcoll.InvalidArgumentError(
            f"{call}: the tensors are on different devices ({', '.join(map(str, devices))}); "
            "one call's tensors are all on the CPU or all on one CUDA device")
    return devices[0] if devices and devices[0].type == "cuda" else None


# cudaStreamLegacy: torch's default stream is the legacy default stream, whose handle is 0; given
# as 0, detcoll would take it for "no stream" and wait on the host.
_LEGACY_STREAM = 0x1


# The current stream's raw handle by device index, without building a torch.cuda.Stream (a few
# microseconds each, twice per request); the public call where this torch lacks it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_raw_stream(index):
    """The raw handle (an int) of torch's current stream on CUDA device `index` for this thread."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


_get_device = getattr(torch._C, "_cuda_getDevice", None)


def current_device():
    """torch.cuda.current_device(), without its Python layer where this torch allows."""
    return _get_device() if _get_device is not None else torch.cuda.current_device()


def device_index(device):
    """A CUDA torch.device's index, the current device's where it names none."""
    return device.index if device.index is not None else current_device()


def use_current_stream(device):
    """Points detcoll's CUDA stream for this thread (detcoll_set_cuda_stream) at torch's current
    stream on `device` (a CUDA torch.device; None: nothing to do)."""
    if device is None:
        return
    stream = current_raw_stream(device_index(device))
    _detcoll.set_cuda_stream(stream if stream != 0 else _LEGACY_STREAM)


class DeviceRequest:
    """A request on CUDA tensors: its wait() makes torch's current stream (of the waiting thread)
    wait for the result, without the host waiting (docs/design.md, "Device tensors in the
    engine")."""

    def __init__(self, request, device):
        self._request, self._device = request, device

    def poll(self):
        return self._request.poll()

    def wait(self):
        use_current_stream(self._device)
        self._request.wait()
