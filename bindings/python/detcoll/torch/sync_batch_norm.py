"""detcoll.torch.sync_batch_norm: Horovod's SyncBatchNorm, with batch statistics whose bits do
not depend on the world size.

    from detcoll.torch.sync_batch_norm import SyncBatchNorm
    bn = SyncBatchNorm(64)            # torch.nn.BatchNorm*d's arguments, any input (N, C, *)

In training the statistics are those of every rank's batch together, as with Horovod 0.28's
layer; in eval with running statistics the layer is plain F.batch_norm.

How the bits are made (docs/design.md, "The determinism contract"):

- Leaves. For each local sample n and channel c, s1[n, c] is the sum of x[n, c, ...] over the
  spatial positions, computed by detcoll.torch.ops.sum over the last axis of an [N, C, S] view:
  a fixed summation tree over the S values of one (n, c), which does not depend on N, so a
  sample's leaf has the same bits on whichever rank holds it, next to however many others. For
  2-D input (S = 1) the leaf is the value itself.
- Reduction. The channel sums are one detcoll allreduce_leaves of those per-sample leaves
  (bindings/c/detcoll.h, detcoll_allreduce_leaves). In invariant mode
  (DETCOLL_DETERMINISM=invariant or detcoll.set_mode("invariant")) the result is a function of
  the multiset of leaves alone (docs/design.md, "The invariant mode": each leaf rounded once onto
  its channel's fixed-point grid, the grid values added exactly, the sum rounded once), so the
  statistics, hence the outputs, input gradients and running statistics, have the same bits at
  np 1, 2 or 4 as long as the global batch and its order are the same. In ordered mode a rank
  folds its own leaves in order and the ranks' folds are added in rank order (docs/design.md,
  "The ordered mode"): the same bits run after run at a fixed world size and split, but not
  across world sizes. Native mode gives no promise.
- Two passes, as F.batch_norm: mean = S1 / count (count: the elements per channel over every
  rank), then leaves of sum((x - mean)^2) for the variance: biased (/ count) to normalize,
  unbiased (/ (count - 1)) for running_var. invstd = 1 / sqrt(var + eps). The output is
  ((x - mean) * invstd) * weight + bias, one rounding per operation, element by element, so it
  too is the same for a sample wherever it sits.
- Backward. Per-sample leaves of sum(dy) and sum(dy * (x - mean)) ([2C] per sample) go through
  one allreduce_leaves; then
      grad_input = ((dy - sum_dy / count) - (x - mean) * (invstd * invstd * sum_dy_xmu / count))
                   * (invstd * weight)
  the exact derivative of the forward with the statistics' dependence on x included.
  grad_weight = invstd * sum(dy * (x - mean)) and grad_bias = sum(dy) are this rank's LOCAL sums
  (Horovod's semantics: DistributedOptimizer then averages them), from the local leaves by
  ops.sum's fixed tree. So, as with Horovod, the parameters' gradients depend on how the batch
  is split; only the layer's outputs, input gradients and running statistics are world-size
  invariant. Under detcoll.torch.sample_leaves() and an invariant DistributedOptimizer the layer
  hands the optimizer one leaf per chunk of samples instead (invstd * the chunk's sum of
  sum(dy * (x - mean)), and its sum of sum(dy)), so that a whole model's weights are the same
  at every world size (docs/design.md, "Sample leaves").
- Leaf limits. A rank may hold at most 65535 leaves and invariant mode takes at most 65536 over
  all ranks. Every rank learns every rank's sample count (one allgather), and all choose the
  same group size g, the smallest that fits: g = 1 (a leaf per sample) while no rank holds more
  than 65535 samples and the samples, plus one for each rank that holds none, number at most
  65536. With g > 1 a leaf is the ops.sum of g consecutive local samples' leaves (the last
  group padded with zeros), so world-size invariance then needs every rank's share to be a
  multiple of g. A rank with no samples contributes one leaf of zeros.
- Order. allreduce_leaves is a blocking collective paired by call order: every rank must run
  its SyncBatchNorm layers (forward and backward) in the same order, from the thread that called
  init. PyTorch runs the backward of CPU tensors on the thread that calls backward(). The
  backward reduction runs whenever backward reaches the layer, whatever needs a gradient, so
  the ranks' calls stay paired.
- Dtypes. float32 and float64 compute in their own dtype; float16 and bfloat16 input is
  computed in float32 (leaves, reductions and elementwise math) and the output and input
  gradient cast back once.

Limitations: CPU tensors only; a CUDA (or other non-CPU) tensor raises InvalidArgumentError.
No process sets: the statistics are over every rank. In eval without running statistics the
layer uses the local batch's statistics, as Horovod's does. A local check that fails on one rank
(shape, device, dtype) fails the collective on every rank (detcoll_reject_next_call), so the
others do not wait for it.
"""

