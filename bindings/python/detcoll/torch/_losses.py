"""The negative log-likelihood loss with a fixed summation order (detcoll.torch.ops.nll_loss).

torch's CUDA kernel for inputs of three dimensions and more (nll_loss2d) reduces the per-sample
losses and the total weight with atomicAdd; its [N, C] kernel reduces in one block. Here each
sample's loss is one IEEE operation per step, as torch forms it (-x[i, y_i] * w[y_i], 0 where the
target is ignored), and the sums are detcoll's fixed tree (ops.sum: chunks of 32 in order, then
pairwise; README, "Deterministic ops"), on the CPU and on CUDA alike, in detcoll_nll_loss
(kernels/ops/losses.h); 'mean' divides the two sums once. The bits depend on nothing but the
data.
"""

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _floating, _values
from detcoll.torch._tensors import DTYPES

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def nll_loss_forward(input, target, weight, reduction, ignore_index):  # noqa: A002
    """aten's nll_loss_forward (and nll_loss2d_forward): (output, total_weight). `input` is
    [C], [N, C] or [N, C, d1, ...] log-probabilities, `target` the class of each sample ([],
    [N], [N, d1, ...], int64), `reduction` 0 none, 1 mean, 2 sum."""
    op = "nll_loss"
    x = _floating(input, op, "input")
    if not isinstance(target, torch.Tensor) or target.dtype not in (torch.int64, torch.uint8):
        raise detcoll.InvalidArgumentError(
            f"{op}: target must be an integer tensor of class indices, got "
            f"{target.dtype if isinstance(target, torch.Tensor) else type(target)}")
    if target.device != x.device:
        raise detcoll.InvalidArgumentError(
            f"{op}: target is on {target.device}, input on {x.device}")
    if reduction not in (0, 1, 2):
        raise detcoll.InvalidArgumentError(f"{op}: reduction {reduction}; 0, 1 or 2")
    if x.dim() == 0:
        raise detcoll.InvalidArgumentError(f"{op}: input needs a class dimension")
    classes = x.shape[0] if x.dim() == 1 else x.shape[1]
    samples_shape = () if x.dim() == 1 else (x.shape[0],) + tuple(x.shape[2:])
    if tuple(target.shape) != samples_shape:
        raise detcoll.InvalidArgumentError(
            f"{op}: target {tuple(target.shape)} does not fit input {tuple(x.shape)}: expected "
            f"{samples_shape}")
    if weight is not None:
        weight = _values(weight, op, "weight")
        if weight.dim() != 1 or weight.shape[0] != classes or weight.dtype != x.dtype:
            raise detcoll.InvalidArgumentError(
                f"{op}: weight must be a 1-D {x.dtype} tensor of {classes} class weights, got "
                f"{weight.dtype} {tuple(weight.shape)}")
    # detcoll_nll_loss (kernels/ops/losses.h) over [batch, classes, inner].
    batch = 1 if x.dim() == 1 else x.shape[0]
    inner = 1
    for size in x.shape[2:]:
        inner *= size
    t = target.long().contiguous()
    w = None if weight is None else weight.contiguous()
    out = torch.empty(samples_shape if reduction == 0 else (), dtype=x.dtype, device=x.device)
    # torch reports a lone sample's weight as the total even unreduced; 0 for a batch.
    total = torch.zeros((), dtype=x.dtype, device=x.device)
    wants_total = reduction != 0 or x.dim() == 1
    _detcoll.nll_loss(out.data_ptr(), total.data_ptr() if wants_total else 0, x.data_ptr(),
                      t.data_ptr(), 0 if w is None else w.data_ptr(), DTYPES[x.dtype], batch,
                      classes, inner, int(ignore_index), int(reduction))
    return out, total


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):  # noqa: A002
    """F.nll_loss(input, target, weight, ignore_index=..., reduction=...), its sums in a fixed
    order: the same bits on the CPU and on CUDA, run after run."""
    if reduction not in _REDUCTIONS:
        raise detcoll.InvalidArgumentError(
            f"nll_loss: reduction {reduction!r}; 'none', 'mean' or 'sum'")
    return nll_loss_forward(input, target, weight, _REDUCTIONS[reduction], int(ignore_index))[0]
