"""detcoll.torch: Horovod's PyTorch API over detcoll, for torch tensors.

    import detcoll.torch as hvd

works as `import horovod.torch as hvd` does for init, rank/size, allreduce (blocking, in place,
asynchronous, grouped), broadcast, allgather, broadcast_parameters, broadcast_optimizer_state and
DistributedOptimizer, with results that are bit-reproducible (DETCOLL_DETERMINISM=ordered, the
default) or also world-size invariant (invariant). Tensors must be contiguous CPU tensors of
float32, float64, float16, bfloat16, int32 or int64.
"""

import atexit
import io
import pickle

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch import ops, rng  # noqa: F401  (deterministic ops; keys and fills)
from detcoll.torch._tensors import DTYPES, checked_dtype
from detcoll.torch.compression import Compression

# detcoll_op_t, as the extension exports it.
Sum, Average, Min, Max = _detcoll.SUM, _detcoll.AVERAGE, _detcoll.MIN, _detcoll.MAX
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max"}

_DTYPES = DTYPES  # torch dtype -> detcoll_dtype_t

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "Sum",
    "Average", "Min", "Max", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "allgather", "allgather_async", "synchronize", "poll",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "DistributedOptimizer", "Compression", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "rng",
]


def init(comm=None):
    """Initializes detcoll on MPI_COMM_WORLD (comm must be None); shutdown() runs at exit."""
    if comm is not None:
        raise detcoll.InvalidArgumentError("detcoll.torch.init: only MPI_COMM_WORLD is supported")
    _detcoll.init()
    atexit.register(shutdown)


def shutdown():
    if is_initialized():
        _detcoll.finalize()


def is_initialized():
    return _detcoll.size() > 0


def rank():
    return _checked_world(_detcoll.rank(), "rank")


def size():
    return _checked_world(_detcoll.size(), "size")


def local_rank():
    return _checked_world(_detcoll.local_rank(), "local_rank")


def local_size():
    return _checked_world(_detcoll.local_size(), "local_size")


def mpi_threads_supported():
    return True


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """0: this version reduces CPU tensors over MPI (Horovod returns the NCCL version or 0)."""
    return 0


def _checked_world(value, what):
    if value < 0:
        raise detcoll.NotInitializedError(f"detcoll.torch.{what}() called before init()")
    return value


def _require_init(call):
    if not is_initialized():
        raise detcoll.NotInitializedError(
            f"detcoll.torch.{call}() called before detcoll.torch.init()")


def _dtype(tensor, call):
    _require_init(call)
    return checked_dtype(tensor, call, "reduces")


def _op(average, op, call):
    if average is not None and op is not None:
        raise detcoll.InvalidArgumentError(f"{call}: give average or op, not both")
    if op is None:
        op = Sum if average is False else Average
    if op not in _OP_NAMES:
        raise detcoll.InvalidArgumentError(f"{call}: unknown op {op!r}; use Sum, Average, Min, Max")
    return op


def _name(name):
    return "" if name is None else str(name)


class _Handle:
    """An asynchronous request and what it keeps alive until it completes."""

    def __init__(self, request, output, keep, after=None):
        request.keep(keep)  # the request holds its tensors until it completes
        self.request, self.output, self.after = request, output, after
        self.done = False


def _scaled(tensor, factor):
    if factor != 1.0:
        tensor.mul_(factor)
    return tensor


def _checked(call, checks, join):
    """Runs a call's local checks. When they fail, this rank still joins the collective, as
    rejected with their message (detcoll_reject_next_call), so that every rank gets the same
    InvalidArgumentError instead of the others waiting for this one. join() makes the C call
    with the name the other ranks use, and raises the library's error."""
    _require_init(call)
    try:
        return checks()
    except detcoll.InvalidArgumentError as e:
        error = e
    _detcoll.reject_next_call(str(error))
    join()
    raise error  # not reached: the rejected call fails


