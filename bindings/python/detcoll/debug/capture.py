"""What the training trace hooks (trace.py): module calls (module paths, micro-batches and their
inputs), aten ops through a TorchDispatchMode (ops=True), detcoll.rng key derivations. The
optimizer's gradients, reductions and steps are reported by DistributedOptimizer itself
(detcoll/torch/optimizer.py) to record.active()."""

import atexit
import contextlib
import os
import re
import sys
import weakref

import torch
import torch.nn.modules.module as torch_module
from torch.utils._python_dispatch import TorchDispatchMode

import detcoll
from detcoll.debug import trace as _record

_AUTOGRAD_ENTRY = os.path.join("autograd", "__init__.py")


# Ops whose outputs are memory not yet written (or grown with such memory): recorded, marked
# "unwritten", since their bits differ from run to run and mean nothing until an op writes them;
# diff names an op that reads such memory before anything wrote it.
_UNWRITTEN = frozenset(("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                        "resize", "resize_", "resize_as", "resize_as_"))
# In-place ops that overwrite their first argument without reading it.
_OVERWRITE = frozenset(("copy_", "fill_", "zero_", "normal_", "uniform_", "random_",
                        "exponential_", "geometric_", "cauchy_", "log_normal_", "bernoulli_"))
_KINDS = {}  # op -> (makes no bits, unwritten, positions and names of write-only arguments)


def _kind(func):
    """What the recorder makes of an op, read from its schema once: views and metadata ops (t,
    view, expand, detach, ...) make no bits of their own; allocations make unwritten memory; an
    op's write-only arguments (out=, the target of copy_ or fill_) are not among its inputs."""
    known = _KINDS.get(func)
    if known is None:
        packet = func.__name__.split(".")[0]
        returns = func._schema.returns
        view = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                     for r in returns)
        written = set()
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write and \
                    (a.kwarg_only or (i == 0 and packet in _OVERWRITE)):
                written.add(a.name if a.kwarg_only else i)
        unwritten = packet in _UNWRITTEN and func.namespace == "aten"
        known = _KINDS[func] = (view and not unwritten, unwritten, frozenset(written))
    return known


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SHOWN = {}  # a code object's file -> how a call site shows it (None: torch or detcoll's own)


def _shown_file(name):
    shown = _SHOWN.get(name, False)
    if shown is False:
        if name.startswith((_record._TORCH_DIR, _record._DETCOLL_DIR)):
            shown = None
        else:
            try:
                shown = os.path.relpath(name)
            except ValueError:
                shown = name
        _SHOWN[name] = shown
    return shown


def _site_and_backward():
    """The first Python frame outside torch and detcoll ("file:line (function)"), and whether
    the op runs in autograd's backward."""
    frame, backward = sys._getframe(2), False
    while frame is not None:
        code = frame.f_code
        shown = _shown_file(code.co_filename)
        if shown is not None:
            return f"{shown}:{frame.f_lineno} ({code.co_name})", backward
        if code.co_name in ("backward", "grad") and code.co_filename.endswith(_AUTOGRAD_ENTRY) \
                and code.co_filename.startswith(_record._TORCH_DIR):
            backward = True
        frame = frame.f_back
    return "", backward


def _tensors(value, out):
    """The tensors in nested lists, tuples and dicts, in order (what an op's arguments and
    results hold)."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out)
    return out


class _Shown:
    """A value shown by a text of its own (its repr would hold a memory address)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _shown_value(value):
    if isinstance(value, torch.Tensor):
        return "T"
    if isinstance(value, torch.Generator):
        return _Shown(f"Generator(initial_seed={value.initial_seed()})")
    if type(value) in (list, tuple):
        return type(value)(_shown_value(v) for v in value)
    if type(value) is dict:
        return {k: _shown_value(v) for k, v in value.items()}
    return value


def _argument_text(args, kwargs):
    """The non-tensor arguments, exactly (a float's repr round-trips), tensors as T, without
    the memory addresses that other objects' reprs hold."""
    return _ADDRESS.sub("", repr((_shown_value(args), _shown_value(kwargs))))


def _accumulates(func, args, rec):
    """Whether an op of backward writes into a parameter's .grad (autograd's accumulation)."""
    arguments = func._schema.arguments
    if not arguments or arguments[0].alias_info is None or not arguments[0].alias_info.is_write:
        return False
    target = args[0] if args and isinstance(args[0], torch.Tensor) else None
    return target is not None and any(
        p.grad is not None and p.grad.data_ptr() == target.data_ptr()
        for p in rec.root_params)


class _OpMode(TorchDispatchMode):
    def __init__(self, recorder):
        super().__init__()
        self.recorder = recorder
        # Tensors an allocation returned and nothing wrote since: id -> (weak reference, version
        # counter then, the allocation record's seq). An op that reads one is marked.
        self.unwritten = {}

    def _unwritten_seq(self, t):
        entry = self.unwritten.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        if t._version != entry[1]:
            del self.unwritten[id(t)]  # written since
            return None
        return entry[2]

    def _input(self, rec, t):
        info = rec.tensor(t)
        seq = self._unwritten_seq(t) if self.unwritten else None
        return info if seq is None else f'{info[:-1]},"unwritten":{seq}}}'

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.recorder
        if not rec.recording() or func.namespace == "profiler":
            return func(*args, **kwargs)
        no_bits, unwritten, written = _kind(func)
        if no_bits:
            return func(*args, **kwargs)
        if written:
            read = _tensors([v for k, v in kwargs.items() if k not in written],
                            _tensors([a for i, a in enumerate(args) if i not in written], []))
        else:
            read = _tensors(kwargs, _tensors(args, []))
        inputs = [self._input(rec, t) for t in read]
        out = func(*args, **kwargs)
        results = _tensors(out, [])
        # An allocation's memory means nothing: described, not read (reading fresh pages would
        # fault them in twice).
        outputs = [rec.tensor(t, describe_only=True) if unwritten else rec.tensor(t)
                   for t in results]
        site, backward = _site_and_backward()
        if rec.in_step:
            phase = "step"
        elif backward and _accumulates(func, args, rec):
            phase = "accumulate"  # into .grad: the rank's running sum, not the micro-batch's
        elif backward:
            phase = "backward"
        elif rec.module_stack:
            phase = "forward"
        else:
            phase = "loss" if rec.micro >= 0 else "pre"
        module = rec.module_stack[-1] if rec.module_stack and not backward else ""
        seq = rec.op(str(func), module, site, phase, inputs, _argument_text(args, kwargs),
                     outputs, unwritten)
        if unwritten:
            if len(self.unwritten) > 4096:
                self.unwritten = {k: v for k, v in self.unwritten.items() if v[0]() is not None}
            for t in results:
                self.unwritten[id(t)] = (weakref.ref(t), t._version, seq)
        return out


class Session:
    """A recorder with its hooks installed; close() removes them and ends the files."""

    def __init__(self, directory, ops=False, every=1, values=True):
        if _record._active is not None:
            raise detcoll.InvalidArgumentError(
                "record: a recording is already in progress in this process")
        self.recorder = _record.Recorder(directory, ops=ops, every=every, values=values)
        self.explicit = False
        self.handles = [torch_module.register_module_forward_pre_hook(self._pre),
                        torch_module.register_module_forward_hook(self._post)]
        self.recorder.rng_log()
        self.mode = None
        if ops:
            self.mode = _OpMode(self.recorder)
            self.mode.__enter__()
        _record._active = self.recorder

    def _pre(self, module, args):
        rec = self.recorder
        if not rec.module_stack:
            roots = rec.module_names.get(id(module))
            if roots is None:
                roots = rec.module_names[id(module)] = {
                    id(m): (n or type(module).__name__) for n, m in module.named_modules()}
            rec.root = roots
            rec.root_params = list(module.parameters())
            starts = (torch.is_grad_enabled() and not rec.in_step and
                      any(True for _ in module.parameters()))
            if starts:
                if not self.explicit:
                    rec.start_micro_batch()
                self.explicit = False
                rec.inputs(args, {})
        names = getattr(rec, "root", {})
        rec.module_stack.append(names.get(id(module), type(module).__name__))

    def _post(self, module, args, output):
        if self.recorder.module_stack:
            self.recorder.module_stack.pop()

    def micro_batch(self, index):
        self.recorder.start_micro_batch(index)
        self.explicit = True

    def close(self):
        if _record._active is not self.recorder:
            return
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
        for handle in self.handles:
            handle.remove()
        _record._active = None
        self.recorder.close()


_session = None


@contextlib.contextmanager
def record(directory, ops=False, every=1, values=True):
    """Records this rank's training under `directory` (see detcoll/debug/trace.py): each
    micro-batch's inputs, each parameter's gradient before and after the reduction, parameters
    and optimizer state after each step(), detcoll.rng keys, and with ops=True every aten op of
    forward and backward with its module path, call site and fingerprints. every=N records steps
    0, N, 2N, ...; values=False keeps fingerprints only (diff then cannot count ulps)."""
    global _session
    _session = Session(directory, ops=ops, every=every, values=values)
    try:
        yield _session.recorder
    finally:
        session, _session = _session, None
        session.close()


def micro_batch(index):
    """Starts the micro-batch of global index `index` in this step (when ranks do not hold
    contiguous shares of the step's micro-batches in rank order, which diff assumes otherwise);
    the next top-level module call belongs to it."""
    if _session is None:
        raise detcoll.InvalidArgumentError("micro_batch: no recording in progress")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise detcoll.InvalidArgumentError(
            f"micro_batch: index must be a non-negative int, got {index!r}")
    _session.micro_batch(index)


def start_from_environment():
    """DETCOLL_DEBUG_RECORD=DIR (DETCOLL_DEBUG_RECORD_OPS=0|1, DETCOLL_DEBUG_RECORD_EVERY=N):
    records the whole script, from init to exit. Called by detcoll.torch.init()."""
    global _session
    directory = os.environ.get("DETCOLL_DEBUG_RECORD")
    if not directory or _session is not None:
        return
    ops = os.environ.get("DETCOLL_DEBUG_RECORD_OPS", "0")
    if ops not in ("0", "1"):
        raise detcoll.InvalidArgumentError(
            f"DETCOLL_DEBUG_RECORD_OPS must be 0 or 1, got {ops!r}")
    every = os.environ.get("DETCOLL_DEBUG_RECORD_EVERY", "1")
    if not every.isdigit() or int(every) < 1:
        raise detcoll.InvalidArgumentError(
            f"DETCOLL_DEBUG_RECORD_EVERY must be a positive integer, got {every!r}")
    _session = Session(directory, ops=ops == "1", every=int(every))
    atexit.register(_stop)


def _stop():
    global _session
    if _session is not None:
        session, _session = _session, None
        session.close()
