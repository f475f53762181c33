"""The backward of the window and resampling ops whose CUDA kernels add with atomicAdd
(detcoll.torch.ops): reflection and replication padding, average, adaptive average and max
pooling (1-D to 3-D, through their indices), max_unpool, and linear, bicubic and trilinear
interpolation.

Each forward output position reads a fixed list of input positions ("taps") of its plane, with a
weight. The backward adds, in the order of the output positions (row-major) and, within one, in
the order of torch's CPU loop, each tap's gradient times its weight into the input position it
read, from zero (README, "Deterministic ops"): weighted_scatter. Padding, pooling and linear and
bicubic upsampling run detcoll's C entries, which compute their taps on the host
(kernels/ops/taps.h, cubic.h); max_unpool writes through detcoll_max_unpool (writes.h). Where torch's CPU loop
is sequential and unfused the float32 and float64 bits are its; the CPU and the GPU give the same.
"""

import math

import torch

import detcoll
from detcoll.torch import _gathers
from detcoll import _detcoll
from detcoll.torch._op_args import _floating, _indices, _values
from detcoll.torch._tensors import DTYPES


def _sizes(values, count, op, what):
    values = [int(v) for v in values]
    if len(values) != count:
        raise detcoll.InvalidArgumentError(f"{op}: {what} {values} needs {count} values")
    return values


def _spatial(input_size, op, dims=(1, 2, 3)):
    """[N, C, *spatial] (or [C, *spatial]) and the number of spatial dimensions."""
    input_size = [int(s) for s in input_size]
    for spatial in dims:
        if len(input_size) in (spatial + 1, spatial + 2):
            return input_size, spatial
    raise detcoll.InvalidArgumentError(
        f"{op}: input size {input_size} has no batch, channel and 1-3 spatial dimensions")


def weighted_scatter(values, destination, out_inner, rows=None, weights=None):
    """detcoll_weighted_scatter: out [planes, out_inner] with out[p][destination[s]] += weights[s]
    · values[p][rows[s]] over the sources s in increasing order, from zero (rows None: s;
    weights None: 1). values [planes, values_inner], floating point; weights in the accumulation
    type (float32 for float32, float16 and bfloat16, float64 for float64)."""
    op = "weighted_scatter"
    v = _floating(values, op, "values")
    if v.dim() != 2:
        raise detcoll.InvalidArgumentError(f"{op}: values must be [planes, inner], got "
                                           f"{tuple(v.shape)}")
    destination = _indices(destination, op, "destination").reshape(-1)
    n = destination.numel()
    if rows is not None:
        rows = _indices(rows, op, "rows").reshape(-1)
        if rows.numel() != n:
            raise detcoll.InvalidArgumentError(f"{op}: {rows.numel()} rows for {n} sources")
    if weights is not None:
        accumulation = torch.float64 if v.dtype == torch.float64 else torch.float32
        weights = _floating(weights, op, "weights").reshape(-1)
        if weights.dtype != accumulation or weights.numel() != n:
            raise detcoll.InvalidArgumentError(
                f"{op}: weights must be {n} values of {accumulation}, got {weights.numel()} of "
                f"{weights.dtype}")
    if int(out_inner) < 0:
        raise detcoll.InvalidArgumentError(f"{op}: out_inner is {out_inner}")
    out = torch.empty(v.shape[0], int(out_inner), dtype=v.dtype, device=v.device)
    _detcoll.weighted_scatter(out.data_ptr(), v.shape[0], int(out_inner), DTYPES[v.dtype],
                              destination.data_ptr(), n, v.data_ptr(), v.shape[1],
                              0 if rows is None else rows.data_ptr(),
                              0 if weights is None else weights.data_ptr())
    return out


def _grad(grad_output, input_size, spatial, out_sizes, op):
    g = _floating(grad_output, op, "grad_output")
    expected = list(input_size[:-spatial]) + list(out_sizes)
    if list(g.shape) != expected:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {list(g.shape)} is not {expected}")
    return g


# ---- reflection and replication padding ----

