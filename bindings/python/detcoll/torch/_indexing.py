"""Accumulating writes through indices (detcoll.torch.ops): index_put_ with accumulate=True (and
so the backward of every advanced-indexing read, x[idx]), put_ with accumulate=True, histc, and
embedding_bag's weight gradient in every mode (max included).

Each is one detcoll index_add (or bincount) whose order is the order of the indices, row-major:
a destination receives its contributions in increasing position of the index that names it, from
the value it had (README, "Deterministic ops"). torch's CPU loops run in that order; its CUDA
kernels add with atomicAdd or sort without a stable order.
"""

import math

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch import ops
from detcoll.torch._adjoints import write_last
from detcoll.torch._tensors import DTYPES
from detcoll.torch._op_args import _floating, _indices, _placed, _same_dtype, _values


def _as_index(t, op, what):
    if not isinstance(t, torch.Tensor):
        raise detcoll.InvalidArgumentError(f"{op}: {what} is not a torch.Tensor")
    if t.is_floating_point() or t.is_complex():
        raise detcoll.InvalidArgumentError(
            f"{op}: {what} has dtype {t.dtype}; indices are integers or bool masks")
    _placed(t, op, what)
    return t


def _wrapped(index, size, op, dim):
    """Negative indices counted from the end; any outside [-size, size) refused by name."""
    if not index.numel():
        return index
    lo, hi = (int(v) for v in torch.aminmax(index))
    if lo < -size or hi >= size:
        bad = lo if lo < -size else hi
        raise detcoll.InvalidArgumentError(
            f"{op}: index {bad} is out of bounds for dimension {dim} with size {size}")
    return torch.where(index < 0, index + size, index) if lo < 0 else index


def _no_gradient_through_the_write(op, input, values, what="values"):
    """ops' indexed writes run detcoll's kernel on the data, with or without accumulate: autograd
    would see no path to the values and a wrong one through the input. Refused where a gradient
    is wanted (patch() has torch's formulas instead)."""
    wanted = [name for name, t in (("input", input), (what, values))
              if isinstance(t, torch.Tensor) and t.requires_grad]
    if wanted and torch.is_grad_enabled():
        raise detcoll.InvalidArgumentError(
            f"{op}: {' and '.join(wanted)} require grad; detcoll.torch.ops writes the data and "
            "gives no gradient (under detcoll.torch.patch(), torch's own index_put_ and put_ "
            "reach this kernel with torch's gradient formula)")


def index_put_(input, indices, values, accumulate=False):
    """input.index_put_(indices, values, accumulate) (_index_put below), refusing tensors that
    require grad."""
    _no_gradient_through_the_write("index_put_", input, values)
    return _index_put(input, indices, values, accumulate)


def _masked_fill(input, indices, values):
    """torch's index_put_ without accumulate is masked_fill_ (deterministic: one value written)
    when the indices are one bool or uint8 mask on input's device, with None for any leading
    dimensions, and values is one element on the CPU, of any dtype (converted as item() does).
    Does that and returns True there, as torch does; False elsewhere."""
    if not (isinstance(values, torch.Tensor) and values.numel() == 1 and
            values.device.type == "cpu" and isinstance(indices, (list, tuple))):
        return False
    if len(indices) > input.dim():
        return False  # torch refuses too many indices before it looks for the shortcut
    mask, covered = None, 0
    for index in indices:
        if index is None:
            covered += 1
            continue
        if not isinstance(index, torch.Tensor) or mask is not None or \
                index.dtype not in (torch.bool, torch.uint8) or index.device != input.device:
            return False
        if tuple(index.shape) != tuple(input.shape[covered:covered + index.dim()]):
            return False  # the general path names the mismatch
        mask, covered = index, covered + index.dim()
    if mask is None:
        return False
    # The mask as given: masked_fill_ makes torch's own checks of it (uint8 values of 0 and 1
    # only, no overlap with input).
    input.masked_fill_(mask.reshape(tuple(mask.shape) + (1,) * (input.dim() - covered)),
                       values.item())
    return True


