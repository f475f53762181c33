"""detcoll.torch: Horovod 0.28's PyTorch API over detcoll, for torch tensors.

    import detcoll.torch as hvd

runs horovod.torch scripts: init and the queries, allreduce (blocking, in place, asynchronous,
grouped; Sum, Average, Min, Max, Product, prescale and postscale), broadcast, allgather,
reducescatter, alltoall (with their grouped and asynchronous variants and Horovod's gradients),
barrier, poll and synchronize, broadcast_parameters, broadcast_optimizer_state and
DistributedOptimizer, with results that are bit-reproducible (DETCOLL_DETERMINISM=ordered, the
default) or also world-size invariant (invariant). Tensors must be contiguous CPU tensors;
reductions take float32, float64, float16, bfloat16, int32 and int64, and the ops that move data
also uint8, int8, int16 and bool. Not there yet: process sets other than the global one, join,
Adasum (refused: see mpi_ops._op), the timeline at run time (DETCOLL_TIMELINE), CUDA tensors.
"""

import atexit
import io
import pickle

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch import ops, rng  # noqa: F401  (deterministic ops; keys and fills)
from detcoll.torch import mpi_ops
from detcoll.torch._autograd import (  # noqa: F401  (the autograd-aware collectives)
    allgather, allreduce, alltoall, broadcast, grouped_allgather, grouped_allreduce,
    grouped_reducescatter, reducescatter)
from detcoll.torch._tensors import DTYPES
from detcoll.torch.compression import Compression
from detcoll.torch.mpi_ops import (  # noqa: F401  (Horovod's names)
    Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum,
    add_process_set, allgather_async, allreduce_, allreduce_async, allreduce_async_,
    alltoall_async, barrier, broadcast_, broadcast_async, broadcast_async_, global_process_set,
    grouped_allgather_async, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter_async, is_initialized, join, poll,
    reducescatter_async, remove_process_set, sparse_allreduce_async, synchronize)

_DTYPES = DTYPES  # torch dtype -> detcoll_dtype_t (DistributedOptimizer's leaves use it)
_require_init = mpi_ops._require_init

__all__ = [
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "rank", "size",
    "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Sum", "Average", "Min", "Max", "Product", "Adasum", "HorovodInternalError",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    "join", "barrier", "poll", "synchronize",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "DistributedOptimizer", "Compression", "rng",
]

# Every rank's (local_rank, local_size), gathered at init: cross_rank and cross_size.
_layout = None


def init(comm=None, process_sets=None):
    """Initializes detcoll on MPI_COMM_WORLD (comm must be None or every rank); shutdown() runs
    at exit. process_sets: only the global set exists (None)."""
    global _layout
    if comm is not None and list(comm) != list(range(len(list(comm)))):
        raise detcoll.InvalidArgumentError(
            "detcoll.torch.init: only MPI_COMM_WORLD (comm=None) is supported")
    if process_sets not in (None, []):
        raise detcoll.InvalidArgumentError(f"detcoll.torch.init: {mpi_ops._NO_SETS}")
    _detcoll.init()
    atexit.register(shutdown)
    mpi_ops._fill_global_set()
    mine = torch.tensor([_detcoll.local_rank(), _detcoll.local_size()], dtype=torch.int64)
    every = torch.empty((_detcoll.size(), 2), dtype=torch.int64)
    _detcoll.allgather(mine.data_ptr(), every.data_ptr(), 2, DTYPES[torch.int64],
                       "detcoll.torch.init.layout")
    _layout = [tuple(row) for row in every.tolist()]


def shutdown():
    if is_initialized():
        _detcoll.finalize()


def rank():
    return _checked_world(_detcoll.rank(), "rank")


def size():
    return _checked_world(_detcoll.size(), "size")


def local_rank():
    return _checked_world(_detcoll.local_rank(), "local_rank")


def local_size():
    return _checked_world(_detcoll.local_size(), "local_size")


def cross_rank():
    """The index of this rank's node: its rank among the ranks of its local rank."""
    me = rank()
    return sum(1 for r in range(me) if _layout[r][0] == _layout[me][0])


def cross_size():
    """The number of nodes that have this rank's local rank (size // local_size when every
    node runs as many ranks)."""
    me = rank()
    return sum(1 for lr, _ in _layout if lr == _layout[me][0])


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    _checked_world(_detcoll.size(), "is_homogeneous")
    return len({ls for _, ls in _layout}) == 1


def start_timeline(file_path, mark_cycles=False):
    _checked_world(_detcoll.size(), "start_timeline")
    raise detcoll.InvalidArgumentError(
        "start_timeline: the timeline cannot be started at run time in detcoll; set "
        "DETCOLL_TIMELINE=<file> in the environment before init() to record one")


def stop_timeline():
    _checked_world(_detcoll.size(), "stop_timeline")
    raise detcoll.InvalidArgumentError(
        "stop_timeline: the timeline cannot be stopped at run time in detcoll; it records "
        "from init() to shutdown() when DETCOLL_TIMELINE=<file> is set")


def mpi_threads_supported():
    _checked_world(_detcoll.size(), "mpi_threads_supported")
    return True  # detcoll_init asks for MPI_THREAD_MULTIPLE


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


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def _checked_world(value, what):
    if value < 0:
        raise detcoll.NotInitializedError(f"detcoll.torch.{what}() called before init()")
    return value


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


try:  # the other branch's home of these four (Horovod's horovod/torch/functions.py)
    from detcoll.torch.functions import broadcast_parameters, broadcast_object, broadcast_optimizer_state, allgather_object  # noqa: E402,E501,F401,F811
except ImportError:
    pass

from detcoll.torch.optimizer import DistributedOptimizer  # noqa: E402