def _pad_backward(grad_output, input_size, padding, mode):
    op = f"{mode}_pad_backward"
    padding = [int(p) for p in padding]
    spatial = len(padding) // 2
    input_size = [int(s) for s in input_size]
    if len(padding) not in (2, 4, 6) or len(input_size) not in (spatial + 1, spatial + 2):
        raise detcoll.InvalidArgumentError(
            f"{op}: padding {padding} needs 2 values per spatial dimension of input size "
            f"{input_size} (1 to 3, after the batch and channel dimensions)")
    sizes = input_size[-spatial:]
    # torch's padding lists the last dimension first: (left, right, top, bottom, front, back).
    pads = [(padding[2 * (spatial - 1 - a)], padding[2 * (spatial - 1 - a) + 1])
            for a in range(spatial)]
    outs = [s + lo + hi for s, (lo, hi) in zip(sizes, pads)]
    for s, (lo, hi), o in zip(sizes, pads, outs):
        if s < 1 or o < 1 or (mode == "reflection" and (lo >= s or hi >= s)):
            raise detcoll.InvalidArgumentError(
                f"{op}: padding {padding} does not fit input size {input_size}")
    g = _grad(grad_output, input_size, spatial, outs, op)
    out = torch.zeros(input_size, dtype=g.dtype, device=g.device)
    if g.numel():
        # detcoll_pad_backward: the taps (kernels/ops/taps.h), then weighted_scatter.
        _detcoll.pad_backward(out.data_ptr(), g.data_ptr(), DTYPES[g.dtype],
                              math.prod(input_size[:-spatial]), sizes, padding,
                              mode == "reflection")
    return out


def reflection_pad_backward(grad_output, input_size, padding):
    """aten's reflection_pad{1,2,3}d_backward: the gradient of F.pad(mode="reflect") for an
    input of input_size ([N, C, *spatial] or [C, *spatial]) and torch's padding list."""
    return _pad_backward(grad_output, input_size, padding, "reflection")


def replication_pad_backward(grad_output, input_size, padding):
    """aten's replication_pad{1,2,3}d_backward: the gradient of F.pad(mode="replicate")."""
    return _pad_backward(grad_output, input_size, padding, "replication")


# ---- average pooling ----