def _index_put(input, indices, values, accumulate=False):
    """input.index_put_(indices, values, accumulate): indices a tuple with an entry per leading
    dimension (None: the whole dimension; an integer tensor; a bool mask, over as many dimensions
    as it has), broadcast together as torch's advanced indexing does. With accumulate, each
    value is added in the order of the broadcast indices (row-major); without, where indices
    repeat, the last value in that order is written."""
    op = "index_put_"
    self = _values(input, op, "input")
    if not accumulate and _masked_fill(input, indices, values):
        return input
    if not isinstance(indices, (list, tuple)):
        raise detcoll.InvalidArgumentError(f"{op}: indices must be a tuple of tensors or None")
    # Bool masks become one integer index per dimension they cover.
    expanded = []
    for position, index in enumerate(indices):
        if index is None:
            expanded.append(None)
            continue
        index = _as_index(index, op, f"indices[{position}]")
        if index.dtype in (torch.bool, torch.uint8):
            start = len(expanded)
            if tuple(index.shape) != tuple(input.shape[start:start + index.dim()]):
                raise detcoll.InvalidArgumentError(
                    f"{op}: the mask indices[{position}] of shape {tuple(index.shape)} does not "
                    f"match the input's dimensions {tuple(input.shape[start:start + index.dim()])}"
                    f" from {start}")
            expanded.extend(index.nonzero().unbind(1))
        else:
            expanded.append(index.long())
    if len(expanded) > input.dim():
        raise detcoll.InvalidArgumentError(
            f"{op}: {len(expanded)} indices for a tensor of {input.dim()} dimensions")
    named = [d for d, index in enumerate(expanded) if index is not None]
    if not named:
        raise detcoll.InvalidArgumentError(f"{op}: no index tensor given")
    try:
        broadcast = torch.broadcast_shapes(*[tuple(expanded[d].shape) for d in named])
    except RuntimeError:
        raise detcoll.InvalidArgumentError(
            f"{op}: the indices' shapes {[tuple(expanded[d].shape) for d in named]} do not "
            "broadcast together") from None
    rest = [d for d in range(input.dim()) if d not in named]
    adjacent = named == list(range(named[0], named[-1] + 1))
    # The shape of input[indices]: the broadcast indices where the indexed dimensions were, when
    # they are adjacent, and in front otherwise.
    if adjacent:
        front = [input.shape[d] for d in rest if d < named[0]]
        back = [input.shape[d] for d in rest if d > named[-1]]
        result = front + list(broadcast) + back
    else:
        front, result = [], list(broadcast) + [input.shape[d] for d in rest]
    if isinstance(values, torch.Tensor) and values.dim() == 0:
        values = values.to(input.device)   # torch moves a 0-d value to self's device
    values = _values(values, op, "values")
    _same_dtype(op, self, values, "values")
    try:
        values = values.expand(result)
    except RuntimeError:
        raise detcoll.InvalidArgumentError(
            f"{op}: values of shape {tuple(values.shape)} do not broadcast to the indexed "
            f"shape {tuple(result)}") from None
    # The indexed dimensions first (one linear position), the others after in their order.
    linear = None
    for d in named:
        index = _wrapped(expanded[d].to(input.device), input.shape[d], op, d)
        linear = index if linear is None else linear * input.shape[d] + index
    linear = linear.expand(broadcast).reshape(-1)
    k = len(broadcast)
    if adjacent:
        order = list(range(len(front), len(front) + k)) + list(range(len(front))) + \
            list(range(len(front) + k, len(result)))
        values = values.permute(order)
    values = values.reshape([linear.numel()] + [input.shape[d] for d in rest]).contiguous()
    if input.numel() == 0 or linear.numel() == 0:
        return input                     # nothing is written (the indices were checked)
    # A copy, never a view of input (a permuted contiguous input would alias it).
    work = input.permute(named + rest).clone(memory_format=torch.contiguous_format)
    work = work.reshape([math.prod(input.shape[d] for d in named)] + list(work.shape[len(named):]))
    if accumulate:
        ops.index_add_(work, 0, linear, values)
    else:
        # Among repeated positions the last in the indices' order is written.
        work = write_last(work, linear, values)
    back_shape = [input.shape[d] for d in named + rest]
    input.permute(named + rest).copy_(work.reshape(back_shape))
    return input


def index_put(input, indices, values, accumulate=False):
    """torch.index_put (out of place)."""
    _no_gradient_through_the_write("index_put", input, values)
    return _index_put(_values(input, "index_put", "input").clone(), indices, values, accumulate)


def put_(input, index, source, accumulate=False):
    """input.put_(index, source, accumulate) (_put below), refusing tensors that require grad."""
    _no_gradient_through_the_write("put_", input, source, "source")
    return _put(input, index, source, accumulate)


def _put(input, index, source, accumulate=False):
    """input.put_(index, source, accumulate): input read as 1-D in row-major order; with
    accumulate, source's values added in index order, otherwise the last written where indices
    repeat."""
    op = "put_"
    _values(input, op, "input")
    index = _as_index(index, op, "index")
    if index.dtype != torch.int64:  # torch's put_ takes long indices only (uint8 is no mask here)
        raise detcoll.InvalidArgumentError(f"{op}: index has dtype {index.dtype}; int64 only")
    source = _values(source, op, "source")
    _same_dtype(op, input, source, "source")
    if index.numel() != source.numel():
        raise detcoll.InvalidArgumentError(
            f"{op}: index has {index.numel()} elements and source {source.numel()}")
    flat = input.reshape(-1).clone() if input.dim() else input.reshape(1).clone()
    _index_put(flat, (index.reshape(-1),), source.reshape(-1), accumulate)
    input.copy_(flat.reshape(input.shape))
    return input


