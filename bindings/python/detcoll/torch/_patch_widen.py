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


def _dense(t):
    """Whether t's elements fill its span exactly once, in some order of its dimensions."""
    expected = 1
    for stride, size in sorted((stride, size) for size, stride in zip(t.shape, t.stride())
                               if size != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _span(t):
    lo = hi = t.data_ptr()
    for size, stride in zip(t.shape, t.stride()):
        extent = (size - 1) * stride * t.element_size()
        lo, hi = (lo + extent, hi) if extent < 0 else (lo, hi + extent)
    return lo, hi + t.element_size()


def _no_overlap(op, self, *others):
    """An in-place op whose other inputs share elements with `self` is refused, as torch refuses
    it (at::assert_no_overlap): the same tensor, or two dense tensors whose spans meet. Views that
    are not dense (a column beside another) pass, as in torch; detcoll's ops read such inputs
    before they write (the non-dense one is copied), so the result does not depend on the order
    of the writes."""
    for other in others:
        if other is self:
            raise detcoll.InvalidArgumentError(
                f"{op}: some elements of the input tensor and the written-to tensor refer to a "
                "single memory location")
        if self.numel() == 0 or other.numel() == 0 or not (_dense(self) and _dense(other)):
            continue
        mine, theirs = _span(self), _span(other)
        if mine[0] < theirs[1] and theirs[0] < mine[1]:
            raise detcoll.InvalidArgumentError(
                f"{op}: some elements of the input tensor and the written-to tensor refer to a "
                "single memory location")