def _pooled_size(size, kernel, stride, pad, ceil_mode):
    """torch's pooling_output_shape (dilation 1)."""
    out = (size + 2 * pad - kernel + ((stride - 1) if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def avg_pool_backward(grad_output, input_size, kernel_size, stride, padding, ceil_mode=False,
                      count_include_pad=True, divisor_override=None):
    """aten's avg_pool{2,3}d_backward (avg_pool1d runs as 2-D): each output's gradient divided by
    its divisor, added into its window's input positions (padding left out)."""
    op = "avg_pool_backward"
    input_size = [int(s) for s in input_size]
    spatial = len(input_size) - 2 if isinstance(kernel_size, int) else len(kernel_size)
    if spatial not in (2, 3) or len(input_size) not in (spatial + 1, spatial + 2):
        raise detcoll.InvalidArgumentError(
            f"{op}: kernel_size {kernel_size} and input size {input_size}: 2 or 3 spatial "
            "dimensions after the batch and channel dimensions")
    if isinstance(kernel_size, int):
        kernel_size = [kernel_size] * spatial
    stride = [stride] * spatial if isinstance(stride, int) else stride
    padding = [padding] * spatial if isinstance(padding, int) else padding
    kernel = _sizes(kernel_size, spatial, op, "kernel_size")
    stride = _sizes(stride, spatial, op, "stride") if len(stride) else kernel
    pads = _sizes(padding, spatial, op, "padding")
    sizes = input_size[-spatial:]
    for k, s, p in zip(kernel, stride, pads):
        if k < 1 or s < 1 or p < 0 or 2 * p > k:
            raise detcoll.InvalidArgumentError(
                f"{op}: kernel_size {kernel}, stride {stride} and padding {pads} are not a "
                "pooling window")
    if divisor_override is not None and int(divisor_override) == 0:
        raise detcoll.InvalidArgumentError(f"{op}: divisor_override is 0")
    outs = [_pooled_size(n, k, s, p, ceil_mode) for n, k, s, p in zip(sizes, kernel, stride, pads)]
    if min(outs) < 1:
        raise detcoll.InvalidArgumentError(
            f"{op}: kernel_size {kernel} with padding {pads} is larger than the input "
            f"{sizes}: the output would be {outs}")
    g = _grad(grad_output, input_size, spatial, outs, op)
    out = torch.zeros(input_size, dtype=g.dtype, device=g.device)
    if g.numel():
        # detcoll_avg_pool_backward: the taps and divisors (kernels/ops/taps.h), the divisions,
        # then weighted_scatter.
        _detcoll.avg_pool_backward(out.data_ptr(), g.data_ptr(), DTYPES[g.dtype],
                                   math.prod(input_size[:-spatial]), sizes, kernel, stride, pads,
                                   bool(ceil_mode), bool(count_include_pad),
                                   int(divisor_override or 0))
    return out


def adaptive_avg_pool_backward(grad_output, input_size, spatial=None):
    """aten's _adaptive_avg_pool{2,3}d_backward: output position o of an axis of n inputs and m
    outputs averages inputs floor(o n / m) to ceil((o + 1) n / m); its gradient divided by each
    axis' window length in turn (as torch's CPU loop does) goes to every input of the window."""
    op = "adaptive_avg_pool_backward"
    g0 = _floating(grad_output, op, "grad_output")
    input_size, spatial = _spatial(input_size, op, (spatial,) if spatial else (2, 3))
    outs = list(g0.shape[-spatial:])
    g = _grad(g0, input_size, spatial, outs, op)
    out = torch.zeros(input_size, dtype=g.dtype, device=g.device)
    if g.numel():
        # detcoll_adaptive_avg_pool_backward (kernels/ops/taps.h).
        _detcoll.adaptive_avg_pool_backward(out.data_ptr(), g.data_ptr(), DTYPES[g.dtype],
                                            math.prod(input_size[:-spatial]),
                                            input_size[-spatial:], outs)
    return out


# ---- pooling through its indices (max pooling 3-D, adaptive max pooling), max_unpool ----

def max_pool_backward(grad_output, input_size, indices, spatial=None):
    """The backward of max pooling given its indices (aten's max_pool3d_with_indices_backward,
    adaptive_max_pool{2,3}d_backward): each output's gradient added into the input position its
    index names, within its plane, in the order of the output positions. spatial: the pooling's
    dimensions (None: the fewest that fit input_size; give it for unbatched inputs)."""
    op = "max_pool_backward"
    input_size, spatial = _spatial(input_size, op, (spatial,) if spatial else (1, 2, 3))
    g = _floating(grad_output, op, "grad_output")
    indices = _indices(indices, op, "indices")
    if tuple(indices.shape) != tuple(g.shape) or g.dim() != len(input_size) or \
            list(g.shape[:-spatial]) != input_size[:-spatial]:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad_output {tuple(g.shape)} and indices {tuple(indices.shape)} must have "
            f"the same shape, with the planes of input size {input_size}")
    inner = math.prod(input_size[-spatial:])
    planes = math.prod(input_size[:-spatial])
    if g.numel() == 0 or inner == 0:
        return torch.zeros(input_size, dtype=g.dtype, device=g.device)
    flat = indices.reshape(planes, -1)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= inner):
        raise detcoll.InvalidArgumentError(
            f"{op}: an index is outside the {inner} positions of a plane")
    # detcoll_max_pool_backward (kernels/ops/taps.h): plane p's index i adds into p · inner + i.
    out = torch.empty(input_size, dtype=g.dtype, device=g.device)
    _detcoll.max_pool_backward(out.data_ptr(), g.data_ptr(), flat.data_ptr(),  # contiguous
                               DTYPES[g.dtype], planes, inner, flat.shape[1])
    return out


