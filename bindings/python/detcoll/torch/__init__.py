"""detcoll.torch: Horovod 0.28's PyTorch API over detcoll, for torch tensors.

    import detcoll.torch as hvd

runs horovod.torch scripts: init and the queries, allreduce (blocking, in place, asynchronous,
grouped; Sum, Average, Min, Max, Product, prescale and postscale), broadcast, allgather,
reducescatter, alltoall (with their grouped and asynchronous variants and Horovod's gradients),
barrier, join, process sets, poll and synchronize, broadcast_parameters,
broadcast_optimizer_state, allgather_object, SyncBatchNorm and DistributedOptimizer, with results
that are bit-reproducible (DETCOLL_DETERMINISM=ordered, the default) or also world-size invariant
(invariant). Tensors must be contiguous CPU tensors; reductions take float32, float64, float16,
bfloat16, int32 and int64, and the ops that move data also uint8, int8, int16 and bool. Refused:
Adasum (see mpi_ops._op), the timeline at run time (set DETCOLL_TIMELINE), CUDA tensors.
"""

import atexit

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
from detcoll.torch._patch import patch, patch_state, patched, unpatch  # noqa: F401
from detcoll.torch.mpi_ops import (  # noqa: F401  (Horovod's names)
    Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum,
    add_process_set, allgather_async, allreduce_, allreduce_async, allreduce_async_,
    alltoall_async, barrier, broadcast_, broadcast_async, broadcast_async_, global_process_set,
    grouped_allgather_async, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter_async, is_initialized, join, poll,
    reducescatter_async, remove_process_set, synchronize)

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
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "DistributedOptimizer", "SyncBatchNorm", "Compression", "rng", "sample_leaves",
    "elastic", "patch", "unpatch", "patched", "patch_state",
]

# Every rank's (local_rank, local_size), gathered at init: cross_rank and cross_size.
_layout = None


def init(comm=None, process_sets=None):
    """Initializes detcoll on MPI_COMM_WORLD (comm must be None or every rank); shutdown() runs
    at exit. process_sets: ProcessSets to add (every rank the same list), or "dynamic" (sets may
    be added later, as they always may in detcoll)."""
    global _layout
    if comm is not None and list(comm) != list(range(len(list(comm)))):
        raise detcoll.InvalidArgumentError(
            "detcoll.torch.init: only MPI_COMM_WORLD (comm=None) is supported")
    if process_sets is not None and process_sets != "dynamic":
        process_sets = list(process_sets)
        for i, ps in enumerate(process_sets):
            if not isinstance(ps, ProcessSet):
                raise detcoll.InvalidArgumentError(
                    f"detcoll.torch.init: process_sets entry number {i} is not a ProcessSet: "
                    f"{ps!r}")
            if any(ps.ranks == other.ranks for other in process_sets[:i]):
                raise detcoll.InvalidArgumentError(
                    f"detcoll.torch.init: process_sets entry number {i} is a duplicate: {ps}")
    _detcoll.init()
    atexit.register(shutdown)
    mpi_ops._fill_global_set()
    mine = torch.tensor([_detcoll.local_rank(), _detcoll.local_size()], dtype=torch.int64)
    every = torch.empty((_detcoll.size(), 2), dtype=torch.int64)
    _detcoll.allgather(mine.data_ptr(), every.data_ptr(), 2, DTYPES[torch.int64],
                       "detcoll.torch.init.layout")
    _layout = [tuple(row) for row in every.tolist()]
    if process_sets is not None and process_sets != "dynamic":
        for ps in process_sets:
            add_process_set(ps)
    from detcoll.debug import capture  # DETCOLL_DEBUG_RECORD: record the script unchanged

    capture.start_from_environment()


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
    """NCCL's version code when detcoll was built with NCCL (CUDA tensors then travel over it),
    else 0, as Horovod's."""
    return _detcoll.nccl_version()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """Whether this build takes CUDA tensors (docs/design.md, "Device tensors in the engine")."""
    return bool(_detcoll.cuda_built())


def rocm_built():
    return False


def _checked_world(value, what):
    if value < 0:
        raise detcoll.NotInitializedError(f"detcoll.torch.{what}() called before init()")
    return value


# Horovod's horovod/torch/functions.py and SyncBatchNorm.
from detcoll.torch.functions import (  # noqa: E402,F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters,
    sparse_allreduce_async)
from detcoll.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402,F401
from detcoll.torch.optimizer import DistributedOptimizer  # noqa: E402
# detcoll's own: parameter gradients as per-sample leaves, for invariant training with
# SyncBatchNorm.
from detcoll.torch.sample_leaves import sample_leaves  # noqa: E402,F401
from detcoll.torch import elastic  # noqa: E402,F401  (Horovod's hvd.elastic)
