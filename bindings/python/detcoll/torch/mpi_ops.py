"""Horovod 0.28's collectives on torch tensors (horovod/torch/mpi_ops.py's names and arguments),
every one a request of detcoll's fusion engine (_detcoll.enqueue; docs/design.md "One
asynchronous call").

A blocking call is its asynchronous call and synchronize(), under the same name, so a blocking
call on one rank pairs with an asynchronous one on another, as in Horovod. Names: "<op>.<name>",
or "<op>.noname.<n>" with n from one per-process counter shared by every op (Horovod's handle
numbers), so unnamed ops pair when every rank makes the same calls in the same order.

Requests are matched by name and enqueueing never waits for another rank. An op that needs two
exchanges (allgather with ranks that differ in dimension 0, alltoall, whose receive counts come
from the other ranks' splits) enqueues the first at call time and the second once the first has
completed: at poll() or synchronize(), or, for a handle dropped unwaited, on a background thread,
so that the other ranks are never left waiting for it.

This module has no autograd; detcoll.torch wraps the blocking ops in autograd Functions
(_autograd.py) with Horovod's gradients.
"""

import itertools
import threading

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._handles import _Handle, _single, poll, synchronize  # noqa: F401
from detcoll.torch._tensors import (
    DTYPES, DeviceRequest, checked_dtype, same_device, use_current_stream)

# ---- reduction ops ----
# Sum, Average, Min and Max are detcoll_op_t values; Adasum and Product are Python-side values
# (Horovod's numbering differs: only the names are its API).
Sum, Average, Min, Max = _detcoll.SUM, _detcoll.AVERAGE, _detcoll.MIN, _detcoll.MAX
Adasum, Product = 4, 5
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Adasum: "Adasum",
             Product: "Product"}

HorovodInternalError = detcoll.Error

# Tensors moved (not reduced) whose dtype the C API lacks travel widened to int32, exactly.
_WIDENED = (torch.uint8, torch.int8, torch.int16, torch.bool)


# ---- process sets ----

class ProcessSet:
    """Horovod's process set: collectives among some ranks (docs/design.md, "Process sets").
    Build it from the ranks (any order; they are kept sorted) and register it on every rank
    with add_process_set (or init(process_sets=[...])); a collective's process_set= then runs
    it among the members, numbered by their order (a broadcast's root_rank stays a rank of the
    world). A rank that is not a member gets InvalidArgumentError at once."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            self.ranks = sorted(int(r) for r in ranks_or_comm)
        except (TypeError, ValueError):
            raise detcoll.InvalidArgumentError(
                "ProcessSet should be initialized with a list of process ranks (an mpi4py "
                "communicator is not supported)") from None

    def size(self):
        """The number of members; None before the set is added."""
        if self.process_set_id is None:
            return None
        _require_init("ProcessSet.size")
        return _detcoll.process_set_size(self.process_set_id)

    def rank(self):
        """This rank's rank in the set; None before it is added. Raises for a non-member."""
        if self.process_set_id is None:
            return None
        _require_init("ProcessSet.rank")
        r = _detcoll.process_set_rank(self.process_set_id)
        if r < 0:
            raise detcoll.InvalidArgumentError("Process is not part of provided process set.")
        return r

    def included(self):
        if self.ranks is None:
            return None
        return _world_rank("ProcessSet.included") in self.ranks

    def __str__(self):
        return (f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, "
                f"mpi_comm={self.mpi_comm})")

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) and returns it with its id.
    Collective: every rank, member or not, adds the same sets in the same order (Horovod's rule;
    detcoll needs no HOROVOD_DYNAMIC_PROCESS_SETS). Ranks that disagree all get MismatchError."""
    _require_init("add_process_set")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise detcoll.InvalidArgumentError(
            f"add_process_set: {process_set} has been added already")
    process_set.process_set_id = _detcoll.process_set_add(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Removes an added set (collective, like add_process_set); False for the global set or a
    set not added. Its collectives must have completed."""
    _require_init("remove_process_set")
    if process_set.process_set_id in (None, 0):
        return False
    _detcoll.process_set_remove(process_set.process_set_id)
    process_set.process_set_id = None
    return True


class _Placement:
    """Where a collective runs: its process set's id, size and this rank's rank in it."""

    def __init__(self, set_id, size, rank):
        self.id, self.size, self.rank = set_id, size, rank


