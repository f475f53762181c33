"""DistributedOptimizer: Horovod's wrapper, with gradients reduced by detcoll.

Ordered and native mode: each gradient is allreduced as soon as backward has accumulated it
(a hook on its accumulator), through the fusion engine, after every backward_passes_per_step
passes; step() waits for them. Invariant mode: each backward pass's gradient is one leaf. A hook
takes the pass's gradient before the framework accumulates it and leaves zeros behind, so float
accumulation never mixes leaves; step() reduces every leaf of every rank exactly. With V
micro-batches per step spread over P ranks (backward_passes_per_step = V / P), the summed
gradient is then the same for every P that divides V. op=Average keeps Horovod's meaning: the
sum divided by the world size.

Sparse gradients (an Embedding with sparse=True): with sparse_as_dense they are reduced as dense
tensors; otherwise through sparse_allreduce_async (allgathers of indices and values, summed in
rank order). Either way the gradient is sparse again afterwards, as in Horovod, and its dense
value is the same. In invariant mode a sparse pass is a dense leaf.
"""

import collections
import contextlib
import warnings

import torch

import detcoll
from detcoll import _detcoll
from detcoll.debug import trace as _record
from detcoll.torch._tensors import use_current_stream
from detcoll.torch.sample_leaves import _MARK, _SINK


class DistributedOptimizerError(detcoll.InvalidArgumentError, AssertionError):
    """A misuse Horovod reports with AssertionError (zero_grad() while gradients are being
    reduced, more backward passes than backward_passes_per_step); also an InvalidArgumentError,
    as detcoll's other refusals are."""


_ZERO_GRAD_IN_FLIGHT = (
    "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
    "optimizer.synchronize(). This is prohibited as it can cause a race condition.")
_TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally.")
_STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider using "
    "optimizer.skip_synchronize() context if you use optimizer.synchronize() in your code.")


def _parameter_names(param_groups, named_parameters):
    """id(parameter) -> the name its gradient is reduced under, checked as Horovod checks it."""
    if named_parameters is not None:
        named = list(named_parameters)
    else:
        named = [(f"allreduce.noname.{i}.{j}", v) for i, group in enumerate(param_groups)
                 for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named):
        raise detcoll.InvalidArgumentError(
            "named_parameters should be a sequence of tuples (name, parameter), usually "
            "produced by model.named_parameters().")
    counts = collections.Counter(name for name, _ in named)
    dups = [name for name in counts if counts[name] > 1]
    if dups:
        raise detcoll.InvalidArgumentError(
            "Parameter names in named_parameters must be unique. Found duplicates: %s"
            % ", ".join(str(d) for d in dups))
    named_ids = {id(v) for _, v in named}
    unnamed = [id(v) for group in param_groups for v in group["params"] if id(v) not in named_ids]
    if unnamed:
        raise detcoll.InvalidArgumentError(
            "named_parameters was specified, but one or more model parameters were not named. "
            "Python object ids: %s" % ", ".join(str(i) for i in unnamed))
    # A parameter given under several names takes the last in sorted order, as in Horovod.
    return {id(v): k for k, v in sorted(named, key=lambda item: item[0])}


def _check_groups(groups):
    """Horovod's checks of `groups`. detcoll's engine fuses by itself and the bits of ordered
    mode do not depend on fusion, so groups change nothing else."""
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise detcoll.InvalidArgumentError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise detcoll.InvalidArgumentError(
                        "A parameter can only appear once in groups.")
                seen.add(id(p))
    elif isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise detcoll.InvalidArgumentError(
            "groups should be a non-negative integer or a list of list of torch.Tensor.")


