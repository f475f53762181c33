"""detcoll.torch.sample_leaves: parameter gradients made of per-sample leaves, so that in
invariant mode a model's reduced gradient does not depend on how the batch is split over ranks.

    model = hvd.sample_leaves(model)              # before DistributedOptimizer
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)

Why (docs/design.md, "Sample leaves"): DistributedOptimizer's invariant mode makes each backward
pass's gradient one leaf of an exact sum, so a step of V micro-batches gives the same gradient
on every world size that divides V. A layer that couples the samples of one forward pass, such
as SyncBatchNorm, needs the whole global batch in one pass: then each rank's gradient of a
convolution's weight is torch's float sum over the rank's own samples, whose rounding depends on
how many samples the rank holds. sample_leaves() changes where that sum is taken:

- A module with parameters of its own (Linear, ConvNd, Embedding, LayerNorm, ...) runs its
  forward on chunks of `samples_per_leaf` samples (dimension 0 of its first argument), each with
  its parameters seen through a tap; in backward, a chunk's parameter gradient is handed to
  DistributedOptimizer as one leaf instead of being added into .grad.
- detcoll.torch.SyncBatchNorm hands over the gradients of its weight and bias per chunk of
  samples from its own backward (it already has the per-sample sums).
- torch's own BatchNorm layers are refused: their statistics couple a rank's samples.

Every leaf is then a function of its samples alone, the exact sum over all ranks' leaves is the
same for every split of the batch in which each rank's share is a multiple of
`samples_per_leaf`, and so are the weights after step(). Requires that modules with parameters
treat samples independently and take samples in dimension 0 (batch_first); a module that
returns anything but one tensor is refused when it runs. Without an invariant
DistributedOptimizer the taps hand the gradient back to autograd and training is unchanged.
Costs: one forward and backward call per chunk in the wrapped modules, and one parameter-sized
leaf per chunk until step().
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

import detcoll

__all__ = ["sample_leaves"]

_SINK = "_detcoll_leaf_sink"  # set on each parameter by an invariant DistributedOptimizer
_MARK = "_detcoll_samples_per_leaf"  # set by sample_leaves(): the parameter's leaves are chunks


def leaf_sink(param):
    """The callable that takes one leaf of `param`'s gradient, or None: set by an invariant-mode
    DistributedOptimizer for the parameters whose gradients come as sample leaves."""
    if getattr(param, _MARK, None) is None:
        return None
    return getattr(param, _SINK, None)


class _Tap(torch.autograd.Function):
    """The identity on a parameter whose backward hands the gradient to the parameter's leaf
    sink, when there is one, instead of to autograd."""

    @staticmethod
    def forward(ctx, param):
        ctx.param = param
        return param.view_as(param)

    @staticmethod
    def backward(ctx, grad):
        sink = leaf_sink(ctx.param)
        if sink is None:
            return grad
        sink(grad)
        return None


def _chunked_forward(module, samples_per_leaf):
    forward = type(module).forward
    names = [n for n, p in module._parameters.items() if p is not None and p.requires_grad]

    def chunked(input, *args, **kwargs):
        if not isinstance(input, torch.Tensor) or input.dim() == 0:
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {type(module).__name__} got {type(input).__name__} "
                f"{tuple(getattr(input, 'shape', ()))} as its first argument; a module with "
                "parameters must take a tensor with the samples in dimension 0")
        if not torch.is_grad_enabled() or input.shape[0] == 0:
            return forward(module, input, *args, **kwargs)
        outputs = []
        for chunk in input.split(samples_per_leaf):
            saved = {n: module._parameters[n] for n in names}
            try:
                for n in names:
                    module._parameters[n] = _Tap.apply(saved[n])
                out = forward(module, chunk, *args, **kwargs)
            finally:
                module._parameters.update(saved)
            if not isinstance(out, torch.Tensor) or out.dim() == 0 or \
                    out.shape[0] != chunk.shape[0]:
                raise detcoll.InvalidArgumentError(
                    f"sample_leaves: {type(module).__name__} returned "
                    f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))} for "
                    f"{chunk.shape[0]} samples; a module with parameters must return one "
                    "tensor with the samples in dimension 0")
            outputs.append(out)
        return torch.cat(outputs)

    return chunked


def sample_leaves(model, samples_per_leaf=1):
    """Makes every parameter gradient of `model` a sum of leaves of `samples_per_leaf` samples
    each, for DistributedOptimizer's invariant mode (see the module's documentation). Changes
    the modules in place and returns `model`; the parameters and their names are unchanged."""
    from detcoll.torch.sync_batch_norm import SyncBatchNorm

    if not isinstance(model, torch.nn.Module):
        raise detcoll.InvalidArgumentError(
            f"sample_leaves: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(samples_per_leaf, bool) or not isinstance(samples_per_leaf, int) or \
            samples_per_leaf < 1:
        raise detcoll.InvalidArgumentError(
            f"sample_leaves: samples_per_leaf must be a positive int, got {samples_per_leaf!r}")
    for name, module in model.named_modules():
        own = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        if not own:
            continue
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {name or 'the model'} is a {type(module).__name__}, whose "
                "batch statistics couple a rank's samples; use detcoll.torch.SyncBatchNorm")
        if any(getattr(p, _MARK, None) not in (None, samples_per_leaf) for p in own):
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {name or 'the model'} was given another samples_per_leaf")
        for p in own:
            setattr(p, _MARK, samples_per_leaf)
        if not isinstance(module, SyncBatchNorm) and "forward" not in module.__dict__:
            module.forward = _chunked_forward(module, samples_per_leaf)
    return model