import math

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

import detcoll
from detcoll import _detcoll
from detcoll.torch import ops
from detcoll.torch._tensors import DTYPES
from detcoll.torch.sample_leaves import _MARK, leaf_sink

__all__ = ["SyncBatchNorm"]

_LEAVES_PER_RANK = 65535
_LEAVES_IN_ALL = 65536
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_NAME = "detcoll.sync_batch_norm"


def _checked(call, checks, name):
    """Runs the layer's local checks. When they fail on this rank, it still joins the layer's
    first collective (a blocking allgather named `name`) as rejected with the message
    (detcoll_reject_next_call), so every rank raises the same InvalidArgumentError instead of
    the others waiting for this one."""
    if _detcoll.size() < 0:
        raise detcoll.NotInitializedError(f"{call} called before detcoll.torch.init()")
    try:
        return checks()
    except detcoll.InvalidArgumentError as e:
        error = e
    _detcoll.reject_next_call(str(error))
    _detcoll.allgather(0, 0, 0, _detcoll.FLOAT32, name)  # raises the rejection, on every rank
    raise error  # not reached


def _compute_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_input(input, num_features):
    call = "SyncBatchNorm"
    if not isinstance(input, torch.Tensor):
        raise detcoll.InvalidArgumentError(f"{call}: expected a torch.Tensor, got {type(input)}")
    if input.device.type != "cpu":
        raise detcoll.InvalidArgumentError(
            f"{call}: the input is on {input.device}; detcoll's SyncBatchNorm takes CPU tensors "
            "only in this version (CUDA tensors are not supported yet)")
    if input.dim() < 2:
        raise detcoll.InvalidArgumentError(
            "expected at least 2D input (got {}D input)".format(input.dim()))
    if input.dtype not in _FLOATS:
        raise detcoll.InvalidArgumentError(
            f"{call}: unsupported dtype {input.dtype}; float32, float64, float16 and bfloat16 "
            "are supported")
    if input.shape[1] != num_features:
        raise detcoll.InvalidArgumentError(
            f"{call}: input {tuple(input.shape)} has {input.shape[1]} channels, the layer "
            f"{num_features}")


