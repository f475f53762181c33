"""ctc_loss's backward (detcoll.torch.ops), whose CUDA kernel gathers the per-class sums with
atomic adds: detcoll_ctc_loss_backward (kernels/ops/ctc.h).

For batch element b, with the extended target l' (blanks around and between the labels) and the
forward's log α, the backward computes log β by its recursion, in float64, one time step at a
time for the whole batch; then for each time t and class c the sum over the positions s with
l'(s) = c of exp(log α + log β − m), m the largest log α + log β at (t, b), in increasing s; and
the gradient (exp(lp) − exp(log Σ + m + nll − lp)) · grad, rounded once to the input's dtype, 0
from the input length on (README, "Deterministic ops").

The order of every sum is fixed, so a device gives the same bits run after run. exp and log are
the platform's own (the host's and a GPU's differ in their last bits), so the CPU and the GPU
agree to those bits, not bit for bit.
"""

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._op_args import _floating, _placed, _same_dtype
from detcoll.torch._tensors import DTYPES

def _lengths(values, count, op, what, device):
    if isinstance(values, torch.Tensor):
        _placed(values, op, what)
        if values.is_floating_point() or values.dtype == torch.bool:
            raise detcoll.InvalidArgumentError(f"{op}: {what} has dtype {values.dtype}; integers")
        values = values.tolist()
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise detcoll.InvalidArgumentError(f"{op}: {what} {list(values)} must be integers")
    values = [int(v) for v in values]
    if len(values) != count:
        raise detcoll.InvalidArgumentError(f"{op}: {len(values)} {what} for a batch of {count}")
    return values


def _extended_targets(targets, target_lengths, batch, op):
    """[batch, 2 S + 1] class of each extended position (blank = -1 here, filled in later), with
    S the longest target: the labels at odd positions."""
    longest = max(target_lengths, default=0)
    if targets.dim() == 2:
        if targets.shape[0] != batch or targets.shape[1] < longest:
            raise detcoll.InvalidArgumentError(
                f"{op}: targets {tuple(targets.shape)} do not hold {batch} targets of up to "
                f"{longest} labels")
        labels = targets[:, :longest]
    elif targets.dim() == 1:
        if targets.numel() < sum(target_lengths):
            raise detcoll.InvalidArgumentError(
                f"{op}: {targets.numel()} concatenated targets for lengths summing to "
                f"{sum(target_lengths)}")
        labels = torch.zeros(batch, longest, dtype=torch.int64, device=targets.device)
        start = 0
        for b, length in enumerate(target_lengths):
            labels[b, :length] = targets[start:start + length]
            start += length
    else:
        raise detcoll.InvalidArgumentError(
            f"{op}: targets must be 1-D (concatenated) or 2-D (padded), got "
            f"{tuple(targets.shape)}")
    return labels.long(), longest


def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
                      neg_log_likelihood, log_alpha, blank, zero_infinity=False):
    """aten's _ctc_loss_backward: the gradient with respect to log_probs [T, B, C]."""
    op = "ctc_loss_backward"
    lp = _floating(log_probs, op, "log_probs")
    if lp.dim() != 3:
        raise detcoll.InvalidArgumentError(
            f"{op}: log_probs must be [T, batch, classes], got {tuple(lp.shape)}")
    steps, batch, classes = lp.shape
    blank = int(blank)
    if not 0 <= blank < classes:
        raise detcoll.InvalidArgumentError(f"{op}: blank {blank} is not one of {classes} classes")
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point():
        raise detcoll.InvalidArgumentError(f"{op}: targets must be an integer tensor")
    _placed(targets, op, "targets")
    device = lp.device
    inputs = _lengths(input_lengths, batch, op, "input_lengths", device)
    lengths = _lengths(target_lengths, batch, op, "target_lengths", device)
    if any(not 0 <= n <= steps for n in inputs) or any(n < 0 for n in lengths):
        raise detcoll.InvalidArgumentError(
            f"{op}: input_lengths {inputs} must lie in [0, {steps}] and target_lengths "
            f"{lengths} be >= 0")
    labels, longest = _extended_targets(targets, lengths, batch, op)
    # Only the first target_lengths[b] labels are read (padding past them may be anything).
    read = torch.arange(longest, device=labels.device).unsqueeze(0) < \
        torch.tensor(lengths, device=labels.device).unsqueeze(1)
    if bool((read & ((labels < 0) | (labels >= classes))).any()):
        raise detcoll.InvalidArgumentError(f"{op}: a target is not one of {classes} classes")
    labels = torch.where(read, labels, torch.zeros_like(labels))
    width = 2 * longest + 1
    alpha = _floating(log_alpha, op, "log_alpha")
    if alpha.dim() != 3 or alpha.shape[0] != batch or alpha.shape[1] != steps or \
            alpha.shape[2] < width:
        raise detcoll.InvalidArgumentError(
            f"{op}: log_alpha {tuple(alpha.shape)} is not [{batch}, {steps}, >= {width}]")
    nll = _floating(neg_log_likelihood, op, "neg_log_likelihood").reshape(-1)
    g = _floating(grad, op, "grad").reshape(-1)
    for what, t in (("log_alpha", alpha), ("neg_log_likelihood", nll), ("grad", g)):
        _same_dtype(op, lp, t, what)
    if nll.numel() != batch or g.numel() != batch:
        raise detcoll.InvalidArgumentError(
            f"{op}: grad and neg_log_likelihood need one value per batch element ({batch})")
    out = torch.empty_like(lp)
    if lp.numel() == 0:
        return out
    # detcoll_ctc_loss_backward (kernels/ops/ctc.h); labels, alpha, nll and g are contiguous.
    labels = labels.contiguous()
    _detcoll.ctc_loss_backward(out.data_ptr(), g.data_ptr(), lp.data_ptr(), labels.data_ptr(),
                               labels.shape[1], inputs, lengths, nll.data_ptr(),
                               alpha.data_ptr(), alpha.shape[2], DTYPES[lp.dtype], steps, batch,
                               classes, blank, bool(zero_infinity))
    return out