def _placement(process_set, call):
    """The placement of `call` in process_set. A rank outside the set fails here, at once and
    alone, as in Horovod: the members never wait for it."""
    _require_init(call)
    if process_set is None or process_set is global_process_set or \
            process_set.process_set_id == 0:
        return _Placement(0, _detcoll.size(), _detcoll.rank())
    if not isinstance(process_set, ProcessSet):
        raise detcoll.InvalidArgumentError(
            f"{call}: process_set must be a ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise detcoll.InvalidArgumentError(
            f"{call}: {process_set} has not been added (hvd.add_process_set)")
    rank = _detcoll.process_set_rank(process_set.process_set_id)
    if rank < 0:
        raise detcoll.InvalidArgumentError(
            f"{call}: rank {_detcoll.rank()} is not a member of the provided process set "
            f"{process_set}")
    return _Placement(process_set.process_set_id,
                      _detcoll.process_set_size(process_set.process_set_id), rank)


def _fill_global_set():
    global_process_set.ranks = list(range(_detcoll.size()))


# ---- the world ----

def _detcoll_size(call):
    _require_init(call)
    return _detcoll.size()


def _world_rank(call):
    _require_init(call)
    return _detcoll.rank()


def is_initialized():
    return _detcoll.size() > 0


def _require_init(call):
    if not is_initialized():
        raise detcoll.NotInitializedError(
            f"detcoll.torch.{call}() called before detcoll.torch.init()")


# ---- names ----

_counter_lock = threading.Lock()
_counter = itertools.count(1)
_barriers = {}  # process set id -> barriers so far


_STAGE = "\x1f"  # common/names.h's kStageSeparator: reserved, refused in names given


def _op_name(prefix, name):
    """Horovod's GetOpName: "<prefix>.<name>", or "<prefix>.noname.<n>" (n counts every op)."""
    if name is not None and ("\x00" in str(name) or _STAGE in str(name)):
        raise detcoll.InvalidArgumentError(
            f"{prefix}: the name {str(name)!r} holds a NUL or U+001F character, which detcoll "
            "reserves")
    with _counter_lock:
        n = next(_counter)
    return f"{prefix}.noname.{n}" if name is None else f"{prefix}.{name}"


def _stage(name, stage):
    """The name of a later request of a multi-request op (allgather's row counts): the op's name
    and the stage, apart by a byte no name given can hold, so it pairs with no other op."""
    return f"{name}{_STAGE}{stage}"


def _group_names(base, n):
    return [f"{base}_{i + 1}of{n}" for i in range(n)]


# ---- one rank's bad argument fails every rank ----

def _checked(call, checks, names, place=None):
    """Runs a call's local checks. When they fail, this rank still enqueues the request under
    each name the other ranks use, as rejected with the message (detcoll_reject_next_call), so
    that every rank gets the same InvalidArgumentError instead of the others waiting for this
    one. Raises the library's error."""
    _require_init(call)
    try:
        return checks()
    except detcoll.InvalidArgumentError as e:
        error = e
    requests = []
    for name in names:
        _detcoll.reject_next_call(str(error))
        requests.append(_detcoll.enqueue(_detcoll.REQUEST_ALLREDUCE, 0, 0, 0, _detcoll.FLOAT32,
                                         name=name, process_set=place.id if place else 0))
    for r in requests:
        r.wait()  # raises the rejection, naming this rank
    raise error  # not reached: the rejected requests fail


def _op(average, op, call):
    if average is not None and op is not None:
        raise detcoll.InvalidArgumentError(
            f"{call}: the op parameter supersedes average; give only one of them")
    if op is None:
        op = Average if average is None or average else Sum
    if op not in _OP_NAMES:
        raise detcoll.InvalidArgumentError(
            f"{call}: unknown op {op!r}; use Sum, Average, Min, Max or Product")
    if op == Adasum:
        raise detcoll.InvalidArgumentError(
            f"{call}: op=hvd.Adasum (horovod.torch.Adasum) is not supported: its result depends "
            "on the reduction tree, which detcoll does not fix; use op=hvd.Average with "
            "DETCOLL_DETERMINISM=invariant for a world-size invariant average")
    return op


def _reduce_dtype(tensor, call, op=Sum):
    dtype = checked_dtype(tensor, call, "reduces")
    if op == Product and tensor.is_floating_point() and detcoll.get_mode() == "invariant":
        raise detcoll.InvalidArgumentError(
            f"{call}: op=Product on {tensor.dtype} is not world-size invariant (a product of "
            "floating values is rounded at every step), so invariant mode refuses it; use "
            "DETCOLL_DETERMINISM=ordered (the rank-order product) or an integer dtype")
    return dtype