def _group_size(samples):
    """The samples per leaf, the same on every rank: the smallest g such that no rank holds more
    than 65535 leaves and all ranks together at most 65536."""
    g = 1
    while True:
        per_rank = [max(1, -(-n // g)) for n in samples]
        if max(per_rank) <= _LEAVES_PER_RANK and sum(per_rank) <= _LEAVES_IN_ALL:
            return g
        g += 1


def _grouped(leaves, g):
    """[N, K] per-sample leaves -> [L, K] leaves, L >= 1: groups of g consecutive samples."""
    n, k = leaves.shape
    if n == 0:
        return torch.zeros((1, k), dtype=leaves.dtype)
    if g == 1:
        return leaves.contiguous()
    groups = -(-n // g)
    padded = torch.cat([leaves, torch.zeros((groups * g - n, k), dtype=leaves.dtype)])
    return ops.sum(padded.reshape(groups, g, k), dim=1)


def _reduce_leaves(leaves, g, name):
    """The sum over every rank of the rows of leaves ([N, K]), by allreduce_leaves."""
    leaves = _grouped(leaves, g)
    count = leaves.shape[1]
    step = count * leaves.element_size()
    base = leaves.data_ptr()
    out = torch.empty(count, dtype=leaves.dtype)
    _detcoll.allreduce_leaves([base + i * step for i in range(leaves.shape[0])], out.data_ptr(),
                              count, DTYPES[leaves.dtype], _detcoll.SUM, name)
    return out


def _gather_counts(samples, elements):
    """Every rank's [samples, elements per channel], by one allgather (int64)."""
    mine = torch.tensor([samples, elements], dtype=torch.int64)
    size = _detcoll.size()
    out = torch.empty(2 * size, dtype=torch.int64)
    _detcoll.allgather(mine.data_ptr(), out.data_ptr(), 2, _detcoll.INT64, _NAME + ".count")
    return out.reshape(size, 2).tolist()


def _per_channel(v):
    return v.reshape(1, -1, 1)


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, factor):
        dtype = _compute_dtype(input.dtype)
        x = input.detach().to(dtype).contiguous()
        n, c = x.shape[0], x.shape[1]
        x3 = x.reshape(n, c, math.prod(x.shape[2:]))  # not -1: a rank may hold no samples
        counts = _gather_counts(n, n * x3.shape[2])
        total = sum(e for _, e in counts)
        if total <= 1:
            raise detcoll.InvalidArgumentError(
                "Expected more than 1 value per channel when training, got input size "
                f"{input.size()} on this rank and {total} value(s) per channel over all ranks")
        g = _group_size([s for s, _ in counts])
        count = torch.full((c,), float(total), dtype=dtype)

        mean = _reduce_leaves(ops.sum(x3, dim=2), g, _NAME + ".sum") / count
        xmu = x3 - _per_channel(mean)
        squares = _reduce_leaves(ops.sum(xmu * xmu, dim=2), g, _NAME + ".sum_squares")
        var = squares / count
        invstd = torch.ones_like(var) / torch.sqrt(var + eps)

        if running_mean is not None:
            running_mean.copy_((running_mean.to(dtype) * (1.0 - factor) + mean * factor)
                               .to(running_mean.dtype))
        if running_var is not None:
            unbiased = squares / (count - 1)
            running_var.copy_((running_var.to(dtype) * (1.0 - factor) + unbiased * factor)
                              .to(running_var.dtype))

        y = xmu * _per_channel(invstd)
        w = None
        if weight is not None:
            w = weight.detach().to(dtype)
            y = y * _per_channel(w)
        if bias is not None:
            y = y + _per_channel(bias.detach().to(dtype))
        ctx.save_for_backward(xmu, invstd, w if w is not None else torch.empty(0))
        ctx.total, ctx.g, ctx.has_weight = total, g, weight is not None
        ctx.has_bias, ctx.shape, ctx.dtype = bias is not None, input.shape, input.dtype
        ctx.weight_dtype = weight.dtype if weight is not None else None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.params = (weight, bias)  # for their leaf sinks (sample_leaves.py)
        return y.reshape(input.shape).to(input.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        xmu, invstd, w = ctx.saved_tensors
        n, c = xmu.shape[0], xmu.shape[1]
        dtype = xmu.dtype
        dy = grad_output.detach().to(dtype).contiguous().reshape(xmu.shape)
        sum_dy = ops.sum(dy, dim=2)
        sum_dy_xmu = ops.sum(dy * xmu, dim=2)
        reduced = _reduce_leaves(torch.cat([sum_dy, sum_dy_xmu], dim=1), ctx.g,
                                 _NAME + ".backward")
        count = torch.full((c,), float(ctx.total), dtype=dtype)

        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            mean_dy = reduced[:c] / count
            mean_dy_xmu = reduced[c:] / count
            k = invstd * invstd * mean_dy_xmu
            scale = invstd * w if ctx.has_weight else invstd
            grad_input = (((dy - _per_channel(mean_dy)) - xmu * _per_channel(k))
                          * _per_channel(scale))
            grad_input = grad_input.reshape(ctx.shape).to(ctx.dtype)
        if ctx.has_weight and ctx.needs_input_grad[1]:
            grad_weight = _parameter_grad(ctx.params[0], sum_dy_xmu, invstd, ctx.weight_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = _parameter_grad(ctx.params[1], sum_dy, None, ctx.bias_dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


def _parameter_grad(param, per_sample, invstd, dtype):
    """The weight's (invstd * sum over samples of sum(dy * (x - mean))) or the bias's (sum over
    samples of sum(dy)) gradient from the per-sample sums [N, C]: this rank's local sum, or, for
    a parameter of sample_leaves() under an invariant DistributedOptimizer, one leaf per chunk
    of samples handed to the optimizer (and None to autograd)."""
    n, c = per_sample.shape
    sink = leaf_sink(param)
    if sink is None:
        local = ops.sum(per_sample, dim=0) if n else torch.zeros(c, dtype=per_sample.dtype)
        return (local * invstd if invstd is not None else local).to(dtype)
    for chunk in per_sample.split(getattr(param, _MARK)):
        leaf = ops.sum(chunk, dim=0)
        sink((leaf * invstd if invstd is not None else leaf).to(dtype))
    return None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over every rank's batch (horovod.torch.SyncBatchNorm's arguments),
    with statistics reduced by allreduce_leaves: world-size invariant in invariant mode,
    reproducible in ordered mode (see the module's documentation). CPU tensors only."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise detcoll.InvalidArgumentError(
                "expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        if not self.training:
            _check_input(input, self.num_features)
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, not self.track_running_stats, 0.0, self.eps)

        _checked("SyncBatchNorm", lambda: _check_input(input, self.num_features),
                 _NAME + ".count")
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
            else:
                factor = self.momentum
        running_mean = self.running_mean if self.track_running_stats else None
        running_var = self.running_var if self.track_running_stats else None
        return _SyncBatchNorm.apply(input, self.weight, self.bias, running_mean, running_var,
                                    self.eps, factor)
