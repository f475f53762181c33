"""detcoll.torch.patch(): torch's own operators, run by detcoll's deterministic kernels, so that
an unchanged model's forward and backward use them (the determinism guides' patch() for
TensorFlow, for PyTorch).

    import detcoll.torch
    detcoll.torch.patch()                 # the CUDA kernels that accumulate with atomicAdd
    torch.use_deterministic_algorithms(True)   # covered ops no longer raise
    ...
    detcoll.torch.unpatch()
    with detcoll.torch.patched(devices=("cpu",)):   # a scope; CPU too (for tests)
        ...

Each replaced operator is one of aten's, registered through torch.library for one device type:
what torch calls, from any model code, autograd's backward formulas included, runs detcoll's
kernel there (detcoll.torch.ops; README, "Deterministic ops" gives each one's order). Before it
registers anything, patch() compares each operator's schema in this torch with the one it was
written for, and refuses the whole patch, naming the operator, where one differs
(docs/design.md, "Patching torch's operators").
"""

import contextlib
import math
import re
import threading
import warnings

import torch

import detcoll
from detcoll.torch import _gathers, _losses, _nearest, _patch_windows, _selection
from detcoll.torch import ops as _ops
from detcoll.torch._patch_widen import _NARROW_INTEGERS, _index, _no_overlap, _widened

__all__ = ["patch", "unpatch", "patched", "patch_state", "PATCHABLE"]


def _bincount(self, weights=None, minlength=0):
    self = _index(self)
    if self.numel() == 0:
        # torch's result for an empty input, weights or not: minlength int64 zeros.
        return torch.zeros(int(minlength), dtype=torch.int64, device=self.device)
    # torch's result type: the weights' when they are float32 or float64, float64 for any other
    # weights, int64 without.
    if weights is not None and weights.dtype not in (torch.float32, torch.float64):
        weights = weights.to(torch.float64)
    return _ops.bincount(self, weights, minlength)


def _embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return _ops.embedding_dense_backward(grad_output, _index(indices), int(num_weights),
                                         int(padding_idx), bool(scale_grad_by_freq))


def _upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners,
                                  scales_h=None, scales_w=None):
    return _gathers.upsample_bilinear2d_backward(grad_output, [int(s) for s in output_size],
                                                 [int(s) for s in input_size], align_corners,
                                                 scales_h, scales_w)


def _upsample_bilinear2d_backward_vec(grad_output, output_size, input_size, align_corners,
                                      scale_factors):
    if (output_size is None) == (scale_factors is None):
        raise detcoll.InvalidArgumentError(
            "upsample_bilinear2d_backward: give exactly one of output_size and scale_factors")
    if output_size is None:
        # The forward's output size from the scale factors, as torch computes it.
        output_size = [int(float(input_size[2 + i]) * scale_factors[i]) for i in range(2)]
    scales = scale_factors if scale_factors is not None else (None, None)
    return _upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners,
                                         scales[0], scales[1])


def _max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
                                      ceil_mode, indices):
    return _gathers.max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
                                                     padding, dilation, ceil_mode, indices)


def _scatter_add_into(self, dim, index, src):
    """scatter_add's result for self, as a new tensor of self's dtype."""
    wide_self, wide_src = _widened("scatter_add", self, src)
    out = _ops.scatter_add(wide_self, dim, index, wide_src)
    return out if out.dtype == self.dtype else out.to(self.dtype)


def _scatter_add(self, dim, index, src):
    return _scatter_add_into(self, dim, index, src)


def _scatter_add_(self, dim, index, src):
    _widened("scatter_add_", self, src)  # refuses complex
    _no_overlap("scatter_add_", self, index, src)
    if self.dtype in _NARROW_INTEGERS:
        return self.copy_(_scatter_add_into(self, dim, index, src))
    return _ops.scatter_add_(self, dim, index, src)


