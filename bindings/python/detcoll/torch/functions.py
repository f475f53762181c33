"""Horovod's functions.py over detcoll: model and optimizer state from one rank, objects from
every rank, and the allreduce of a sparse tensor.

    broadcast_parameters(params, root_rank)          tensors of a state_dict / named list, in place
    broadcast_object(obj, root_rank=0, name=None)    a picklable object from root_rank
    allgather_object(obj, name=None)                 every rank's object, a list indexed by rank
    broadcast_optimizer_state(optimizer, root_rank)  hyper-parameters and per-parameter state
    sparse_allreduce_async(tensor, name, op)         a callable that returns the reduced tensor

The collectives come from detcoll.torch, imported when a function runs (detcoll.torch imports
this module).
"""

import collections.abc
import pickle

import torch

import detcoll


def _hvd():
    import detcoll.torch as hvd
    return hvd


def _require_init(call):
    hvd = _hvd()
    if not hvd.is_initialized():
        raise detcoll.NotInitializedError(
            f"detcoll.torch.{call}() called before detcoll.torch.init()")
    return hvd


def _as_words(data):
    """bytes as an int32 tensor (zero padded to whole words): every collective moves int32."""
    words = torch.zeros((len(data) + 3) // 4, dtype=torch.int32)
    if data:
        words.view(torch.uint8)[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return words


def _bytes_of(words, length):
    return words.contiguous().view(torch.uint8)[:length].numpy().tobytes()


# ---- model state ----

def broadcast_parameters(params, root_rank):
    """Broadcasts tensors from root_rank in place: a dict (a state_dict, sent in sorted key order)
    or a list of (name, tensor) pairs or bare tensors (named automatically, so every rank must
    give the same sequence). Parameters and tensors of any dtype and memory layout."""
    hvd = _require_init("broadcast_parameters")
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or (isinstance(params, collections.abc.Iterator)
                                               and not isinstance(params, torch.Tensor)):
        # Lists as Horovod takes them; iterators too, such as model.named_parameters().
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise detcoll.InvalidArgumentError(f"invalid params of type: {type(params)}")
    handles = []
    for name, p in items:
        tensor = p.data if isinstance(p, torch.nn.Parameter) else p
        # A tensor in another memory layout (channels_last) travels as a contiguous copy.
        staged = (tensor.contiguous() if isinstance(tensor, torch.Tensor) and
                  not tensor.is_contiguous() else tensor)
        handles.append((tensor, staged, hvd.broadcast_async_(
            staged, root_rank, name=None if name is None else str(name))))
    for tensor, staged, h in handles:
        hvd.synchronize(h)
        if staged is not tensor:
            tensor.copy_(staged)


# ---- objects ----

def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's picklable object on every rank (root too gets it back through pickle). If root
    cannot pickle it, every rank raises InvalidArgumentError saying why. name defaults to
    "object" on every rank (Horovod's default, the object's type name, differs between a root
    that sends a dict and ranks that pass None)."""
    hvd = _require_init("broadcast_object")
    if process_set is None:
        process_set = hvd.global_process_set
    name = name or "object"
    header = torch.zeros(2, dtype=torch.int64)  # (byte count, 1 if the bytes are an error)
    data = b""
    if hvd.rank() == root_rank:
        try:
            data = pickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 (any pickling failure is reported everywhere)
            data = f"{type(e).__name__}: {e}".encode()
            header[1] = 1
        header[0] = len(data)
    hvd.broadcast_(header, root_rank, name=name + ".sz", process_set=process_set)
    words = _as_words(data) if hvd.rank() == root_rank else torch.zeros(
        (int(header[0]) + 3) // 4, dtype=torch.int32)
    hvd.broadcast_(words, root_rank, name=name + ".t", process_set=process_set)
    received = _bytes_of(words, int(header[0]))
    if header[1]:
        raise detcoll.InvalidArgumentError(
            f"broadcast_object: rank {root_rank} could not pickle the object: "
            f"{received.decode(errors='replace')}")
    return pickle.loads(received)


def allgather_object(obj, name=None, process_set=None):
    """Every rank's picklable object, as a list of size() objects indexed by rank (this rank's
    own entry is its object round-tripped through pickle), or of the process set's members in
    their order. Objects may differ in size. If a rank cannot pickle its object, every rank
    raises InvalidArgumentError naming that rank."""
    hvd = _require_init("allgather_object")
    if process_set is None:
        process_set = hvd.global_process_set
    name = name or type(obj).__name__
    try:
        data, failed = pickle.dumps(obj), 0
    except Exception as e:  # noqa: BLE001
        data, failed = f"{type(e).__name__}: {e}".encode(), 1
    header = torch.tensor([[len(data), failed]], dtype=torch.int64)
    headers = hvd.allgather(header, name=name + ".sz", process_set=process_set)
    words = hvd.allgather(_as_words(data), name=name + ".t", process_set=process_set)
    out, errors, at = [], [], 0
    for r in range(process_set.size()):
        length, bad = (int(v) for v in headers[r])
        count = (length + 3) // 4
        raw = _bytes_of(words[at:at + count], length)
        at += count
        if bad:
            errors.append(f"rank {process_set.ranks[r]}: {raw.decode(errors='replace')}")
        elif not errors:
            out.append(pickle.loads(raw))
    if errors:
        raise detcoll.InvalidArgumentError(
            "allgather_object: an object could not be pickled: " + "; ".join(errors))
    return out


# ---- optimizer state ----

def _initialize_state(optimizer):
    """Horovod's initialization of an optimizer with no state yet: zero gradients for the
    parameters that require one and have none, then one step of the torch optimizer (the one
    DistributedOptimizer wraps, so nothing is reduced). Unlike Horovod, the parameters keep the
    values they had: the step only creates the state (weight decay would otherwise move them)."""
    from detcoll.torch import optimizer as distributed

    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved = [p.detach().clone() for p in params]
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
            if isinstance(optimizer, torch.optim.SparseAdam):
                p.grad = p.grad.to_sparse()
    with torch.no_grad():
        if type(optimizer).__module__ == distributed.__name__:
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
        for p, value in zip(params, saved):
            p.copy_(value)


def _describe_state(optimizer):
    """The root's state as every rank needs it: per parameter (group, index), its entries in
    order, a tensor as (shape, dtype, whether it lives with its parameter rather than on the
    CPU) and any other value as itself."""
    described = {}
    for g, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            if p in optimizer.state:
                described[(g, j)] = [
                    (key, ("tensor", tuple(v.shape), v.dtype, v.device.type != "cpu")
                     if torch.is_tensor(v) else ("value", v))
                    for key, v in optimizer.state[p].items()]
    return described


def broadcast_optimizer_state(optimizer, root_rank):
    """Makes every rank's optimizer state root_rank's, as Horovod does: an optimizer without
    state is first given one by a step on zero gradients (for parameters with no gradient yet);
    then every param_group option (lr, momentum, betas, ...; all keys but 'params') and every
    per-parameter state entry is root_rank's. Tensors are broadcast in place (a rank whose
    entry is missing or of another shape gets a new tensor), other values as objects, and
    entries root lacks are removed. A stateless optimizer broadcasts nothing. torch.optim.LBFGS
    is refused (InvalidArgumentError, a ValueError), as in Horovod."""
    hvd = _require_init("broadcast_optimizer_state")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise detcoll.InvalidArgumentError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        _initialize_state(optimizer)
        if len(optimizer.state_dict()["state"]) == 0:
            return  # stateless: nothing to broadcast, not even the options
    layout = [len(group["params"]) for group in optimizer.param_groups]
    root = broadcast_object({
        "layout": layout,
        "options": [{k: v for k, v in group.items() if k != "params"}
                    for group in optimizer.param_groups],
        "state": _describe_state(optimizer),
    }, root_rank, name="optimizer_state")
    # Every rank learns whether any rank's parameters differ from root's, so none waits.
    differs = torch.tensor([0 if root["layout"] == layout else 1], dtype=torch.int32)
    if int(hvd.allreduce(differs, op=hvd.Max, name="optimizer_state.layout")[0]):
        raise detcoll.InvalidArgumentError(
            f"broadcast_optimizer_state: the optimizers' parameter groups differ between ranks "
            f"(root rank {root_rank}: {root['layout']} parameters per group; this rank: {layout})")
    for group, options in zip(optimizer.param_groups, root["options"]):
        for key in [k for k in group if k != "params" and k not in options]:
            del group[key]
        group.update(options)
    tensors, occurrences = [], collections.defaultdict(int)
    for g, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            entries = root["state"].get((g, j))
            if entries is None:
                optimizer.state.pop(p, None)
                continue
            state = optimizer.state[p]
            for key in [k for k in state if k not in dict(entries)]:
                del state[key]
            for key, (kind, *what) in entries:
                if kind == "value":
                    state[key] = what[0]
                    continue
                shape, dtype, with_param = what
                mine = state.get(key)
                if not (torch.is_tensor(mine) and tuple(mine.shape) == shape and
                        mine.dtype == dtype):
                    # Where root keeps it: with the parameter, or on the CPU (Adam's step).
                    device = p.device if with_param else torch.device("cpu")
                    mine = state[key] = torch.zeros(shape, dtype=dtype, device=device)
                occurrences[key] += 1
                tensors.append((f"optimizer_state.{key}.{occurrences[key]}", mine))
    broadcast_parameters(tensors, root_rank)


# ---- sparse allreduce ----

def _linear(indices, shape):
    """Row-major linear positions of COO indices [sparse_dim, nnz] in the sparse dimensions."""
    linear = torch.zeros(indices.shape[1], dtype=torch.int64)
    for d in range(indices.shape[0]):
        linear = linear * shape[d] + indices[d]
    return linear


def _unravel(linear, shape, sparse_dim):
    """COO indices [sparse_dim, n] of row-major linear positions (the inverse of _linear)."""
    indices = torch.empty((sparse_dim, linear.numel()), dtype=torch.int64)
    for d in reversed(range(sparse_dim)):
        indices[d] = linear % shape[d]
        linear = linear // shape[d]
    return indices


def _local_sum(tensor):
    """(indices [sparse_dim, n] with each index once, sorted; values) with the values of an
    index summed in the order they appear (as to_dense() sums them; torch's coalesce() may sum
    them in another order)."""
    indices, values = tensor._indices(), tensor._values()
    unique, inverse = torch.unique(_linear(indices, tensor.shape), sorted=True,
                                   return_inverse=True)
    summed = torch.zeros((unique.numel(),) + tuple(values.shape[1:]), dtype=values.dtype)
    summed.index_add_(0, inverse, values)  # sequential in the order of the entries
    return _unravel(unique, tensor.shape, tensor.sparse_dim()), summed


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """The allreduce of a sparse COO tensor through allgathers of its indices (transposed, as
    allgather concatenates along dimension 0) and values, as Horovod does. Returns a callable
    (not a handle for synchronize) that returns the reduced tensor, coalesced.

    Deterministic: each rank first sums its own duplicate indices in the order they appear, as
    to_dense() does; the value of an index is then the sum of the ranks' values in rank order
    (0 + v_0 + v_1 + ..., ranks without the index left out), which is what the allreduce of the
    dense tensors (to_dense()) gives in ordered mode. Average divides that sum by size(); any
    other op sums."""
    hvd = _require_init("sparse_allreduce_async")
    from detcoll.torch._exchanges import _grouped_allgather_async

    def sparse():
        if not tensor.is_sparse:
            raise detcoll.InvalidArgumentError(
                f"sparse_allreduce_async: expected a sparse COO tensor, got layout "
                f"{tensor.layout}")
        if tensor.device.type != "cpu":
            raise detcoll.InvalidArgumentError(
                f"sparse_allreduce_async: the sparse tensor is on {tensor.device}; sparse "
                "reductions run on CPU tensors (use sparse_as_dense=True for CUDA gradients)")

    name = str(name)
    if tensor.is_sparse and tensor.device.type == "cpu":
        indices, values = _local_sum(tensor)
    else:  # refused on every rank by the allgather's checks (sparse())
        indices, values = torch.zeros((1, 0), dtype=torch.int64), torch.zeros(0)
    rest = tuple(values.shape[1:])
    if process_set is None:
        process_set = hvd.global_process_set
    # One grouped allgather of every rank's indices (one row per index) and values: ranks differ
    # in their count of indices, which the allgather's first exchange tells every rank. Nothing
    # here waits for another rank (the progress thread of _handles.py enqueues the second
    # exchange).
    gathered = _grouped_allgather_async([indices.t().contiguous(), values], name, process_set,
                                        "sparse_allreduce", "sparse_allreduce_async",
                                        with_rows=True, more_checks=sparse)

    size = process_set.size()  # a member of it: the allgather checked

    def handle():
        (every_index, every_value), rows = hvd.synchronize(gathered)
        counts = rows[0]
        starts = [sum(counts[:r]) for r in range(size)]
        ranks = [(every_index[starts[r]:starts[r] + counts[r]],
                  every_value[starts[r]:starts[r] + counts[r]]) for r in range(size)]
        all_indices = torch.cat([i for i, _ in ranks]).t()
        unique, inverse = torch.unique(_linear(all_indices, tensor.shape), sorted=True,
                                       return_inverse=True)
        out_indices = _unravel(unique, tensor.shape, tensor.sparse_dim())
        out_values = torch.zeros((unique.numel(),) + rest, dtype=values.dtype)
        at = 0
        for r in range(size):  # rank order; a rank's indices are distinct (summed locally)
            out_values.index_add_(0, inverse[at:at + counts[r]], ranks[r][1])
            at += counts[r]
        if op == hvd.Average:
            out_values = out_values / size
        return torch.sparse_coo_tensor(out_indices, out_values, tensor.shape).coalesce()

    return handle