def _move_dtype(tensor, call, verb):
    """The detcoll dtype a moved tensor travels as: its own, or int32 for _WIDENED dtypes."""
    if isinstance(tensor, torch.Tensor) and tensor.dtype in _WIDENED:
        checked_dtype(tensor, call, verb, any_dtype=True)
        return DTYPES[torch.int32]
    return checked_dtype(tensor, call, verb)


def _carrier(tensor):
    """The tensor as it travels (a widened copy for _WIDENED dtypes)."""
    return tensor.to(torch.int32) if tensor.dtype in _WIDENED else tensor


def _scale(tensor, factor):
    """Horovod's scaling on the CPU (ScaleBufferCPUImpl): float32 and float64 multiplied in their
    dtype; float16 and bfloat16 in float32 and rounded once to their dtype; integers as
    trunc(double(factor) * x). Returns a new tensor or `tensor`."""
    factor = float(factor)
    if factor == 1.0:
        return tensor
    if tensor.dtype in (torch.float16, torch.bfloat16):
        return (tensor.to(torch.float32) * factor).to(tensor.dtype)
    if tensor.is_floating_point():
        return tensor * factor
    return (tensor.to(torch.float64) * factor).trunc().to(tensor.dtype)


def _shape(tensor):
    return [int(d) for d in tensor.shape]


def _enqueue(kind, send, recv, count, dtype, name, op=Sum, root=0, shape=None, counts=None,
             recvcounts=None, keep=(), place=None):
    device = same_device([t for t in (send, recv) if t is not None], name)
    # A request on CUDA tensors starts after the work already on torch's current stream.
    use_current_stream(device)
    request = _detcoll.enqueue(kind, send.data_ptr() if send is not None else 0,
                               recv.data_ptr() if recv is not None else 0, count, dtype, op=op,
                               root=root, name=name, shape=shape, counts=counts,
                               recvcounts=recvcounts, process_set=place.id if place else 0)
    request.keep(tuple(keep))
    return request if device is None else DeviceRequest(request, device)


# ---- allreduce ----

def _allreduce_steps(tensors, outs, names, op, prescale, postscale, place):
    """Reduces tensors[i] into outs[i] (which may be tensors[i]): Sum, Average, Min and Max by
    the engine; Product as an allgather and the rank-order fold. Integer Average is a Sum and
    Horovod's trunc((postscale / size) * sum)."""
    size = place.size
    scaled = [_scale(t, prescale) for t in tensors]
    if op == Product:
        gathered = [torch.empty((size,) + tuple(t.shape), dtype=t.dtype, device=t.device)
                    for t in scaled]
        yield [_enqueue(_detcoll.REQUEST_ALLGATHER, s, g, s.numel(), DTYPES[s.dtype], n,
                        shape=_shape(s), keep=(s, g), place=place)
               for s, g, n in zip(scaled, gathered, names)]
        for g, out in zip(gathered, outs):
            acc = g[0].clone()
            for k in range(1, size):
                acc.mul_(g[k])  # ((x0 * x1) * x2) ..., in the dtype
            out.copy_(_scale(acc, postscale))
        return tuple(outs)
    requests = []
    for s, out, n in zip(scaled, outs, names):
        integer_average = op == Average and not s.is_floating_point()
        requests.append(_enqueue(_detcoll.REQUEST_ALLREDUCE, s, out, s.numel(), DTYPES[s.dtype],
                                 n, op=Sum if integer_average else op, shape=_shape(s),
                                 keep=(s, out), place=place))
    yield requests
    for out in outs:
        if op == Average and not out.is_floating_point():
            out.copy_(_scale(out, float(postscale) / size))
        elif postscale != 1.0:
            out.copy_(_scale(out, postscale))
    return tuple(outs)


