"""DistributedOptimizer: Horovod's wrapper, with gradients reduced by detcoll.

Ordered and native mode: each gradient is allreduced as soon as backward has accumulated it
(a hook on its accumulator), through the fusion engine, after every backward_passes_per_step
passes; step() waits for them. Invariant mode: each backward pass's gradient is one leaf. A hook
takes the pass's gradient before the framework accumulates it and leaves zeros behind, so float
accumulation never mixes leaves; step() reduces every leaf of every rank exactly. With V
micro-batches per step spread over P ranks (backward_passes_per_step = V / P), the summed
gradient is then the same for every P that divides V. op=Average keeps Horovod's meaning: the
sum divided by the world size.
"""

import contextlib

import torch

import detcoll
from detcoll import _detcoll


class _DistributedOptimizer:
    def _detcoll_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       predivide):
        import detcoll.torch as hvd

        self._hvd = hvd
        if backward_passes_per_step < 1:
            raise detcoll.InvalidArgumentError("backward_passes_per_step must be at least 1")
        if op not in (hvd.Sum, hvd.Average):
            raise detcoll.InvalidArgumentError("DistributedOptimizer reduces with Sum or Average")
        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = {id(p): n for n, p in named}
            if len(names) != len(named) or len(set(names.values())) != len(named):
                raise detcoll.InvalidArgumentError(
                    "named_parameters has duplicate parameters or names")
            missing = [i for i, p in enumerate(params) if id(p) not in names]
            if missing:
                raise detcoll.InvalidArgumentError(
                    f"named_parameters does not name {len(missing)} parameter(s) of the optimizer")
        else:
            names = {id(p): f"param.{i}" for i, p in enumerate(params)}
        self._params = [p for p in params if p.requires_grad]
        self._names = names
        self._passes = backward_passes_per_step
        self._op = op
        # Horovod's gradient_predivide_factor f: Average becomes a Sum of gradients scaled by
        # 1/f before and f/size after.
        self._prescale, self._postscale = 1.0, 1.0
        if op == hvd.Average and predivide != 1.0:
            self._op = hvd.Sum
            self._prescale, self._postscale = 1.0 / predivide, predivide / hvd.size()
        self._compression = compression
        self._mode = detcoll.get_mode()
        self._handles = {}
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        self._leaves = {id(p): [] for p in self._params}
        self._contexts = {}  # decompression context per parameter
        self._synchronized = False
        self._hooks = []
        for p in self._params:
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
            self._synchronized = False  # a new pass: the next step reduces again
            leaf = grad.detach().clone()
            if self._prescale != 1.0:
                leaf.mul_(self._prescale)
            leaf, self._contexts[id(p)] = self._compression.compress(leaf)
            self._leaves[id(p)].append(leaf.contiguous())
            return torch.zeros_like(grad)
        return hook

    # Ordered and native mode: allreduce once backward has accumulated the last pass.
    def _pass_check(self, p):
        def hook(grad):
            if self._delay[id(p)] == 0:
                raise detcoll.InvalidArgumentError(
                    f"the gradient of {self._names[id(p)]} was computed more than "
                    f"backward_passes_per_step={self._passes} times before step() or "
                    "synchronize(); raise backward_passes_per_step to accumulate more passes")
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
            raise detcoll.InvalidArgumentError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the gradients of that pass are "
                "already being reduced. Call zero_grad() before backward, or after step()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def _reduce_async(self, p):
        compressed, ctx = self._compression.compress(p.grad)
        compressed = compressed.contiguous()  # e.g. a channels_last gradient: reduce a copy
        handle = self._hvd.allreduce_async_(compressed, name=self._names[id(p)], op=self._op,
                                            prescale_factor=self._prescale,
                                            postscale_factor=self._postscale)
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
                        p.grad = torch.zeros_like(p)
                    self._reduce_async(p)
            for p in self._params:
                handle, compressed, ctx = self._handles[id(p)]
                reduced = self._hvd.synchronize(handle)
                if compressed is not p.grad:
                    p.grad.copy_(self._compression.decompress(reduced, ctx))
            self._handles.clear()
            for p in self._params:
                self._delay[id(p)] = self._passes
        self._synchronized = True

    def _reduce_leaves(self):
        if not self._params:
            return
        # A parameter that got no gradient in some pass (an unused branch) contributes zero
        # leaves there: zeros change neither the exact sum nor the scales.
        count = max(1, max(len(self._leaves[id(p)]) for p in self._params))
        for p in self._params:
            leaves = self._leaves[id(p)]
            while len(leaves) < count:
                leaf, self._contexts[id(p)] = self._compression.compress(
                    torch.zeros_like(p, memory_format=torch.contiguous_format))
                leaves.append(leaf)
        # One exact reduction per dtype over all parameters laid end to end: the invariant
        # mode's bits do not depend on the layout.
        by_dtype = {}
        for p in self._params:
            by_dtype.setdefault(self._leaves[id(p)][0].dtype, []).append(p)
        size = self._hvd.size()
        for dtype, params in by_dtype.items():
            leaves = [torch.cat([self._leaves[id(p)][l].reshape(-1) for p in params])
                      for l in range(count)]
            out = torch.empty_like(leaves[0])
            _detcoll.allreduce_leaves([t.data_ptr() for t in leaves], out.data_ptr(), out.numel(),
                                      self._hvd._DTYPES[dtype], self._hvd.Sum,
                                      f"detcoll.leaves.{dtype}")
            if self._op == self._hvd.Average:
                out.div_(size)
            elif self._postscale != 1.0:
                out.mul_(self._postscale)
            at = 0
            for p in params:
                n = p.numel()
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.copy_(self._compression.decompress(out[at:at + n].view_as(p),
                                                          self._contexts[id(p)]))
                at += n
        for p in self._params:
            self._leaves[id(p)] = []

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step after an explicit synchronize()."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        if not getattr(self, "_skip", False) and not self._synchronized:
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps a torch optimizer so that step() uses the gradients reduced over every rank."""
    import detcoll.torch as hvd

    hvd._require_init("DistributedOptimizer")
    # num_groups and groups only steer Horovod's fusion, which detcoll's engine does by itself;
    # sparse_as_dense: detcoll reduces dense gradients only.
    if process_set is not None:
        raise detcoll.InvalidArgumentError(
            "DistributedOptimizer: process sets are not supported; every rank takes part")
    if op is None:
        op = hvd.Average
    if compression is None:
        compression = hvd.Compression.none
    if op != hvd.Average and gradient_predivide_factor != 1.0:
        raise detcoll.InvalidArgumentError(
            "gradient_predivide_factor applies to op=Average only (as in Horovod)")
    if not gradient_predivide_factor > 0.0:
        raise detcoll.InvalidArgumentError(
            f"gradient_predivide_factor must be positive, got {gradient_predivide_factor}")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               {k: v for k, v in _DistributedOptimizer.__dict__.items()
                if k not in ("__dict__", "__weakref__")})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._detcoll_setup(named_parameters, compression, backward_passes_per_step, op,
                           float(gradient_predivide_factor))
    return wrapped
