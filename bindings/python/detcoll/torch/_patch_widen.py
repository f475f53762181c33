"""What patch()'s wrappers bring to the form detcoll's kernels take (_patch.py,
_patch_windows.py)."""

import torch

import detcoll

# What detcoll's kernels take (detcoll.torch.ops): int64 indices, and values of float32, float64,
# float16, bfloat16, int32 and int64. The wrappers below bring what else torch accepts to that
# form where nothing is lost, and refuse the rest by name.
_NARROW_INTEGERS = (torch.int8, torch.uint8, torch.int16, torch.bool)


def _index(t):
    """Integer indices of any width as int64: the same values."""
    return t if t.dtype == torch.int64 or t.is_floating_point() else t.long()


def _widened(op, *tensors):
    """The tensors, with 8- and 16-bit integers and bool widened to int64 (integer sums do not
    depend on their order, and a bool sum read back as bool is their OR, as torch adds bools);
    complex refused by name."""
    for t in tensors:
        if t.is_complex():
            raise detcoll.InvalidArgumentError(
                f"detcoll.torch.patch: {op} of {t.dtype} has no deterministic kernel here; "
                "leave it out of patch(ops=...) or unpatch()")
    return [t.long() if t.dtype in _NARROW_INTEGERS else t for t in tensors]


def _no_overlap(op, self, *others):
    """An in-place op whose other inputs share memory with `self` is refused, as torch refuses it:
    the result would depend on the order of the writes."""
    def span(t):
        if t.numel() == 0:
            return None
        lo = hi = t.data_ptr()
        for size, stride in zip(t.shape, t.stride()):
            extent = (size - 1) * stride * t.element_size()
            lo, hi = (lo + extent, hi) if extent < 0 else (lo, hi + extent)
        return lo, hi + t.element_size()

    mine = span(self)
    for other in others:
        theirs = span(other)
        if mine and theirs and mine[0] < theirs[1] and theirs[0] < mine[1]:
            raise detcoll.InvalidArgumentError(
                f"{op}: some elements of the input tensor and the written-to tensor refer to a "
                "single memory location")
