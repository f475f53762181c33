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

- A module without submodules that has parameters (Linear, ConvNd, Embedding, LayerNorm, ...)
  runs its forward on chunks of `samples_per_leaf` samples (dimension 0 of its first argument),
  each with its parameters seen through a tap; in backward, a chunk's parameter gradient is
  handed to DistributedOptimizer as one leaf instead of being added into .grad.
- detcoll.torch.SyncBatchNorm hands over the gradients of its weight and bias per chunk of
  samples from its own backward (it already has the per-sample sums); in eval mode (frozen
  statistics, trainable affine) it runs per chunk like the modules above.
- Elementwise activation modules (nn.SiLU, nn.ELU, nn.GELU, nn.Sigmoid, ...) run per chunk too:
  torch's CPU kernels compute some of them with other bits in a kernel's vectorized body than in
  its scalar tail, so a sample's values would otherwise depend on where it sits in the batch.

Chunked modules run per chunk with and without gradients alike (torch.utils.checkpoint runs a
forward without them first), and in-place activations run on copies of their chunks. Every leaf
is then a function of its samples alone, the exact sum over all ranks' leaves is the
same for every split of the batch in which each rank's share is a multiple of
`samples_per_leaf`, and so are the weights after step(). What it takes of the model, and what is
refused by name: modules with parameters treat samples independently and take them in dimension
0 of their first positional argument (other arguments are passed whole) and return one tensor;
a parameter is used only inside its own module's forward (a tied weight used by another module,
or a forward pre-hook such as weight_norm's, makes the optimizer raise in backward); torch's
BatchNorm layers, InstanceNorm layers with running statistics, modules that hold parameters
beside submodules, and modules whose forward changes their buffers are refused. What it cannot
see: functional calls in a container's forward run on the rank's whole batch, so the functions
that torch computes position-dependently (F.silu, torch.exp, F.gelu(approximate="tanh"), ...)
must be called through modules for the weights to stay world-size invariant.

Outside invariant mode (no sink) the taps give autograd each chunk's gradient and autograd adds
them: the training is reproducible, but its bits differ from the unwrapped model's, whose
gradient torch sums over the batch in one kernel. Costs: one forward and backward call per chunk
in the chunked modules, and one parameter-sized leaf per chunk until step().
"""

import types

import torch
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

import detcoll

__all__ = ["sample_leaves"]

_SINK = "_detcoll_leaf_sink"  # set on each parameter by an invariant DistributedOptimizer
_CHUNKING = "_detcoll_chunking"  # on a converted module: (name, samples_per_leaf, eval only)
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


# Elementwise activations: no parameters, but torch's CPU kernels compute some of them (exp and
# its kin) with other bits in a kernel's vectorized body than in its scalar tail, so a sample's
# values would depend on where it sits in the rank's batch. Run per chunk, each sample's values
# are computed at the same place whatever the world size.
_ELEMENTWISE = tuple(getattr(torch.nn, n) for n in (
    "Threshold", "ReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid", "Tanh", "SiLU", "Mish",
    "Hardswish", "ELU", "CELU", "SELU", "GELU", "Hardshrink", "LeakyReLU", "LogSigmoid",
    "Softplus", "Softshrink", "Softsign", "Tanhshrink"))


def _module_name(name, module):
    return f"{repr(name) if name else 'the model'} ({type(module).__name__})"


def _chunked_forward(module, *args, **kwargs):
    """A converted module's forward (bound to it, so that copies of the module run their own):
    its class's forward on chunks of samples_per_leaf samples, with the parameters seen through
    taps, in training and without gradients alike (a sample's values must not depend on the
    mode: torch.utils.checkpoint runs the forward without them first)."""
    name, samples_per_leaf, eval_only = getattr(module, _CHUNKING)
    forward = type(module).forward
    if eval_only and module.training:  # SyncBatchNorm's statistics need the whole batch
        return forward(module, *args, **kwargs)
    shown = _module_name(name, module)
    names = [n for n, p in module._parameters.items() if p is not None and p.requires_grad]
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() == 0:
        if not names:  # an activation on a scalar: no samples to place
            return forward(module, *args, **kwargs)
        got = type(args[0]).__name__ if args else "no positional argument"
        raise detcoll.InvalidArgumentError(
            f"sample_leaves: {shown} got {got} first; a module that sample_leaves runs per chunk "
            "takes a tensor with the samples in dimension 0 as its first positional argument")
    input, rest = args[0], args[1:]
    if input.shape[0] == 0:
        return _tapped(module, names, forward, input, rest, kwargs)
    # The same checks whatever the rank's share, so that every rank refuses alike.
    versions = [(n, b, b._version) for n, b in module._buffers.items() if b is not None]
    in_place = bool(getattr(module, "inplace", False))  # ReLU(inplace=True): not on views
    outputs = []
    for chunk in input.split(samples_per_leaf):
        out = _tapped(module, names, forward, chunk.clone() if in_place else chunk, rest, kwargs)
        changed = [n for n, b, v in versions if b._version != v]
        if changed:
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {shown} changed its buffer {changed[0]!r} in forward; run per "
                "chunk of samples it would change once per chunk")
        if not isinstance(out, torch.Tensor) or out.dim() == 0 or out.shape[0] != chunk.shape[0]:
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {shown} returned {type(out).__name__} "
                f"{tuple(getattr(out, 'shape', ()))} for {chunk.shape[0]} samples; a module that "
                "sample_leaves runs per chunk must return one tensor with the samples in "
                "dimension 0")
        outputs.append(out)
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs)


def _tapped(module, names, forward, input, rest, kwargs):
    """The module's forward on `input` with its parameters seen through taps."""
    if not names:
        return forward(module, input, *rest, **kwargs)
    saved = {n: module._parameters[n] for n in names}
    try:
        for n in names:
            module._parameters[n] = _Tap.apply(saved[n])
        return forward(module, input, *rest, **kwargs)
    finally:
        module._parameters.update(saved)


