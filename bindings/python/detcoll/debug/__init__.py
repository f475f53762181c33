"""detcoll.debug: finding out why two runs did not reproduce (README, "Finding why two runs
differ"; docs/design.md, "The debugger").

- fingerprint(tensor): the 64-bit content hash (xxHash's XXH3) of a tensor's bytes, the unit by
  which traces and replicas are compared.
- record(dir, ops=False, every=1): the training trace of this rank (trace.py, capture.py);
  micro_batch(index) names a micro-batch's global index.
- check_replicas(model, optimizer=None): raises on every rank when the ranks' weights differ.
- python3 -m detcoll.debug diff RUN_A RUN_B: the first record where two runs part (diff.py);
  python3 -m detcoll.debug audit: the sources of nondeterminism on this machine (audit.py).
"""

import detcoll
from detcoll import _detcoll

__all__ = ["fingerprint", "record", "micro_batch", "check_replicas"]

# Environment variables that describe a run's bits (compared by diff) are DETCOLL_* and
# HOROVOD_*, but for these, which only say where to write what is observed.
OBSERVERS = ("DETCOLL_DEBUG_RECORD", "DETCOLL_TRACE", "DETCOLL_TIMELINE", "DETCOLL_LOG",
             "HOROVOD_TIMELINE", "HOROVOD_LOG")


def host_bytes(tensor, what="fingerprint"):
    """A CPU tensor's bytes in row-major order, as a flat uint8 tensor (a view where the tensor
    is contiguous, else its contiguous copy; conjugate and negative views resolved)."""
    import torch

    if tensor.device.type != "cpu":
        raise detcoll.InvalidArgumentError(
            f"{what}: a {tensor.device.type} tensor; fingerprints read host memory, so copy it to "
            "the CPU first (tensor.cpu())")
    t = tensor.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() and t.dtype != torch.uint8 else t


def hash_bytes(data):
    """XXH3-64 of a flat uint8 tensor (host_bytes's result)."""
    return _detcoll.hash(data.data_ptr(), data.numel())


def fingerprint(tensor):
    """XXH3-64 of the tensor's bytes in row-major order (a non-contiguous tensor is hashed as its
    contiguous copy), as an int. Equal for bit-equal tensors of the same dtype and element count
    on every machine; anything else differs but for a 2^-64 chance. CPU tensors, and anything
    that exposes the buffer protocol (bytes, numpy arrays)."""
    import torch

    if isinstance(tensor, torch.Tensor):
        return hash_bytes(host_bytes(tensor))
    view = memoryview(tensor)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    if view.nbytes == 0:
        return _detcoll.hash(0, 0)
    import ctypes
    buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
        (ctypes.c_char * view.nbytes).from_buffer(view)
    return _detcoll.hash(ctypes.addressof(buf), view.nbytes)


def record(directory, ops=False, every=1, values=True):
    from detcoll.debug import capture

    return capture.record(directory, ops=ops, every=every, values=values)


record.__doc__ = """See detcoll.debug.capture.record."""


def micro_batch(index):
    from detcoll.debug import capture

    capture.micro_batch(index)


def check_replicas(model, optimizer=None, process_set=None):
    from detcoll.debug import replicas

    replicas.check_replicas(model, optimizer, process_set=process_set)
