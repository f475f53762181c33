"""Horovod's allgather, reducescatter and alltoall (mpi_ops.py's, imported there): the ops whose
second exchange depends on the first (row counts, splits), and the reduce-scatter's split of
dimension 0."""

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._handles import _Handle, _single, synchronize
from detcoll.torch._tensors import DTYPES
from detcoll.torch.mpi_ops import (
    _OP_NAMES, Average, Sum, _carrier, _checked, _enqueue, _group_names, _move_dtype, _op_name,
    _placement, _reduce_dtype, _scale, _shape, _stage, global_process_set)


def _gatherable(tensor, call):
    dtype = _move_dtype(tensor, call, "gathers")
    if tensor.dim() == 0:
        raise detcoll.InvalidArgumentError(
            f"{call}: a 0-d tensor cannot be gathered along dimension 0; reshape it to (1,)")
    return dtype


def _rejected(names, place, error, kind=_detcoll.REQUEST_ALLGATHER):
    """Requests under the names of an exchange this rank cannot make (its buffers could not be
    made after the first exchange), rejected with the reason, so that the exchange fails on
    every rank instead of the others waiting for this one (detcoll_reject_next_call)."""
    requests = []
    for name in names:
        _detcoll.reject_next_call(f"{type(error).__name__}: {error}"[:180])
        requests.append(_detcoll.enqueue(kind, 0, 0, 0, _detcoll.FLOAT32, name=name,
                                         process_set=place.id))
    return requests


def _allgather_steps(tensors, names, place):
    """Gathers each tensor along dimension 0. First every rank's row counts (stage "sizes");
    then the rows, padded to the longest rank's when ranks differ. Returns (outputs, rows) with
    rows[i] = every rank's row count of tensor i."""
    size = place.size
    carriers = [_carrier(t) for t in tensors]
    mine = [torch.tensor([t.shape[0]], dtype=torch.int64) for t in tensors]
    counts = [torch.empty(size, dtype=torch.int64) for _ in tensors]
    yield [_enqueue(_detcoll.REQUEST_ALLGATHER, m, c, 1, DTYPES[torch.int64], _stage(n, "sizes"),
                    shape=[], keep=(m, c), place=place) for m, c, n in zip(mine, counts, names)]
    rows = [c.tolist() for c in counts]
    staged = []
    try:
        for c, r in zip(carriers, rows):
            widest = max(r)
            rest = tuple(c.shape[1:])
            src = c
            if c.shape[0] != widest:
                src = torch.zeros((widest,) + rest, dtype=c.dtype, device=c.device)
                src[:c.shape[0]] = c
            staged.append((src, torch.empty((size * widest,) + rest, dtype=c.dtype,
                                            device=c.device), widest))
    except Exception as e:  # noqa: BLE001 (e.g. out of memory)
        yield _rejected(names, place, e)
    yield [_enqueue(_detcoll.REQUEST_ALLGATHER, src, dst, src.numel(), DTYPES[c.dtype], n,
                    shape=list(c.shape[1:]), keep=(src, dst), place=place)
           for (src, dst, _), c, n in zip(staged, carriers, names)]
    staged = [(dst, widest) for _, dst, widest in staged]
    outputs = []
    for (dst, widest), r, t in zip(staged, rows, tensors):
        if all(k == widest for k in r):
            out = dst
        else:
            out = torch.cat([dst[k * widest:k * widest + r[k]] for k in range(size)])
        outputs.append(out.to(t.dtype) if out.dtype != t.dtype else out)
    return tuple(outputs), rows


def _grouped_allgather_async(tensors, name, process_set, prefix, call, with_rows=False,
                             more_checks=None):
    tensors = list(tensors)
    base = _op_name(prefix, name)
    names = [base] if prefix == "allgather" else _group_names(base, len(tensors))

    place = _placement(process_set, call)

    def checks():
        if more_checks is not None:
            more_checks()
        if not tensors:
            raise detcoll.InvalidArgumentError(f"{call}: no tensors")
        for t in tensors:
            _gatherable(t, call)

    _checked(call, checks, [_stage(n, "sizes") for n in names], place)

    def steps():
        outputs, rows = yield from _allgather_steps(tensors, names, place)
        return (outputs, rows) if with_rows else outputs

    return _Handle(steps(), exchanges=2, names=names, place=place, tensors=tensors)


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _single(_grouped_allgather_async([tensor], name, process_set, "allgather",
                                            "allgather_async"))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _grouped_allgather_async(tensors, name, process_set, "grouped_allgather",
                                    "grouped_allgather_async")


def allgather_with_rows(tensors, name=None, process_set=global_process_set, call="allgather",
                        grouped=False):
    """(outputs, every rank's row counts per tensor), blocking; for autograd."""
    prefix = "grouped_allgather" if grouped else "allgather"
    return synchronize(_grouped_allgather_async(tensors, name, process_set, prefix, call,
                                                with_rows=True))


# ---- reducescatter ----