def max_unpool(input, indices, output_size):
    """aten's max_unpool{2,3}d: each input value written at the position of its plane its index
    names; where indices repeat, the last in the input's order is written (as torch's CPU loop
    leaves it). The positions no index names are 0."""
    op = "max_unpool"
    x = _values(input, op, "input")
    indices = _indices(indices, op, "indices")
    output_size = [int(s) for s in output_size]
    spatial = len(output_size)
    if not 2 <= spatial <= 3 or x.dim() not in (spatial + 1, spatial + 2):
        raise detcoll.InvalidArgumentError(
            f"{op}: input {tuple(x.shape)} and output_size {output_size} do not match")
    if tuple(indices.shape) != tuple(x.shape):
        raise detcoll.InvalidArgumentError(
            f"{op}: indices {tuple(indices.shape)} and input {tuple(x.shape)} differ")
    lead = list(x.shape[:-spatial])
    planes, inner = math.prod(lead), math.prod(output_size)
    out = torch.empty(lead + output_size, dtype=x.dtype, device=x.device)
    if x.numel() == 0 or inner == 0:
        return out.zero_()
    # detcoll_max_unpool (kernels/ops/writes.h): an index outside the plane is refused by name.
    _detcoll.max_unpool(out.data_ptr(), x.data_ptr(),   # contiguous (_values, _indices)
                        indices.data_ptr(), DTYPES[x.dtype], planes,
                        x.numel() // planes, inner)
    return out


def write_last(target, dest, values):
    """target with row dest[i] replaced by values[i] (the last i where destinations repeat), as a
    new tensor: detcoll_write_last (kernels/ops/writes.h), the bits copied."""
    out = target.contiguous().clone()
    dest = dest.reshape(-1).contiguous()
    if dest.numel() == 0 or out.numel() == 0:
        return out
    values = values.contiguous()
    _detcoll.write_last(out.data_ptr(), out.shape[0], out.numel() // out.shape[0],
                        DTYPES[out.dtype], dest.data_ptr(), dest.numel(), values.data_ptr())
    return out


# ---- linear, bilinear, trilinear and bicubic interpolation ----

def upsample_backward(grad_output, output_size, input_size, align_corners, scales=None,
                      mode="linear"):
    """aten's upsample_linear1d_backward, upsample_bilinear2d_backward,
    upsample_trilinear3d_backward (mode "linear", 1-3 spatial dimensions) and
    upsample_bicubic2d_backward (mode "bicubic"): the input's gradient [N, C, *input spatial].
    scales: the forward's scale factors per axis (None: from the sizes)."""
    op = f"upsample_{mode}_backward"
    if mode not in ("linear", "bicubic"):
        raise detcoll.InvalidArgumentError(f"{op}: mode {mode!r}; linear or bicubic")
    output_size = [int(s) for s in output_size]
    spatial = len(output_size)
    input_size = [int(s) for s in input_size]
    if not 1 <= spatial <= 3 or len(input_size) != spatial + 2 or \
            (mode == "bicubic" and spatial != 2):
        raise detcoll.InvalidArgumentError(
            f"{op}: input_size {input_size} and output_size {output_size} do not match "
            f"{'2' if mode == 'bicubic' else '1 to 3'} spatial dimensions")
    g = _grad(grad_output, input_size, spatial, output_size, op)
    if min(input_size[2:] + output_size) < 1:
        raise detcoll.InvalidArgumentError(f"{op}: a spatial size is 0")
    if g.numel() == 0:
        return torch.zeros(input_size, dtype=g.dtype, device=g.device)
    scales = list(scales or ())
    if len(scales) > spatial:
        raise detcoll.InvalidArgumentError(
            f"{op}: {len(scales)} scale factors for {spatial} spatial dimensions")
    try:
        scales = [None if v is None else float(v) for v in scales]
    except (TypeError, ValueError):
        raise detcoll.InvalidArgumentError(f"{op}: scales {scales} are not numbers") from None
    scales += [None] * (spatial - len(scales))
    if mode == "linear" and spatial == 2:
        # Bilinear has its own kernel (_gathers.py), whose bits these are.
        return _gathers.upsample_bilinear2d_backward(g, output_size, input_size, align_corners,
                                                     *scales)
    if mode == "linear":
        # detcoll_upsample_linear_backward: the taps (kernels/ops/taps.h), then weighted_scatter.
        out = torch.empty(input_size, dtype=g.dtype, device=g.device)
        _detcoll.upsample_linear_backward(
            out.data_ptr(), g.data_ptr(), DTYPES[g.dtype], input_size[0] * input_size[1],
            input_size[2:], output_size, bool(align_corners),
            [-1.0 if s is None else s for s in scales])
        return out
    # detcoll_upsample_bicubic2d_backward (kernels/ops/cubic.h): torch's coefficients, each
    # tap's product rounded to the dtype, then weighted_scatter.
    out = torch.empty(input_size, dtype=g.dtype, device=g.device)
    _detcoll.upsample_bicubic2d_backward(
        out.data_ptr(), g.data_ptr(), DTYPES[g.dtype], input_size[0] * input_size[1],
        *input_size[2:], *output_size, bool(align_corners),
        *[-1.0 if s is None else s for s in scales])
    return out
