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


def _axes(t):
    """t's axes of more than one element as (stride, size), by stride."""
    return sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1)


def _apart(t):
    """Whether t's elements are distinct by its strides alone: each stride, in order, passes the
    extent of the smaller ones (so no two positions reach one element). False says nothing."""
    extent = 0
    for stride, size in _axes(t):
        if stride <= extent:
            return False
        extent += stride * (size - 1)
    return True


def _reaches(d, axes):
    """Whether d = sum c_k stride_k with |c_k| < size_k, for axes whose strides pass the extent
    of the smaller ones (_apart): from the largest stride down, c_k is one of the two integers
    nearest d / stride_k that leave a remainder the smaller axes can reach."""
    if not axes:
        return d == 0
    stride, size = axes[-1]
    rest = sum(s * (n - 1) for s, n in axes[:-1])
    low = d // stride
    return any(abs(c) < size and abs(d - c * stride) <= rest and _reaches(d - c * stride, axes[:-1])
               for c in (low, low + 1))


def _share_elements(a, b):
    """Whether two tensors whose spans meet have an element in common. Views that are not dense
    can interleave without one (a column beside another). Two views of one layout whose strides
    keep their elements apart are decided from their distance; others by their offsets. Tensors
    whose elements do not line up (other sizes, offsets between them) count as sharing."""
    size = a.element_size()
    if size != b.element_size() or (a.data_ptr() - b.data_ptr()) % size != 0:
        return True
    if a.shape == b.shape and a.stride() == b.stride() and _apart(a):
        return _reaches((b.data_ptr() - a.data_ptr()) // size, _axes(a))
    base = min(a.data_ptr(), b.data_ptr())
    return bool(torch.isin(_offsets(a, base), _offsets(b, base)).any())


def _overlaps_itself(t):
    """Whether two positions of t reach one element (an expanded or unfolded view)."""
    if t.numel() < 2 or _dense(t) or _apart(t):
        return False
    offsets = _offsets(t, t.data_ptr())
    return torch.unique(offsets).numel() != offsets.numel()


def _no_overlap(op, self, *others):
    """An in-place op whose other inputs share elements with `self`, or whose `self` reaches an
    element twice, is refused. torch refuses the same tensor, two dense tensors whose spans meet
    (at::assert_no_overlap), and a self with a stride of 0; it lets other views that are not dense
    through, and there its CPU loop reads what it has already written, so its result depends on
    the loop's order. detcoll refuses those that share an element too, and lets through the ones
    that only share a buffer (a column beside another), where the order cannot matter."""
    if _overlaps_itself(self):
        raise detcoll.InvalidArgumentError(
            f"{op}: the written-to tensor reaches some elements more than once (an expanded or "
            "unfolded view); clone() it first")
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