def _split_rows(n, size):
    """Horovod's split of dimension 0: the first n % size ranks get one row more."""
    return [n // size + (1 if r < n % size else 0) for r in range(size)]


def _reducescatter_async(tensors, name, op, process_set, prescale, postscale, prefix, call):
    tensors = list(tensors)
    base = _op_name(prefix, name)
    names = [base] if prefix == "reducescatter" else _group_names(base, len(tensors))

    place = _placement(process_set, call)

    def checks():
        if op not in (Sum, Average):
            raise detcoll.InvalidArgumentError(
                f"{call}: op={_OP_NAMES.get(op, op)} is not supported; reducescatter reduces "
                "with Sum or Average (as in Horovod)")
        if not tensors:
            raise detcoll.InvalidArgumentError(f"{call}: no tensors")
        for t in tensors:
            _reduce_dtype(t, call)
            if t.dim() == 0:
                raise detcoll.InvalidArgumentError(
                    f"{call}: a 0-d tensor cannot be scattered along dimension 0")

    _checked(call, checks, names, place)
    size, rank = place.size, place.rank

    def steps():
        requests, outs = [], []
        for t, n in zip(tensors, names):
            src = _scale(t, prescale)
            if not src.is_contiguous():
                src = src.contiguous()
            rows = _split_rows(t.shape[0], size)
            row = 1
            for d in t.shape[1:]:
                row *= int(d)
            integer_average = op == Average and not t.is_floating_point()
            out = torch.empty((rows[rank],) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
            requests.append(_enqueue(
                _detcoll.REQUEST_REDUCESCATTER, src, out, src.numel(), DTYPES[t.dtype], n,
                op=Sum if integer_average else op, shape=_shape(t),
                counts=[k * row for k in rows], keep=(src, out), place=place))
            outs.append((out, integer_average))
        yield requests
        results = []
        for out, integer_average in outs:
            if integer_average:
                out = _scale(out, float(postscale) / size)
            else:
                out = _scale(out, postscale)
            results.append(out)
        return tuple(results)

    return _Handle(steps(), names=names, place=place, tensors=tensors)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    return _single(_reducescatter_async([tensor], name, op, process_set, prescale_factor,
                                         postscale_factor, "reducescatter",
                                         "reducescatter_async"))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                postscale_factor, "grouped_reducescatter",
                                "grouped_reducescatter_async")


def reducescatter_plain(tensors, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0, call="reducescatter",
                        grouped=False):
    prefix = "grouped_reducescatter" if grouped else "reducescatter"
    return list(synchronize(_reducescatter_async(tensors, name, op, process_set,
                                                 prescale_factor, postscale_factor, prefix,
                                                 call)))


# ---- alltoall ----

def _alltoall_async(tensor, splits, name, process_set, call):
    full = _op_name("alltoall", name)
    size = None

    place = _placement(process_set, call)

    def checks():
        nonlocal size
        dtype = _move_dtype(tensor, call, "exchanges")
        size = place.size
        if tensor.dim() == 0:
            raise detcoll.InvalidArgumentError(f"{call}: a 0-d tensor cannot be split")
        if splits is None:
            if tensor.shape[0] % size != 0:
                raise detcoll.InvalidArgumentError(
                    f"{call}: splits not provided, but the first dimension of the tensor "
                    f"({tensor.shape[0]}) is not an even multiple of the number of workers "
                    f"({size})")
            mine = [tensor.shape[0] // size] * size
        else:
            if isinstance(splits, torch.Tensor):
                if splits.dim() != 1:
                    raise detcoll.InvalidArgumentError(f"{call}: expects a 1-D splits tensor")
                if splits.dtype != torch.int32:
                    raise detcoll.InvalidArgumentError(
                        f"{call}: expects splits to contain 32-bit integer elements")
            mine = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor)
                                     else splits)]
            if len(mine) != size:
                raise detcoll.InvalidArgumentError(
                    f"{call}: {len(mine)} entries in splits for {size} workers")
            if any(s < 0 for s in mine):
                raise detcoll.InvalidArgumentError(f"{call}: negative entry in splits {mine}")
            if sum(mine) > tensor.shape[0]:
                raise detcoll.InvalidArgumentError(
                    f"{call}: the sum of splits {mine} is greater than the first dimension of "
                    f"the tensor ({tensor.shape[0]})")
        return dtype, mine

    dtype, mine = _checked(call, checks, [_stage(full, "splits")], place)
    rank = place.rank

    def steps():
        sent = torch.tensor(mine, dtype=torch.int64)
        matrix = torch.empty((size, size), dtype=torch.int64)
        yield _enqueue(_detcoll.REQUEST_ALLGATHER, sent, matrix, size, DTYPES[torch.int64],
                       _stage(full, "splits"), shape=[size], keep=(sent, matrix), place=place)
        received = matrix[:, rank].tolist()
        rest = tuple(tensor.shape[1:])
        row = 1
        for d in rest:
            row *= int(d)
        try:
            src = _carrier(tensor[:sum(mine)])
            if not src.is_contiguous():
                src = src.contiguous()
            dst = torch.empty((sum(received),) + rest, dtype=src.dtype, device=src.device)
        except Exception as e:  # noqa: BLE001 (e.g. out of memory)
            yield _rejected([full], place, e, _detcoll.REQUEST_ALLTOALL)
        yield _enqueue(_detcoll.REQUEST_ALLTOALL, src, dst, 0, dtype, full, shape=list(rest),
                       counts=[k * row for k in mine], recvcounts=[k * row for k in received],
                       keep=(src, dst), place=place)
        out = dst.to(tensor.dtype) if dst.dtype != tensor.dtype else dst
        received_splits = torch.tensor(received, dtype=torch.int32)
        return out, received_splits

    return _Handle(steps(), exchanges=2, names=[full], place=place, tensors=[tensor])


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    return _alltoall_async(tensor, splits, name, process_set, "alltoall_async")


def alltoall_plain(tensor, splits=None, name=None, process_set=global_process_set,
                   call="alltoall"):
    """(output, received_splits), blocking."""
    return synchronize(_alltoall_async(tensor, splits, name, process_set, call))