# What a rank whose checks failed joins the collective with (rejected, see _checked): no buffers,
# no elements; the dtype and op are placeholders.
_JOIN_DTYPE, _JOIN_OP = _detcoll.FLOAT32, _detcoll.SUM


def _join_allreduce(name):
    return lambda: _detcoll.allreduce(0, 0, 0, _JOIN_DTYPE, _JOIN_OP, _name(name))


def _join_allreduce_async(name):
    return lambda: _detcoll.allreduce_async(0, 0, 0, _JOIN_DTYPE, _JOIN_OP, _name(name)).wait()


def _join_broadcast(name):
    return lambda: _detcoll.broadcast(0, 0, _JOIN_DTYPE, 0, _name(name))


def _join_broadcast_async(name):
    return lambda: _detcoll.broadcast_async(0, 0, _JOIN_DTYPE, 0, _name(name)).wait()


def _join_allgather(name):
    return lambda: _detcoll.allgather(0, 0, 0, _JOIN_DTYPE, _name(name))


def _join_allgather_async(name):
    return lambda: _detcoll.allgather_async(0, 0, 0, _JOIN_DTYPE, _name(name)).wait()


# ---- allreduce ----

def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0):
    call = "allreduce_async_"
    dtype, op = _checked(call, lambda: (_dtype(tensor, call), _op(average, op, call)),
                         _join_allreduce_async(name))
    _scaled(tensor, prescale_factor)
    request = _detcoll.allreduce_async(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                       dtype, op, _name(name))
    return _Handle(request, tensor, (tensor,),
                   after=(lambda t: _scaled(t, postscale_factor)))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0):
    _checked("allreduce_async", lambda: _dtype(tensor, "allreduce_async"),
             _join_allreduce_async(name))
    return allreduce_async_(tensor.clone(), average, name, op, prescale_factor, postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0):
    call = "allreduce_"
    dtype, op = _checked(call, lambda: (_dtype(tensor, call), _op(average, op, call)),
                         _join_allreduce(name))
    _scaled(tensor, prescale_factor)
    _detcoll.allreduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), dtype, op,
                       _name(name))
    return _scaled(tensor, postscale_factor)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, compression=Compression.none):
    """The reduction of `tensor` over every rank, as a new tensor (Average by default).
    compression=Compression.fp16 reduces floating tensors in float16."""
    _checked("allreduce", lambda: _dtype(tensor, "allreduce"), _join_allreduce(name))
    compressed, ctx = compression.compress(tensor)
    if compressed is tensor:
        compressed = tensor.clone()
    reduced = allreduce_(compressed, average, name, op, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def _group_names(name, n):
    base = _name(name) or "grouped"
    return [f"{base}.{i}" for i in range(n)] if name is not None else [""] * n


def grouped_allreduce_async_(tensors, average=None, name=None, op=None):
    call = "grouped_allreduce_async_"
    tensors = list(tensors)
    names = _group_names(name, len(tensors))

    def checks():
        if not tensors:
            raise detcoll.InvalidArgumentError(f"{call}: no tensors")
        dtypes = {_dtype(t, call) for t in tensors}
        if len(dtypes) != 1:
            raise detcoll.InvalidArgumentError(f"{call}: the tensors of a group share one dtype")
        return dtypes.pop(), _op(average, op, call)

    def join():
        for r in _detcoll.grouped_allreduce_async([0] * len(tensors), [0] * len(tensors),
                                                  [0] * len(tensors), _JOIN_DTYPE, _JOIN_OP,
                                                  names):
            r.wait()

    dtype, op = _checked(call, checks, join)
    ptrs = [t.data_ptr() for t in tensors]
    requests = _detcoll.grouped_allreduce_async(ptrs, ptrs, [t.numel() for t in tensors], dtype,
                                                op, names)
    return [_Handle(r, t, (t,)) for r, t in zip(requests, tensors)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None):
    _require_init("grouped_allreduce_async")
    tensors = list(tensors)
    return grouped_allreduce_async_([t.clone() if isinstance(t, torch.Tensor) else t
                                     for t in tensors], average, name, op)


def grouped_allreduce_(tensors, average=None, name=None, op=None):
    _require_init("grouped_allreduce_")
    return [synchronize(h) for h in grouped_allreduce_async_(tensors, average, name, op)]


def grouped_allreduce(tensors, average=None, name=None, op=None):
    _require_init("grouped_allreduce")
    return [synchronize(h) for h in grouped_allreduce_async(tensors, average, name, op)]


# ---- broadcast and allgather ----

def _broadcast_view(tensor, call):
    """(buffer, its detcoll dtype, copy-back or None). A broadcast moves bytes, so tensors of
    other dtypes (bool, uint8, int8, ...) travel as int32 words of their bytes."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype in DTYPES:
        return tensor, _dtype(tensor, call), None
    checked_dtype(tensor, call, "broadcasts", any_dtype=True)
    raw = tensor.view(-1).view(torch.uint8)
    words = torch.zeros((raw.numel() + 3) // 4, dtype=torch.int32)
    words.view(torch.uint8)[:raw.numel()] = raw

    def copy_back(_):
        raw.copy_(words.view(torch.uint8)[:raw.numel()])

    return words, DTYPES[torch.int32], copy_back


def broadcast_async_(tensor, root_rank, name=None):
    call = "broadcast_async_"
    buf, dtype, after = _checked(call, lambda: _broadcast_view(tensor, call),
                                 _join_broadcast_async(name))
    request = _detcoll.broadcast_async(buf.data_ptr(), buf.numel(), dtype, int(root_rank),
                                       _name(name))
    return _Handle(request, tensor, (tensor, buf), after=after)


def broadcast_async(tensor, root_rank, name=None):
    _checked("broadcast_async", lambda: _broadcast_view(tensor, "broadcast_async"),
             _join_broadcast_async(name))
    return broadcast_async_(tensor.clone(), root_rank, name)


def broadcast_(tensor, root_rank, name=None):
    call = "broadcast_"
    buf, dtype, after = _checked(call, lambda: _broadcast_view(tensor, call),
                                 _join_broadcast(name))
    _detcoll.broadcast(buf.data_ptr(), buf.numel(), dtype, int(root_rank), _name(name))
    if after is not None:
        after(tensor)
    return tensor


def broadcast(tensor, root_rank, name=None):
    _checked("broadcast", lambda: _broadcast_view(tensor, "broadcast"), _join_broadcast(name))
    return broadcast_(tensor.clone(), root_rank, name)


def _gatherable(tensor, call):
    dtype = _dtype(tensor, call)
    if tensor.dim() == 0 or tensor.dim() > 8:
        raise detcoll.InvalidArgumentError(
            f"{call}: tensors of 1 to 8 dimensions are gathered along dimension 0; this one has "
            f"{tensor.dim()} (reshape a scalar to (1,))")
    return dtype


def allgather_async(tensor, name=None):
    """Concatenation over ranks along dimension 0 (all dimensions must agree)."""
    call = "allgather_async"
    dtype = _checked(call, lambda: _gatherable(tensor, call), _join_allgather_async(name))
    out = torch.empty((size() * tensor.shape[0],) + tuple(tensor.shape[1:]), dtype=tensor.dtype)
    request = _detcoll.allgather_async(tensor.data_ptr(), out.data_ptr(), tensor.numel(), dtype,
                                       _name(name))
    return _Handle(request, out, (tensor, out))


def allgather(tensor, name=None):
    """Concatenation over ranks along dimension 0. Ranks may differ in that dimension only."""
    call = "allgather"
    dtype = _checked(call, lambda: _gatherable(tensor, call),
                     _join_allgather(_name(name) + ".shapes"))
    shape = torch.tensor([tensor.dim()] + list(tensor.shape) + [0] * (8 - tensor.dim()),
                         dtype=torch.int64)
    shapes = torch.empty((size(), 9), dtype=torch.int64)
    _detcoll.allgather(shape.data_ptr(), shapes.data_ptr(), 9, DTYPES[torch.int64],
                       _name(name) + ".shapes")
    dims = shapes[:, 0].tolist()
    if len(set(dims)) != 1:
        raise detcoll.MismatchError(
            f"allgather: ranks gather tensors of different numbers of dimensions: {dims}")
    rows = shapes[:, 1].tolist()
    if any(shapes[r, 2:1 + dims[0]].tolist() != shapes[0, 2:1 + dims[0]].tolist()
           for r in range(size())):
        raise detcoll.MismatchError(
            "allgather: ranks gather tensors whose shapes differ beyond dimension 0: "
            f"{[tuple(shapes[r, 1:1 + dims[0]].tolist()) for r in range(size())]}")
    rest = tuple(tensor.shape[1:])
    widest = max(rows)
    padded = torch.zeros((widest,) + rest, dtype=tensor.dtype)
    padded[:tensor.shape[0]] = tensor
    gathered = torch.empty((size() * widest,) + rest, dtype=tensor.dtype)
    _detcoll.allgather(padded.data_ptr(), gathered.data_ptr(), padded.numel(), dtype, _name(name))
    return torch.cat([gathered[r * widest:r * widest + rows[r]] for r in range(size())])


def synchronize(handle):
    """Waits for an asynchronous request and returns its output tensor."""
    if not isinstance(handle, _Handle):
        raise detcoll.InvalidArgumentError("synchronize: not a handle of detcoll.torch")
    if not handle.done:
        handle.request.wait()  # raises on failure; the handle then stays failed
        handle.done = True
        if handle.after is not None:
            handle.after(handle.output)
    return handle.output


def poll(handle):
    """True once the request has completed (synchronize still returns its output)."""
    return handle.done or handle.request.poll()


# ---- model and optimizer state ----

def broadcast_parameters(params, root_rank):
    """Broadcasts a state_dict or an iterable of (name, tensor) from root_rank, in place."""
    _require_init("broadcast_parameters")
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    handles = []
    for name, p in items:
        tensor = p.data if isinstance(p, torch.nn.Parameter) else p
        # Parameters in another memory layout (channels_last) travel as a contiguous copy.
        staged = (tensor.contiguous() if isinstance(tensor, torch.Tensor) and
                  not tensor.is_contiguous() else tensor)
        handles.append((tensor, staged,
                        broadcast_async_(staged, root_rank, name="bcast." + str(name))))
    for tensor, staged, h in handles:
        synchronize(h)
        if staged is not tensor:
            tensor.copy_(staged)


def broadcast_object(obj, root_rank=0, name=None):
    """A picklable object from root_rank on every rank. If it cannot be pickled there, every
    rank raises InvalidArgumentError saying why."""
    _require_init("broadcast_object")
    name = name or "object"
    header = torch.zeros(2, dtype=torch.int64)  # (byte count, 1 if the bytes are an error)
    data = b""
    if rank() == root_rank:
        try:
            data = pickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 (any pickling failure is reported everywhere)
            data = f"{type(e).__name__}: {e}".encode()
            header[1] = 1
        header[0] = len(data)
    broadcast_(header, root_rank, name=name + ".length")
    raw = torch.zeros(int(header[0]), dtype=torch.uint8)
    if rank() == root_rank and data:
        raw.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    broadcast_(raw, root_rank, name=name + ".data")
    received = raw.numpy().tobytes()
    if header[1]:
        raise detcoll.InvalidArgumentError(
            f"broadcast_object: rank {root_rank} could not pickle the object: "
            f"{received.decode(errors='replace')}")
    return pickle.loads(received)


def broadcast_optimizer_state(optimizer, root_rank):
    """Makes every rank's optimizer state (tensors and hyper-parameters) root_rank's."""
    _require_init("broadcast_optimizer_state")
    state = optimizer.state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    state = broadcast_object(buffer.getvalue(), root_rank, name="optimizer_state")
    optimizer.load_state_dict(torch.load(io.BytesIO(state)))


from detcoll.torch.optimizer import DistributedOptimizer  # noqa: E402