def _out_checked(op, out, self, *others):
    """The out= forms, as torch takes them: out of self's dtype, resized to self's shape first;
    then out may be self, or a view of exactly self's elements (an in-place call), and otherwise
    what _no_overlap refuses of an in-place call is refused of out."""
    if out.dtype != self.dtype:
        raise detcoll.InvalidArgumentError(
            f"{op}: out has dtype {out.dtype}; expected {self.dtype}, self's")
    if out.shape != self.shape:
        out.resize_(self.shape)
    same = out is self or (out.data_ptr() == self.data_ptr() and out.stride() == self.stride())
    _no_overlap(op, out, *others, *([] if same else [self]))


def _scatter_add_out(self, dim, index, src, *, out):
    _out_checked("scatter_add", out, self, index, src)
    return out.copy_(_scatter_add_into(self, dim, index, src))


def _narrow_alpha(self, alpha):
    """alpha as torch converts it for a narrow integer or bool self, before the sum is widened:
    bool for bool; for the others, a float within the dtype's range (compared before it is
    truncated toward zero), an integer within it too, or down to -255 for uint8 (wrapped as
    two's complement, as torch lets it be)."""
    if self.dtype == torch.bool:
        return float(bool(alpha))
    if self.dtype not in _NARROW_INTEGERS or isinstance(alpha, bool):
        return alpha
    info = torch.iinfo(self.dtype)
    lowest = -info.max if info.min == 0 and isinstance(alpha, int) else info.min
    if not lowest <= alpha <= info.max:  # NaN fails too
        raise detcoll.InvalidArgumentError(f"index_add: alpha {alpha} does not fit {self.dtype}")
    return math.trunc(alpha)


def _index_add_into(self, dim, index, source, alpha):
    """index_add's result for self, as a new tensor of self's dtype (0-d tensors as 1-D)."""
    alpha = _narrow_alpha(self, alpha)
    wide_self, wide_source = _widened("index_add", self, source)
    scalar = self.dim() == 0
    if scalar:
        wide_self, wide_source = wide_self.reshape(1), wide_source.reshape(1)
    out = _ops.index_add(wide_self, dim, _index(index), wide_source, alpha=alpha)
    if scalar:
        out = out.reshape(())
    return out if out.dtype == self.dtype else out.to(self.dtype)


def _index_add(self, dim, index, source, *, alpha=1):
    return _index_add_into(self, dim, index, source, alpha)


def _index_add_(self, dim, index, source, *, alpha=1):
    _widened("index_add_", self, source)  # refuses complex
    _no_overlap("index_add_", self, index, source)
    if self.dtype in _NARROW_INTEGERS or self.dim() == 0:
        return self.copy_(_index_add_into(self, dim, index, source, alpha))
    return _ops.index_add_(self, dim, _index(index), source, alpha=alpha)


def _index_add_out(self, dim, index, source, *, alpha=1, out):
    _out_checked("index_add", out, self, index, source)
    return out.copy_(_index_add_into(self, dim, index, source, alpha))


def _nll_loss_forward(self, target, weight, reduction, ignore_index):
    return _losses.nll_loss_forward(self, target, weight, int(reduction), int(ignore_index))


def _kthvalue(self, k, dim=-1, keepdim=False):
    return _selection.kthvalue(self, k, dim, keepdim)


def _median_dim(self, dim, keepdim=False):
    return _selection.median(self, dim, keepdim)


def _nearest_backward(grad_output, output_size, input_size, *scales):
    return _nearest.upsample_nearest_backward(grad_output, output_size, input_size, scales)


def _nearest_backward_vec(grad_output, output_size, input_size, scale_factors):
    return _nearest.upsample_nearest_backward_vec(grad_output, output_size, input_size,
                                                  scale_factors)


def _nearest_entries():
    """upsample_nearest{1,2,3}d_backward and their .vec overloads."""
    entries = {}
    for d, axes in ((1, ("scales",)), (2, ("scales_h", "scales_w")),
                    (3, ("scales_d", "scales_h", "scales_w"))):
        name = f"upsample_nearest{d}d_backward"
        scales = ", ".join(f"float? {a}=None" for a in axes)
        entries[name] = (f"aten::{name}(Tensor grad_output, int[{d}] output_size, "
                         f"int[{d + 2}] input_size, {scales}) -> Tensor", _nearest_backward)
        entries[f"{name}.vec"] = (f"aten::{name}.vec(Tensor grad_output, int[]? output_size, "
                                  "int[] input_size, float[]? scale_factors) -> Tensor",
                                  _nearest_backward_vec)
    return entries