def histc(input, bins=100, min=0, max=0):  # noqa: A002 (torch's argument names)
    """torch.histc: bins equal bins over [min, max] (both 0: the input's own range; equal: one
    wider on each side). A value x counts in bin floor((x − min) · bins / (max − min)), evaluated
    in that order in the input's dtype (torch 2's CPU and CUDA formula; torch 1.13's CPU kernel
    divides before it multiplies, which moves values that lie on an edge), the maximum in the
    last bin; values outside the range and NaN are not counted. float16 and bfloat16 are
    evaluated in float32 (exact conversions), and every value of a call in float64 where some
    value's (x − min) · bins would overflow the dtype (with x and the range scaled by 2^-64 first
    where it would overflow float64 too). The counts are exact (a bincount), returned in the
    input's dtype."""
    op = "histc"
    x = _floating(input, op, "input").reshape(-1)
    if isinstance(bins, bool) or not isinstance(bins, int) and not (
            isinstance(bins, torch.Tensor) and bins.dim() == 0 and not bins.is_floating_point()):
        raise detcoll.InvalidArgumentError(f"{op}: bins must be an integer, got {bins!r}")
    bins = int(bins)
    if bins <= 0:
        raise detcoll.InvalidArgumentError(f"{op}: bins must be > 0, got {bins}")
    try:
        lo, hi = float(min), float(max)
    except (TypeError, ValueError):
        raise detcoll.InvalidArgumentError(
            f"{op}: min {min!r} and max {max!r} must be numbers") from None
    # detcoll_histc (kernels/ops/writes.h): the range, the bins, the exact counts.
    out = torch.empty(bins, dtype=x.dtype, device=x.device)
    _detcoll.histc(out.data_ptr(), bins, lo, hi, x.data_ptr(), x.numel(),  # contiguous
                   DTYPES[x.dtype])
    return out


def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode, per_sample_weights=None,
                                 padding_idx=-1):
    """aten's _embedding_bag_dense_backward: the weight's gradient [num_weights, dim] for mode
    0 (sum), 1 (mean) and 2 (max). Sum and mean run detcoll's embedding_bag backward; max adds
    each bag's gradient into the rows its maximum_indices name, in the order of the bags."""
    op = "embedding_bag_backward"
    g = _floating(grad, op, "grad")
    mode = int(mode)
    if mode not in (0, 1, 2):
        raise detcoll.InvalidArgumentError(f"{op}: mode {mode}; 0 (sum), 1 (mean) or 2 (max)")
    if scale_grad_by_freq:
        raise detcoll.InvalidArgumentError(f"{op}: scale_grad_by_freq is not supported")
    if g.dim() != 2:
        raise detcoll.InvalidArgumentError(f"{op}: grad {tuple(g.shape)} must be [bags, dim]")
    bags, dim = g.shape
    num_weights = int(num_weights)
    if mode != 2:
        indices = _indices(indices, op, "indices")
        offset2bag = _indices(offset2bag, op, "offset2bag")
        if offset2bag.numel() != indices.numel():
            raise detcoll.InvalidArgumentError(
                f"{op}: offset2bag has {offset2bag.numel()} elements for {indices.numel()} "
                "indices")
        if offset2bag.numel() and (
                int(offset2bag.min()) < 0 or int(offset2bag.max()) >= bags or
                bool((offset2bag[1:] < offset2bag[:-1]).any())):
            raise detcoll.InvalidArgumentError(
                f"{op}: offset2bag must be non-decreasing bags in [0, {bags})")
        # Bag b's indices start at the first position whose bag is b or later.
        offsets = torch.searchsorted(offset2bag.contiguous(),
                                     torch.arange(bags, device=g.device))
        return ops.embedding_bag_backward(g, indices, offsets, num_weights,
                                          "mean" if mode == 1 else "sum", per_sample_weights,
                                          int(padding_idx))
    maximum_indices = _indices(maximum_indices, op, "maximum_indices")
    if tuple(maximum_indices.shape) != (bags, dim):
        raise detcoll.InvalidArgumentError(
            f"{op}: maximum_indices {tuple(maximum_indices.shape)} must be {(bags, dim)}")
    bag_size = _indices(bag_size, op, "bag_size")
    if bag_size.numel() != bags:
        raise detcoll.InvalidArgumentError(
            f"{op}: bag_size has {bag_size.numel()} elements for {bags} bags")
    # detcoll_embedding_bag_max_backward (kernels/ops/writes.h).
    out = torch.empty(num_weights, dim, dtype=g.dtype, device=g.device)
    _detcoll.embedding_bag_max_backward(
        out.data_ptr(), num_weights, DTYPES[g.dtype], g.data_ptr(), bags, dim,
        maximum_indices.data_ptr(), bag_size.data_ptr(),   # contiguous (_floating, _indices)
        int(padding_idx))
    return out
