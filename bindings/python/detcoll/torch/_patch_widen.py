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


def _offsets(t, base):
    """The element offsets of t from base (bytes), in elements of t's size."""
    offsets = torch.full((1,), (t.data_ptr() - base) // t.element_size(), dtype=torch.int64)
    for size, stride in zip(t.shape, t.stride()):
        offsets = (offsets[:, None] + torch.arange(size) * stride).reshape(-1)
    return offsets


def _share_elements(a, b):
    """Whether two tensors whose spans meet have an element in common. Views that are not dense
    can interleave without one (a column beside another); an element of a stride-0 view counts
    once. Tensors whose elements do not line up (other sizes, offsets between them) count as
    sharing."""
    base = min(a.data_ptr(), b.data_ptr())
    if a.element_size() != b.element_size() or \
            (a.data_ptr() - b.data_ptr()) % a.element_size() != 0:
        return True
    return bool(torch.isin(_offsets(a, base), _offsets(b, base)).any())


def _no_overlap(op, self, *others):
    """An in-place op whose other inputs share elements with `self` is refused. torch refuses the
    same tensor, or two dense tensors whose spans meet (at::assert_no_overlap), and lets views
    that are not dense through; for those its CPU loop reads what it has already written, so its
    result depends on the loop's order. detcoll refuses those that share an element too, and lets
    through the ones that only share a buffer (a column beside another), where the order cannot
    matter."""
    for other in others:
        shared = other is self
        if not shared and self.numel() > 0 and other.numel() > 0:
            mine, theirs = _span(self), _span(other)
            shared = mine[0] < theirs[1] and theirs[0] < mine[1] and (
                (_dense(self) and _dense(other)) or _share_elements(self, other))
        if shared:
            raise detcoll.InvalidArgumentError(
                f"{op}: some elements of the input tensor and the written-to tensor refer to a "
                "single memory location")