# aten's operator (name.overload), the schema it was written for, and detcoll's kernel with that
# schema's arguments. Schemas are compared with SymInt read as int (torch 2 made some sizes
# symbolic; the values a kernel receives are the same integers).
PATCHABLE = {
    "bincount": (
        "aten::bincount(Tensor self, Tensor? weights=None, int minlength=0) -> Tensor",
        _bincount),
    "embedding_dense_backward": (
        "aten::embedding_dense_backward(Tensor grad_output, Tensor indices, int num_weights, "
        "int padding_idx, bool scale_grad_by_freq) -> Tensor",
        _embedding_dense_backward),
    "upsample_bilinear2d_backward": (
        "aten::upsample_bilinear2d_backward(Tensor grad_output, int[2] output_size, "
        "int[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) "
        "-> Tensor",
        _upsample_bilinear2d_backward),
    "upsample_bilinear2d_backward.vec": (
        "aten::upsample_bilinear2d_backward.vec(Tensor grad_output, int[]? output_size, "
        "int[] input_size, bool align_corners, float[]? scale_factors) -> Tensor",
        _upsample_bilinear2d_backward_vec),
    "max_pool2d_with_indices_backward": (
        "aten::max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, "
        "int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, "
        "Tensor indices) -> Tensor",
        _max_pool2d_with_indices_backward),
    "scatter_add": (
        "aten::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
        _scatter_add),
    "scatter_add_": (
        "aten::scatter_add_(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)",
        _scatter_add_),
    "index_add": (
        "aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, "
        "Scalar alpha=1) -> Tensor",
        _index_add),
    "index_add_": (
        "aten::index_add_(Tensor(a!) self, int dim, Tensor index, Tensor source, *, "
        "Scalar alpha=1) -> Tensor(a!)",
        _index_add_),
    "nll_loss_forward": (
        "aten::nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, "
        "int ignore_index) -> (Tensor output, Tensor total_weight)",
        _nll_loss_forward),
    "nll_loss2d_forward": (
        "aten::nll_loss2d_forward(Tensor self, Tensor target, Tensor? weight, int reduction, "
        "int ignore_index) -> (Tensor output, Tensor total_weight)",
        _nll_loss_forward),
    "kthvalue": (
        "aten::kthvalue(Tensor self, int k, int dim=-1, bool keepdim=False) -> "
        "(Tensor values, Tensor indices)",
        _kthvalue),
    "median.dim": (
        "aten::median.dim(Tensor self, int dim, bool keepdim=False) -> "
        "(Tensor values, Tensor indices)",
        _median_dim),
    **_nearest_entries(),
    **_patch_windows.entries(),
    "scatter_add.out": (
        "aten::scatter_add.out(Tensor self, int dim, Tensor index, Tensor src, *, "
        "Tensor(a!) out) -> Tensor(a!)",
        _scatter_add_out),
    "index_add.out": (
        "aten::index_add.out(Tensor self, int dim, Tensor index, Tensor source, *, "
        "Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
        _index_add_out),
}

_DISPATCH_KEYS = {"cuda": "CUDA", "cpu": "CPU"}

_lock = threading.Lock()
_state = {"library": None, "replaced": [], "calls": {}}


def _normalized(schema):
    return re.sub(r"\bSymInt\b", "int", str(schema))


def _overload(name):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _checked_ops(names, every):
    """The entries of PATCHABLE named, after their schemas are compared with this torch's. With
    `every` (patch() named no ops), an operator this torch lacks is left out: nothing can call
    it (torch 2 dropped the .vec overloads of the upsampling backward, which torch 1.13 calls).
    A named one it lacks, and any whose schema differs, refuse the whole patch."""
    unknown = [n for n in names if n not in PATCHABLE]
    if unknown:
        raise detcoll.InvalidArgumentError(
            f"detcoll.torch.patch: no deterministic kernel for {', '.join(unknown)}; it covers "
            f"{', '.join(PATCHABLE)}")
    present = []
    for name in names:
        expected = PATCHABLE[name][0]
        try:
            found = _normalized(_overload(name)._schema)
        except (AttributeError, RuntimeError):
            found = None
        if found is None and every:
            continue
        if found != expected:
            raise detcoll.InvalidArgumentError(
                f"detcoll.torch.patch: torch {torch.__version__} "
                + (f"has no operator aten::{name}" if found is None else
                   f"declares {found}")
                + f", but detcoll's kernel was written for {expected}; nothing was patched")
        present.append(name)
    return present