def _grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                             process_set, in_place, prefix, call):
    tensors = list(tensors)
    base = _op_name(prefix, name)
    names = [base] if prefix == "allreduce" else _group_names(base, len(tensors))

    place = _placement(process_set, call)

    def checks():
        checked_op = _op(average, op, call)
        if not tensors:
            raise detcoll.InvalidArgumentError(f"{call}: no tensors")
        for t in tensors:
            _reduce_dtype(t, call, checked_op)
        same_device(tensors, call)
        return checked_op

    checked_op = _checked(call, checks, names, place)
    outs = tensors if in_place else [torch.empty_like(t) for t in tensors]
    return _Handle(_allreduce_steps(tensors, outs, names, checked_op, prescale_factor,
                                    postscale_factor, place), names=names, place=place,
                   tensors=tensors)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    return _single(_grouped_allreduce_async([tensor], average, name, op, prescale_factor,
                                            postscale_factor, process_set, False, "allreduce",
                                            "allreduce_async"))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    return _single(_grouped_allreduce_async([tensor], average, name, op, prescale_factor,
                                            postscale_factor, process_set, True, "allreduce",
                                            "allreduce_async_"))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(_single(_grouped_allreduce_async(
        [tensor], average, name, op, prescale_factor, postscale_factor, process_set, True,
        "allreduce", "allreduce_")))


def allreduce_plain(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, call="allreduce"):
    return synchronize(_single(_grouped_allreduce_async(
        [tensor], average, name, op, prescale_factor, postscale_factor, process_set, False,
        "allreduce", call)))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, False, "grouped_allreduce",
                                    "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, True, "grouped_allreduce",
                                    "grouped_allreduce_async_")


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return list(synchronize(_grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set, True,
        "grouped_allreduce", "grouped_allreduce_")))


def grouped_allreduce_plain(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set,
                            call="grouped_allreduce"):
    return list(synchronize(_grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set, False,
        "grouped_allreduce", call)))


# ---- broadcast ----

def _broadcast_async(tensor, root_rank, name, process_set, in_place, call):
    full = _op_name("broadcast", name)

    place = _placement(process_set, call)

    def checks():
        dtype = _move_dtype(tensor, call, "broadcasts")
        if not 0 <= int(root_rank) < _detcoll.size():
            raise detcoll.InvalidArgumentError(
                f"{call}: root_rank {root_rank} is not a rank of a world of {_detcoll.size()}")
        return dtype

    dtype = _checked(call, checks, [full], place)
    out = tensor if in_place else tensor.clone()

    def steps():
        buf = _carrier(out)
        yield _enqueue(_detcoll.REQUEST_BROADCAST, None, buf, buf.numel(), dtype, full,
                       root=int(root_rank), shape=_shape(out), keep=(buf, out), place=place)
        if buf is not out:
            out.copy_(buf)
        return out

    return _Handle(steps(), names=[full], place=place, tensors=[tensor])


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, root_rank, name, process_set, False, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, root_rank, name, process_set, True, "broadcast_async_")


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(_broadcast_async(tensor, root_rank, name, process_set, True,
                                        "broadcast_"))


def broadcast_plain(tensor, root_rank, name=None, process_set=global_process_set,
                    call="broadcast"):
    return synchronize(_broadcast_async(tensor, root_rank, name, process_set, False, call))


# ---- control ----

def barrier(process_set=global_process_set):
    """Returns once every rank has called barrier (a one-element allreduce "barrier.<n>")."""
    place = _placement(process_set, "barrier")
    with _counter_lock:  # one sequence per set: a rank may be in sets the others are not
        n = _barriers[place.id] = _barriers.get(place.id, 0) + 1
    name = f"barrier.{place.id}.{n}"
    token = torch.zeros(1, dtype=torch.int32)
    _enqueue(_detcoll.REQUEST_ALLREDUCE, token, token, 1, DTYPES[torch.int32], name,
             shape=[1], keep=(token,), place=place).wait()


def join(device=-1):
    """Horovod's join, for a rank that ran out of data: blocks until every rank has joined,
    meanwhile taking part in the others' allreduces (of the global set) with zeros, so that
    their averages still divide by size(); their other collectives fail naming the ranks that
    joined (docs/design.md, "Join"). Returns the rank that joined last. `device` (a CUDA device
    index, as in Horovod) is where this rank's zeros for the others' CUDA allreduces are made
    until it has made a CUDA request of its own; -1: the current device."""
    _require_init("join")
    if int(device) >= 0 and _detcoll.cuda_built() and torch.cuda.is_available():
        with torch.cuda.device(int(device)):
            return _detcoll.join()
    return _detcoll.join()


# Allgather, reducescatter and alltoall: the ops of two exchanges (they import this module's
# helpers, which are all defined by now).
from detcoll.torch._exchanges import (  # noqa: E402,F401
    _split_rows, allgather_async, allgather_with_rows, alltoall_async, alltoall_plain,
    grouped_allgather_async, grouped_reducescatter_async, reducescatter_async,
    reducescatter_plain)