def sample_leaves(model, samples_per_leaf=1):
    """Makes every parameter gradient of `model` a sum of leaves of `samples_per_leaf` samples
    each, for DistributedOptimizer's invariant mode (see the module's documentation). Changes
    the modules in place and returns `model`; the parameters and their names are unchanged.
    Refuses, naming the module, what it cannot run per chunk: torch's BatchNorm layers and
    InstanceNorm layers with running statistics, and modules that hold parameters of their own
    beside submodules."""
    from detcoll.torch.sync_batch_norm import SyncBatchNorm

    if not isinstance(model, torch.nn.Module):
        raise detcoll.InvalidArgumentError(
            f"sample_leaves: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(samples_per_leaf, bool) or not isinstance(samples_per_leaf, int) or \
            samples_per_leaf < 1:
        raise detcoll.InvalidArgumentError(
            f"sample_leaves: samples_per_leaf must be a positive int, got {samples_per_leaf!r}")
    plan = []
    for name, module in model.named_modules():
        shown = _module_name(name, module)
        if isinstance(module, SyncBatchNorm):
            plan.append((name, module, True))  # chunked in eval only (frozen statistics)
            continue
        if isinstance(module, _BatchNorm):
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {shown} computes batch statistics over a rank's samples; use "
                "detcoll.torch.SyncBatchNorm")
        if isinstance(module, _InstanceNorm) and module.track_running_stats:
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {shown} keeps running statistics over a rank's samples; use "
                "track_running_stats=False")
        own = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        if own and any(True for _ in module.children()):
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {shown} holds parameters of its own beside submodules; "
                "sample_leaves takes a parameter's gradient per chunk in the forward of a module "
                "without submodules, so move them into one (a module of their own)")
        if own or isinstance(module, _ELEMENTWISE):
            plan.append((name, module, True))
    for name, module, _ in plan:
        own = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        if any(getattr(p, _MARK, None) not in (None, samples_per_leaf) for p in own):
            raise detcoll.InvalidArgumentError(
                f"sample_leaves: {_module_name(name, module)} was given another samples_per_leaf")
    for name, module, chunked in plan:
        for p in module._parameters.values():
            if p is not None and p.requires_grad:
                setattr(p, _MARK, samples_per_leaf)
                p._detcoll_leaf_owner = name  # for the optimizer's message
        if chunked and "forward" not in module.__dict__:
            setattr(module, _CHUNKING,
                    (name, samples_per_leaf, isinstance(module, SyncBatchNorm)))
            module.forward = types.MethodType(_chunked_forward, module)
    return model