def _counted(name, fn, calls):
    def kernel(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)
    kernel.__name__ = f"detcoll_{name.replace('.', '_')}"
    return kernel


def patch(devices=("cuda",), ops=None):  # noqa: A002 (the ops it patches)
    """Registers detcoll's deterministic kernels in place of torch's for `devices` ("cuda", the
    default: where torch's accumulate with atomicAdd; "cpu" too, for tests) and `ops` (names of
    PATCHABLE; None: all that this torch has; an empty list: none, and nothing is patched).
    Returns the list of "aten::<op> on <device>" replaced. A second patch() without an unpatch()
    between refuses."""
    devices = (devices,) if isinstance(devices, str) else tuple(dict.fromkeys(devices))
    bad = [d for d in devices if d not in _DISPATCH_KEYS]
    if bad or not devices:
        raise detcoll.InvalidArgumentError(
            f"detcoll.torch.patch: devices must be among {', '.join(_DISPATCH_KEYS)}, got "
            f"{devices!r}")
    every = ops is None
    if every:
        ops = list(PATCHABLE)
    names = _checked_ops(list(dict.fromkeys([ops] if isinstance(ops, str) else ops)), every)
    with _lock:
        if _state["library"] is not None:
            raise detcoll.InvalidArgumentError(
                "detcoll.torch.patch: already patched (" + ", ".join(_state["replaced"]) +
                "); call detcoll.torch.unpatch() first")
        if not names:  # nothing to replace: nothing is patched, and a later patch() may run
            return []
        library = torch.library.Library("aten", "IMPL")
        calls = {}
        replaced = []
        try:
            with warnings.catch_warnings():
                # Replacing a registered kernel is the point; torch warns that it happens.
                warnings.filterwarnings("ignore", message=".*Overriding a previously registered")
                for device in devices:
                    for name in names:
                        library.impl(name, _counted(name, PATCHABLE[name][1], calls),
                                     _DISPATCH_KEYS[device])
                        replaced.append(f"aten::{name} on {device}")
        except Exception:
            _destroy(library)
            raise
        _state.update(library=library, replaced=replaced, calls=calls)
        return list(replaced)


def _destroy(library):
    """Removes the library's registrations now, whoever still holds the object (a traceback of a
    failed patch() does)."""
    destroy = getattr(library, "_destroy", None)
    if destroy is not None:
        destroy()  # torch 2
        return
    # torch 1.13: the registrations live as long as the C++ library object `m`; the names of
    # what Python registered, in torch.library._impls, as long as the Library.
    for key in getattr(library, "_op_impls", ()):
        torch.library._impls.discard(key)
    library._op_impls = set()
    if hasattr(library, "m"):
        del library.m


def unpatch():
    """Gives torch its own kernels back. Returns what was replaced (empty if nothing was)."""
    with _lock:
        library, replaced = _state["library"], _state["replaced"]
        _state.update(library=None, replaced=[])
    if library is not None:
        _destroy(library)
    return list(replaced)


@contextlib.contextmanager
def patched(devices=("cuda",), ops=None):  # noqa: A002
    """patch() for the scope of a with statement; yields what was replaced."""
    replaced = patch(devices, ops)
    try:
        yield replaced
    finally:
        unpatch()


def patch_state():
    """What is patched now, how many times each kernel ran since the last patch(), and the
    operators of PATCHABLE this torch does not have (left out)."""
    with _lock:
        return {"replaced": list(_state["replaced"]), "calls": dict(_state["calls"]),
                "absent": [f"aten::{name}" for name in PATCHABLE if not _exists(name)]}


def _exists(name):
    try:
        _overload(name)
        return True
    except (AttributeError, RuntimeError):
        return False
