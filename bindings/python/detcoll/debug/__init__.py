"""detcoll.debug: finding out why two runs did not reproduce (README, "Finding why two runs
differ"; docs/design.md, "The debugger").

- fingerprint(tensor): the 64-bit content hash (xxHash's XXH3) of a tensor's bytes, the unit by
  which traces and replicas are compared.
"""

import detcoll
from detcoll import _detcoll

__all__ = ["fingerprint"]


def fingerprint(tensor):
    """XXH3-64 of the tensor's bytes in row-major order (a non-contiguous tensor is hashed as its
    contiguous copy), as an int. Equal for bit-equal tensors of the same dtype and element count
    on every machine; anything else differs but for a 2^-64 chance. CPU tensors, and anything
    that exposes the buffer protocol (bytes, numpy arrays)."""
    import torch

    if isinstance(tensor, torch.Tensor):
        if tensor.device.type != "cpu":
            raise detcoll.InvalidArgumentError(
                f"fingerprint: a {tensor.device.type} tensor; fingerprints read host memory, so "
                "copy it to the CPU first (tensor.cpu())")
        t = tensor.detach()
        if t.is_conj() or t.is_neg():
            t = t.resolve_conj().resolve_neg()
        t = t.contiguous()
        return _detcoll.hash(t.data_ptr(), t.numel() * t.element_size())
    view = memoryview(tensor)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    if view.nbytes == 0:
        return _detcoll.hash(0, 0)
    import ctypes
    buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
        (ctypes.c_char * view.nbytes).from_buffer(view)
    return _detcoll.hash(ctypes.addressof(buf), view.nbytes)
