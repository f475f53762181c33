"""The autograd-aware collectives of detcoll.torch, with Horovod 0.28's gradients (its
horovod/torch/mpi_ops.py autograd Functions; the formulas, not its code):

- allreduce, grouped_allreduce: the gradient is allreduced with the same op and scale factors;
- allgather, grouped_allgather: the Average allreduce of the gradient, this rank's rows of it;
- broadcast: the Average allreduce of the gradient on the root, zeros elsewhere;
- reducescatter, grouped_reducescatter: the gradient times (size for Sum) * prescale *
  postscale, allgathered;
- alltoall: the gradient sent back where it came from (alltoall with the received splits).

The backward ops are unnamed ("<op>.noname.<n>"), as Horovod's, so every rank must run the same
backward. The *_async and in-place variants (mpi_ops.py) have no autograd, as in Horovod.
"""

import torch

from detcoll import _detcoll
from detcoll.torch import mpi_ops
from detcoll.torch.compression import Compression
from detcoll.torch.mpi_ops import Average, Sum, global_process_set


def _grad(g):
    return g.contiguous()


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale, postscale, process_set):
        ctx.args = (average, op, prescale, postscale, process_set)
        return mpi_ops.allreduce_plain(tensor, average, name, op, prescale, postscale,
                                       process_set)

    @staticmethod
    def backward(ctx, grad):
        average, op, prescale, postscale, process_set = ctx.args
        return (mpi_ops.allreduce_plain(_grad(grad), average, None, op, prescale, postscale,
                                        process_set),) + (None,) * 6


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (average, op, prescale, postscale, process_set)
        return tuple(mpi_ops.grouped_allreduce_plain(list(tensors), average, name, op, prescale,
                                                     postscale, process_set))

    @staticmethod
    def backward(ctx, *grads):
        average, op, prescale, postscale, process_set = ctx.args
        reduced = mpi_ops.grouped_allreduce_plain([_grad(g) for g in grads], average, None, op,
                                                  prescale, postscale, process_set)
        return (None,) * 6 + tuple(reduced)


def _own_rows(reduced, rows, rank):
    offset = sum(rows[:rank])
    return reduced.narrow(0, offset, rows[rank])


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        outputs, rows = mpi_ops.allgather_with_rows([tensor], name, process_set)
        ctx.rows, ctx.process_set = rows[0], process_set
        return outputs[0]

    @staticmethod
    def backward(ctx, grad):
        reduced = mpi_ops.allreduce_plain(_grad(grad), op=Average, process_set=ctx.process_set)
        return (_own_rows(reduced, ctx.rows, mpi_ops._placement(ctx.process_set, "allgather").rank),
                None, None)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        outputs, rows = mpi_ops.allgather_with_rows(list(tensors), name, process_set,
                                                    call="grouped_allgather", grouped=True)
        ctx.rows, ctx.process_set = rows, process_set
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        reduced = mpi_ops.grouped_allreduce_plain([_grad(g) for g in grads], op=Average,
                                                  process_set=ctx.process_set)
        rank = mpi_ops._placement(ctx.process_set, "grouped_allgather").rank
        return (None, None) + tuple(_own_rows(r, rows, rank)
                                    for r, rows in zip(reduced, ctx.rows))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return mpi_ops.broadcast_plain(tensor, root_rank, name, process_set)

    @staticmethod
    def backward(ctx, grad):
        reduced = mpi_ops.allreduce_plain(_grad(grad), op=Average, process_set=ctx.process_set)
        if _detcoll.rank() != ctx.root_rank:
            reduced *= 0  # as Horovod: a NaN stays NaN
        return reduced, None, None, None


def _reducescatter_grad(grad, op, prescale, postscale, process_set):
    grad = _grad(grad)
    if op == Sum:
        grad = grad * mpi_ops._placement(process_set, "reducescatter").size
    if prescale != 1.0:
        grad = grad * prescale
    if postscale != 1.0:
        grad = grad * postscale
    return grad


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.args = (op, process_set, prescale, postscale)
        return mpi_ops.reducescatter_plain([tensor], name, op, process_set, prescale,
                                           postscale)[0]

    @staticmethod
    def backward(ctx, grad):
        op, process_set, prescale, postscale = ctx.args
        outputs, _ = mpi_ops.allgather_with_rows(
            [_reducescatter_grad(grad, op, prescale, postscale, process_set)], None, process_set)
        return (outputs[0],) + (None,) * 5


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.args = (op, process_set, prescale, postscale)
        return tuple(mpi_ops.reducescatter_plain(list(tensors), name, op, process_set, prescale,
                                                 postscale, call="grouped_reducescatter",
                                                 grouped=True))

    @staticmethod
    def backward(ctx, *grads):
        op, process_set, prescale, postscale = ctx.args
        outputs, _ = mpi_ops.allgather_with_rows(
            [_reducescatter_grad(g, op, prescale, postscale, process_set) for g in grads], None, process_set,
            call="grouped_allgather", grouped=True)
        return (None,) * 5 + tuple(outputs)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = mpi_ops.alltoall_plain(tensor, splits, name, process_set)
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, _received):
        output, _ = mpi_ops.alltoall_plain(_grad(grad), ctx.received,
                                           process_set=ctx.process_set)
        return output, None, None, None


# ---- the public, autograd-aware ops ----

def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over every rank, as a new tensor (Average by default).
    compression=Compression.fp16 reduces floating tensors in float16."""
    mpi_ops._require_init("allreduce")
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor,
                               process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    mpi_ops._require_init("grouped_allreduce")
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                      process_set, *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation over ranks along dimension 0 (ranks may differ in that dimension only)."""
    mpi_ops._require_init("allgather")
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    mpi_ops._require_init("grouped_allgather")
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    mpi_ops._require_init("broadcast")
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's rows of the reduction (Sum or Average) of `tensor` over every rank: dimension
    0 split as Horovod does (the first N % size ranks get one row more)."""
    mpi_ops._require_init("reducescatter")
    compressed, ctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                               postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    mpi_ops._require_init("grouped_reducescatter")
    compressed = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                       *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """splits[j] rows of `tensor` to rank j (None: an equal split). Returns the rows received,
    in rank order, and, when splits is given, the int32 row counts received from each rank."""
    mpi_ops._require_init("alltoall")
    output, received = _Alltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)