class _DistributedOptimizer:
    def _detcoll_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       predivide, sparse_as_dense, process_set):
        import detcoll.torch as hvd

        self._hvd = hvd
        self._process_set = process_set
        if backward_passes_per_step < 1:
            raise detcoll.InvalidArgumentError("backward_passes_per_step must be at least 1")
        if op not in (hvd.Sum, hvd.Average):
            raise detcoll.InvalidArgumentError("DistributedOptimizer reduces with Sum or Average")
        self._names = _parameter_names(self.param_groups, named_parameters)
        # Horovod's attribute (parameter -> name), which some scripts read.
        self._parameter_names = {p: self._names[id(p)] for group in self.param_groups
                                 for p in group["params"]}
        self._params = [p for group in self.param_groups for p in group["params"]
                        if p.requires_grad]
        self._passes = backward_passes_per_step
        self._op = self._requested_op = op
        self._sparse_as_dense = bool(sparse_as_dense)
        # Horovod's gradient_predivide_factor f: Average becomes a Sum of gradients scaled by
        # 1/f before and f/size after.
        self._prescale, self._postscale = 1.0, 1.0
        if op == hvd.Average and predivide != 1.0:
            self._op = hvd.Sum
            self._prescale, self._postscale = 1.0 / predivide, predivide / process_set.size()
        self._compression = compression
        self._mode = detcoll.get_mode()
        self._handles = {}
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        self._leaves = {id(p): [] for p in self._params}
        self._sparse_dims = {}  # invariant mode: sparse_dim of a parameter's sparse gradients
        self._contexts = {}  # decompression context per parameter
        self._synchronized = False
        self._should_synchronize = True
        self._hooks = []
        for p in self._params:
            # Sample leaves (sample_leaves.py) come through the sink, in invariant mode only.
            setattr(p, _SINK, self._sink(p) if self._mode == "invariant" else None)
            if self._mode == "invariant":
                self._hooks.append(p.register_hook(self._leaf_hook(p)))
            else:
                # Before accumulation: refuse a pass beyond backward_passes_per_step while the
                # gradient may be under reduction in place. After: start the reduction.
                self._hooks.append(p.register_hook(self._pass_check(p)))
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._accumulated_hook(p))
                self._hooks.append(accumulator)  # keep it alive

    # Invariant mode: this pass's gradient becomes a leaf; the framework accumulates zeros.
    def _leaf_hook(self, p):
        def hook(grad):
            if getattr(p, _MARK, None) is not None:
                # A parameter of sample_leaves() reached by autograd, not through its taps: its
                # gradient here is a sum over the rank's samples, which would break the
                # invariance silently.
                owner = getattr(p, "_detcoll_leaf_owner", "")
                raise detcoll.InvalidArgumentError(
                    f"sample_leaves: parameter {self._names[id(p)]!r} of "
                    f"{repr(owner) if owner else 'the model'} got a gradient "
                    "outside its module's chunks (a weight tied to another module, a use in "
                    "another module's forward, a forward pre-hook such as weight_norm's, or a "
                    "module called in a way sample_leaves does not chunk); "
                    "that part is a sum over this rank's samples, not leaves of chunks. Use the "
                    "parameter only inside its own module's forward")
            self._add_leaf(p, grad)
            return torch.zeros_like(grad)
        return hook

    def _sink(self, p):
        """Takes a leaf of p's gradient from a tap of sample_leaves() or SyncBatchNorm."""
        def sink(grad):
            self._add_leaf(p, grad)
        return sink

    def _add_leaf(self, p, grad):
        self._synchronized = False  # a new pass: the next step reduces again
        recorder = _record.active()
        if recorder is not None:
            recorder.leaf(self._names[id(p)], grad)
        if grad.is_sparse:
            self._sparse_dims[id(p)] = grad.sparse_dim()
            leaf = grad.to_dense()
        else:
            leaf = grad.detach().clone()
        if self._prescale != 1.0:
            leaf.mul_(self._prescale)
        leaf, self._contexts[id(p)] = self._compression.compress(leaf)
        self._leaves[id(p)].append(leaf.contiguous())

    # Ordered and native mode: allreduce once backward has accumulated the last pass.
    def _pass_check(self, p):
        def hook(grad):
            if self._delay[id(p)] == 0:
                raise DistributedOptimizerError(_TOO_MANY_PASSES)
            return grad
        return hook

    def _accumulated_hook(self, p):
        def hook(*ignore):
            self._synchronized = False  # a new pass: the next step reduces again
            self._delay[id(p)] -= 1
            if self._delay[id(p)] == 0:
                self._reduce_async(p)
        return hook

    def _pending(self):
        if self._mode == "invariant":
            return any(self._leaves[id(p)] for p in self._params)
        return bool(self._handles) or any(d != self._passes for d in self._delay.values())

    def zero_grad(self, *args, **kwargs):
        if self._pending():
            raise DistributedOptimizerError(_ZERO_GRAD_IN_FLIGHT)
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def _reduce_async(self, p):
        grad = p.grad
        recorder = _record.active()
        if recorder is not None:
            recorder.gradient(self._names[id(p)], grad)
        if grad.is_sparse:
            if not self._sparse_as_dense:
                from detcoll.torch.functions import sparse_allreduce_async
                self._handles[id(p)] = (sparse_allreduce_async(
                    grad, name=self._names[id(p)], op=self._requested_op,
                    process_set=self._process_set), None, None)
                return
            grad = grad.to_dense()
        compressed, ctx = self._compression.compress(grad)
        compressed = compressed.contiguous()  # e.g. a channels_last gradient: reduce a copy
        handle = self._hvd.allreduce_async_(compressed, name=self._names[id(p)], op=self._op,
                                            prescale_factor=self._prescale,
                                            postscale_factor=self._postscale,
                                            process_set=self._process_set)
        self._handles[id(p)] = (handle, compressed, ctx)

    def synchronize(self):
        """Completes the reduction of every gradient (step() calls it)."""
        if detcoll.get_mode() != self._mode:
            raise detcoll.InvalidArgumentError(
                f"the determinism mode changed from {self._mode} to {detcoll.get_mode()} after "
                "DistributedOptimizer was built; set the mode first")
        if self._mode == "invariant":
            self._reduce_leaves()
        else:
            for p in self._params:
                if id(p) not in self._handles:
                    if p.grad is None:
                        # Another rank may have a gradient for it (a branch only it took).
                        p.grad = torch.zeros_like(p)
                    self._reduce_async(p)
            for p in self._params:
                handle, compressed, ctx = self._handles[id(p)]
                if callable(handle):  # sparse_allreduce_async's result
                    p.grad = handle()
                    continue
                reduced = self._compression.decompress(self._hvd.synchronize(handle), ctx)
                if p.grad.is_sparse:  # sparse_as_dense: sparse again, as in Horovod
                    p.grad = reduced.to_sparse(p.grad.sparse_dim())
                elif compressed is not p.grad:
                    p.grad.copy_(reduced)
            self._handles.clear()
            for p in self._params:
                self._delay[id(p)] = self._passes
        self._synchronized = True
        recorder = _record.active()
        if recorder is not None:
            recorder.reduced([(self._names[id(p)], p.grad) for p in self._params], self._mode)

    def _reduce_leaves(self):
        if not self._params:
            return
        # Parameters whose leaves are sample chunks (sample_leaves.py) and the others are
        # reduced apart, each class padded to its longest list of leaves: a parameter that got
        # no gradient in some pass (an unused branch) contributes zero leaves there, and zeros
        # change neither the exact sum nor the scales. The classes and dtypes are the same on
        # every rank; the leaf counts may differ.
        def sampled(p):
            return getattr(p, _MARK, None) is not None

        for kind in (False, True):
            params = [p for p in self._params if sampled(p) == kind]
            count = max([1] + [len(self._leaves[id(p)]) for p in params])
            for p in params:
                leaves = self._leaves[id(p)]
                while len(leaves) < count:
                    leaf, self._contexts[id(p)] = self._compression.compress(
                        torch.zeros_like(p, memory_format=torch.contiguous_format))
                    leaves.append(leaf)
        # One exact reduction per class and dtype over its parameters laid end to end: the
        # invariant mode's bits do not depend on the layout.
        groups = {}
        for p in self._params:
            first = self._leaves[id(p)][0]
            groups.setdefault((sampled(p), first.dtype, first.device), []).append(p)
        size = self._hvd.size()
        for (kind, dtype, device), params in groups.items():
            count = len(self._leaves[id(params[0])])
            leaves = [torch.cat([self._leaves[id(p)][l].reshape(-1) for p in params])
                      for l in range(count)]
            out = torch.empty_like(leaves[0])
            # CUDA gradients: the blocking device path, on torch's current stream. A class per
            # device too: ranks whose parameters live elsewhere fail on every rank (the name).
            use_current_stream(device if device.type == "cuda" else None)
            _detcoll.allreduce_leaves([t.data_ptr() for t in leaves], out.data_ptr(), out.numel(),
                                      self._hvd._DTYPES[dtype], self._hvd.Sum,
                                      f"detcoll.leaves.{'samples.' if kind else ''}{dtype}"
                                      f"{'.cuda' if device.type == 'cuda' else ''}")
            if self._op == self._hvd.Average:
                out.div_(size)
            elif self._postscale != 1.0:
                out.mul_(self._postscale)
            at = 0
            for p in params:
                n = p.numel()
                reduced = self._compression.decompress(out[at:at + n].view_as(p),
                                                       self._contexts[id(p)])
                if id(p) in self._sparse_dims:
                    p.grad = reduced.to_sparse(self._sparse_dims[id(p)])
                elif p.grad is None or p.grad.is_sparse:
                    p.grad = reduced.clone()
                else:
                    p.grad.copy_(reduced)
                at += n
        for p in self._params:
            self._leaves[id(p)] = []

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() after an explicit synchronize(): the step uses the gradients reduced
        there, without the warning."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                # Horovod reduces again here; the gradients already are every rank's, so detcoll
                # keeps them (a second Average would only round them again).
                warnings.warn(_STEP_AFTER_SYNCHRONIZE)
            else:
                self.synchronize()
        self._synchronized = False
        recorder = _record.active()
        if recorder is None:
            result = super(self.__class__, self).step(closure)
        else:
            recorder.in_step = True  # the optimizer's ops are the step's, not a micro-batch's
            try:
                result = super(self.__class__, self).step(closure)
            finally:
                recorder.in_step = False
            recorder.stepped(self, lambda p: self._names[id(p)], self._mode)
        self._steps += 1
        if self._check_every and self._steps % self._check_every == 0:
            from detcoll.debug import replicas

            params = [(self._names[id(p)], p) for group in self.param_groups
                      for p in group["params"]]
            replicas.check_named(
                replicas.named_tensors(dict(params), self, {id(p): n for n, p in params}),
                self._process_set, f"DistributedOptimizer (check_replicas_every, after step "
                f"{self._steps - 1}, counted from 0 as detcoll.debug diff counts)")
        return result

    def load_state_dict(self, *args, **kwargs):
        """As in Horovod, forgets the reductions in flight and the passes counted."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._params:
            self._delay[id(p)] = self._passes
            self._leaves[id(p)] = []
        return super(self.__class__, self).load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None,
                         check_replicas_every=0):
    """Wraps a torch optimizer so that step() uses the gradients reduced over every rank.
    Defaults as in Horovod: compression=Compression.none, op=Average. check_replicas_every=N
    (detcoll's): after every N-th step(), detcoll.debug.check_replicas on the parameters and the
    optimizer's state, which raises on every rank when the replicas have parted."""
    import detcoll.torch as hvd

    # Horovod checks the names before anything needs init().
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    _parameter_names(optimizer.param_groups, named_parameters)
    hvd._require_init("DistributedOptimizer")
    if process_set is None:
        process_set = hvd.global_process_set
    hvd.mpi_ops._placement(process_set, "DistributedOptimizer")  # added, and this rank in it
    if process_set.process_set_id != 0 and detcoll.get_mode() == "invariant":
        raise detcoll.InvalidArgumentError(
            "DistributedOptimizer: process_set is not supported in invariant mode (its exact "
            "reduction of leaves runs over every rank); use ordered mode, or every rank")
    if op is None:
        op = hvd.Average
    if compression is None:
        compression = hvd.Compression.none
    if gradient_predivide_factor != 1.0 and op != hvd.Average:
        raise detcoll.InvalidArgumentError(
            "gradient_predivide_factor not supported with op != Average")
    if not gradient_predivide_factor > 0.0:
        raise detcoll.InvalidArgumentError(
            f"gradient_predivide_factor must be positive, got {gradient_predivide_factor}")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        _check_groups(groups)
    if isinstance(check_replicas_every, bool) or not isinstance(check_replicas_every, int) or \
            check_replicas_every < 0:
        raise detcoll.InvalidArgumentError(
            "check_replicas_every must be a non-negative int (0: never), got "
            f"{check_replicas_every!r}")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               {k: v for k, v in _DistributedOptimizer.__dict__.items()
                if k not in ("__dict__", "__weakref__")})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._detcoll_setup(named_parameters, compression, backward_passes_per_step, op,
                           float(gradient_predivide_factor), sparse_as_dense, process_set)
    wrapped._check_every, wrapped._steps = check_replicas_every, 0
    return wrapped
