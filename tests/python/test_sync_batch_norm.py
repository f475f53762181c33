"""detcoll.torch.sync_batch_norm.SyncBatchNorm under mpirun (np 1, 2 and 4).

Every rank regenerates the same global batch (seeded) and takes its contiguous share of the
samples. The layer's results are compared with a single-process reference computed here from the
whole batch: the per-sample leaves (detcoll.torch.ops.sum, whose tree depends on one sample
only) reduced by an independent emulation of the invariant mode (each leaf rounded onto its
channel's grid, exact sum with fractions.Fraction, one rounding to the dtype; docs/design.md,
"The invariant mode"), then the layer's elementwise formulas. Outputs, input gradients (gathered
in sample order) and running statistics must have the reference's bits, which do not depend on
the world size, so np 2 and np 4 give np 1's bits. Values are also checked against torch's own
batch norm within a tolerance.
"""

import hashlib
import math
import zlib
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as hvd
from detcoll.torch import ops
from detcoll.torch.sync_batch_norm import SyncBatchNorm, _group_size

C = 3
EPS = 1e-5
SHAPES = [(8, C), (8, C, 5, 7), (8, C, 11)]
DTYPES = [torch.float64, torch.float32]


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()  # shutdown runs at exit
    yield


@pytest.fixture(autouse=True)
def invariant():
    before = detcoll.get_mode()
    detcoll.set_mode("invariant")
    yield
    detcoll.set_mode(before)


# ---- data ----

def generator(label):
    return torch.Generator().manual_seed(zlib.crc32(label.encode()))  # the same on every rank


def global_batch(label, shape, dtype):
    """Non-integer values, each channel with its own offset and a scale 10^u, u in [-3, 3]."""
    g = generator(label)
    channels = shape[1]
    view = (1, channels) + (1,) * (len(shape) - 2)
    scale = torch.pow(10.0, torch.rand(channels, generator=g, dtype=torch.float64) * 6 - 3)
    offset = torch.randn(channels, generator=g, dtype=torch.float64) * 3
    x = (torch.randn(shape, generator=g, dtype=torch.float64) + offset.reshape(view))
    return (x * scale.reshape(view)).to(dtype)


def parameters(label, dtype, channels=C):
    g = generator(label)
    weight = (torch.rand(channels, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    bias = torch.randn(channels, generator=g, dtype=torch.float64).to(dtype)
    return weight, bias


def share(t, counts=None):
    """This rank's contiguous share of the samples (equal shares, or the given counts)."""
    if counts is None:
        assert t.shape[0] % hvd.size() == 0
        counts = [t.shape[0] // hvd.size()] * hvd.size()
    start = sum(counts[:hvd.rank()])
    return t[start:start + counts[hvd.rank()]].clone()


def bits(t):
    return t.contiguous().view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(bits(t).numpy().tobytes())
    return h.hexdigest()


# ---- the reference: the invariant mode's reduction, emulated independently ----

FORMATS = {torch.float64: (52, 1023), torch.float32: (23, 127)}  # mantissa bits, bias
HEADROOM = 16


def biased_exponent(v, dtype):
    mantissa_bits, bias = FORMATS[dtype]
    if v == 0:
        return 0
    _, e = math.frexp(v)  # |v| = m 2^e, m in [0.5, 1): the IEEE exponent is e - 1
    return max(1, e - 1 + bias)


def round_to(fr, dtype):
    """fr rounded once, to nearest even, to dtype (normal range), as a Python float."""
    if dtype == torch.float64:
        return float(fr)
    if fr == 0:
        return 0.0
    sign, mag = (-1, -fr) if fr < 0 else (1, fr)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    while Fraction(2) ** e > mag:
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    ulp = Fraction(2) ** (e - FORMATS[dtype][0])
    return sign * float(round(mag / ulp) * ulp)  # round(): half to even; exact in float64


def invariant_sum(leaves):
    """allreduce_leaves(SUM) in invariant mode over the rows of leaves ([L, K]): per element, the
    largest key over the leaves fixes the grid 2^(key - bias + 1 - 62 + H); each leaf rounded to
    it (half to even), summed exactly, rounded once."""
    dtype = leaves.dtype
    out = []
    for column in leaves.t().tolist():
        key = max(biased_exponent(v, dtype) for v in column)
        if key == 0:
            out.append(0.0)
            continue
        grid = Fraction(2) ** (key - FORMATS[dtype][1] + 1 - 62 + HEADROOM)
        total = sum(round(Fraction(v) / grid) for v in column)
        out.append(round_to(total * grid, dtype))
    return torch.tensor(out, dtype=dtype)


def per_channel(v):
    return v.reshape(1, -1, 1)


def grouped(leaves, g):
    if g == 1:
        return leaves
    n, k = leaves.shape
    groups = -(-n // g)
    padded = torch.cat([leaves, torch.zeros((groups * g - n, k), dtype=leaves.dtype)])
    return ops.sum(padded.reshape(groups, g, k), dim=1)


def reference(x, dy, weight, bias, g=1):
    """Statistics, output and input gradient of the whole batch, as the layer's definition says
    they are: invariant sums of per-sample leaves and the layer's elementwise formulas."""
    n, c = x.shape[0], x.shape[1]
    x3 = x.reshape(n, c, math.prod(x.shape[2:]))
    total = x3.shape[0] * x3.shape[2]
    count = torch.full((c,), float(total), dtype=x.dtype)
    s1 = invariant_sum(grouped(ops.sum(x3, dim=2), g))
    mean = s1 / count
    if x.dtype == torch.float64:  # Python's division: one correctly rounded operation
        assert mean.tolist() == [v / total for v in s1.tolist()]
    xmu = x3 - per_channel(mean)
    s2 = invariant_sum(grouped(ops.sum(xmu * xmu, dim=2), g))
    var, unbiased = s2 / count, s2 / (count - 1)
    invstd = torch.ones_like(var) / torch.sqrt(var + EPS)
    y = xmu * per_channel(invstd)
    if weight is not None:
        y = y * per_channel(weight)
    if bias is not None:
        y = y + per_channel(bias)
    out = {"mean": mean, "var": var, "unbiased": unbiased, "invstd": invstd,
           "y": y.reshape(x.shape)}
    if dy is not None:
        dy3 = dy.reshape(x3.shape)
        sdy, sdx = ops.sum(dy3, dim=2), ops.sum(dy3 * xmu, dim=2)
        sums = invariant_sum(grouped(torch.cat([sdy, sdx], dim=1), g))
        k = invstd * invstd * (sums[c:] / count)
        scale = invstd * weight if weight is not None else invstd
        gi = ((dy3 - per_channel(sums[:c] / count)) - xmu * per_channel(k)) * per_channel(scale)
        out.update(grad_input=gi.reshape(x.shape), sdy=sdy, sdx=sdx)
    return out


def close(a, b, dtype):
    tol = {torch.float64: 1e-10, torch.float32: 1e-4}[dtype]
    return torch.allclose(a.to(torch.float64), b.to(torch.float64), rtol=tol, atol=tol)


def layer(dtype, weight=None, bias=None, **kwargs):
    bn = SyncBatchNorm(C, **kwargs).to(dtype)
    with torch.no_grad():
        if weight is not None:
            bn.weight.copy_(weight)
            bn.bias.copy_(bias)
    return bn


def train_step(bn, x, dy):
    x = x.clone().requires_grad_()
    y = bn(x)
    y.backward(dy)
    return y.detach(), x.grad


# ---- world-size invariance in invariant mode ----

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_backward_and_running_stats_have_the_reference_bits(shape, dtype):
    label = f"{shape}/{dtype}"
    x, dy = global_batch("x" + label, shape, dtype), global_batch("dy" + label, shape, dtype)
    weight, bias = parameters("p" + label, dtype)
    ref = reference(x, dy, weight, bias)

    bn = layer(dtype, weight, bias)
    y, grad = train_step(bn, share(x), share(dy))
    y_all, grad_all = hvd.allgather(y, name="sbn.y"), hvd.allgather(grad, name="sbn.grad")

    assert same_bits(y_all, ref["y"])
    assert same_bits(grad_all, ref["grad_input"])
    running_mean = torch.zeros(C, dtype=dtype) * 0.9 + ref["mean"] * 0.1
    running_var = torch.ones(C, dtype=dtype) * 0.9 + ref["unbiased"] * 0.1
    assert same_bits(bn.running_mean, running_mean)
    assert same_bits(bn.running_var, running_var)
    assert int(bn.num_batches_tracked) == 1

    # The parameters' gradients are this rank's local sums (Horovod's), from the local leaves.
    mine = slice(hvd.rank() * (shape[0] // hvd.size()), (hvd.rank() + 1) * (shape[0] // hvd.size()))
    assert same_bits(bn.weight.grad, ops.sum(ref["sdx"][mine], dim=0) * ref["invstd"])
    assert same_bits(bn.bias.grad, ops.sum(ref["sdy"][mine], dim=0))

    # A digest of everything the layer produced: the same at every world size, since it is the
    # digest of the reference, which is computed in one process from the whole batch.
    assert digest(y_all, grad_all, bn.running_mean, bn.running_var) == digest(
        ref["y"], ref["grad_input"], running_mean, running_var)

    # Values: torch's batch norm over the whole batch.
    xt = x.clone().requires_grad_()
    rm, rv = torch.zeros(C, dtype=dtype), torch.ones(C, dtype=dtype)
    yt = F.batch_norm(xt, rm, rv, weight, bias, True, 0.1, EPS)
    yt.backward(dy)
    assert close(y_all, yt, dtype)
    assert close(grad_all, xt.grad, dtype)
    assert close(bn.running_mean, rm, dtype) and close(bn.running_var, rv, dtype)
    wt, bt = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    F.batch_norm(x, None, None, wt, bt, True, 0.0, EPS).backward(dy)
    total_weight_grad = hvd.allreduce(bn.weight.grad, op=hvd.Sum, name="sbn.gw")
    total_bias_grad = hvd.allreduce(bn.bias.grad, op=hvd.Sum, name="sbn.gb")
    assert close(total_weight_grad, wt.grad, dtype) and close(total_bias_grad, bt.grad, dtype)


def test_uneven_shares_and_an_empty_rank_give_the_same_bits():
    """The invariant sums depend on the multiset of leaves only: any split, a rank with no
    samples included (it contributes one leaf of zeros), gives the reference's bits."""
    shape, dtype = (10, C, 4, 3), torch.float64
    x, dy = global_batch("uneven.x", shape, dtype), global_batch("uneven.dy", shape, dtype)
    weight, bias = parameters("uneven.p", dtype)
    ref = reference(x, dy, weight, bias)
    splits = {1: [[10]], 2: [[3, 7], [0, 10]], 4: [[4, 0, 5, 1], [0, 0, 10, 0]]}
    other = [[11 - hvd.size()] + [1] * (hvd.size() - 1)]  # any other world size
    for i, counts in enumerate(splits.get(hvd.size(), other)):
        bn = layer(dtype, weight, bias)
        y, grad = train_step(bn, share(x, counts), share(dy, counts))
        assert same_bits(hvd.allgather(y, name=f"sbn.uy{i}"), ref["y"])
        assert same_bits(hvd.allgather(grad, name=f"sbn.ugrad{i}"), ref["grad_input"])
        assert same_bits(bn.running_var, torch.ones(C, dtype=dtype) * 0.9 + ref["unbiased"] * 0.1)
        if counts[hvd.rank()] == 0:
            assert y.shape == (0,) + shape[1:] and grad.shape == (0,) + shape[1:]
            assert bn.weight.grad.abs().sum() == 0 and bn.bias.grad.abs().sum() == 0


def test_leaves_are_grouped_only_past_the_limits():
    assert _group_size([8]) == 1 and _group_size([0, 8, 0, 0]) == 1
    assert _group_size([65535]) == 1 and _group_size([65536]) == 2
    assert _group_size([32768, 32768]) == 1 and _group_size([32768, 32769]) == 2
    assert _group_size([32768, 32768, 0]) == 2  # the empty rank's zero leaf counts
    assert _group_size([200000]) == 4


def test_grouped_leaves_past_65536_samples_keep_the_bits():
    """70000 samples: leaves of 2 samples at every world size here (each share is even)."""
    shape, dtype = (70000, 2), torch.float32
    x, dy = global_batch("big.x", shape, dtype), global_batch("big.dy", shape, dtype)
    assert _group_size([shape[0] // hvd.size()] * hvd.size()) == 2
    bn = SyncBatchNorm(2, affine=False)
    y, grad = train_step(bn, share(x), share(dy))
    n = shape[0] // hvd.size()
    ref = reference(x, dy, None, None, g=2)
    assert same_bits(y, ref["y"][hvd.rank() * n:(hvd.rank() + 1) * n])
    assert same_bits(grad, ref["grad_input"][hvd.rank() * n:(hvd.rank() + 1) * n])


# ---- ordered mode, running statistics, eval, options ----

def test_ordered_mode_is_reproducible_run_to_run():
    detcoll.set_mode("ordered")
    shape, dtype = (8, C, 6, 5), torch.float32
    x, dy = global_batch("ordered.x", shape, dtype), global_batch("ordered.dy", shape, dtype)
    weight, bias = parameters("ordered.p", dtype)
    runs = []
    for _ in range(2):
        bn = layer(dtype, weight, bias)
        y, grad = train_step(bn, share(x), share(dy))
        runs.append(digest(y, grad, bn.running_mean, bn.running_var, bn.weight.grad,
                           bn.bias.grad))
    assert runs[0] == runs[1]
    ref = reference(x, dy, weight, bias)
    n = shape[0] // hvd.size()
    assert close(y, ref["y"][hvd.rank() * n:(hvd.rank() + 1) * n], dtype)


def test_running_stats_momentum_none_and_eval():
    """Three steps with momentum=None (cumulative average), then eval uses the running
    statistics: plain F.batch_norm, bit for bit."""
    shape, dtype = (8, C, 5), torch.float64
    bn = SyncBatchNorm(C, momentum=None).to(dtype)
    rm, rv = torch.zeros(C, dtype=dtype), torch.ones(C, dtype=dtype)
    for step in range(1, 4):
        x = global_batch(f"cumulative{step}", shape, dtype)
        ref = reference(x, None, None, None)
        y = bn(share(x))
        factor = 1.0 / step
        rm = rm * (1.0 - factor) + ref["mean"] * factor
        rv = rv * (1.0 - factor) + ref["unbiased"] * factor
        assert int(bn.num_batches_tracked) == step
        assert same_bits(bn.running_mean, rm) and same_bits(bn.running_var, rv)
    # torch's cumulative average over the same three batches, within a tolerance
    torch_bn = torch.nn.BatchNorm1d(C, momentum=None).to(dtype)
    for step in range(1, 4):
        torch_bn(global_batch(f"cumulative{step}", shape, dtype))
    assert close(bn.running_mean, torch_bn.running_mean, dtype)
    assert close(bn.running_var, torch_bn.running_var, dtype)

    bn.eval()
    x = share(global_batch("eval", shape, dtype))
    with torch.no_grad():
        y = bn(x)
    assert same_bits(y, F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                                     False, 0.0, EPS))
    assert int(bn.num_batches_tracked) == 3


def test_affine_false_and_no_running_stats():
    shape, dtype = (8, C, 7), torch.float32
    x, dy = global_batch("plain.x", shape, dtype), global_batch("plain.dy", shape, dtype)
    bn = SyncBatchNorm(C, affine=False, track_running_stats=False)
    assert bn.weight is None and bn.running_mean is None
    y, grad = train_step(bn, share(x), share(dy))
    ref = reference(x, dy, None, None)
    assert same_bits(hvd.allgather(y, name="sbn.py"), ref["y"])
    assert same_bits(hvd.allgather(grad, name="sbn.pgrad"), ref["grad_input"])
    # eval without running statistics: the local batch's statistics, as Horovod's layer
    bn.eval()
    local = share(x)
    assert same_bits(bn(local), F.batch_norm(local, None, None, None, None, True, 0.0, EPS))


def test_half_precision_input_is_computed_in_float32():
    shape = (8, C, 4)
    x, dy = global_batch("half.x", shape, torch.float32), global_batch("half.dy", shape,
                                                                        torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        xh, dyh = x.to(dtype), dy.to(dtype)
        bn = SyncBatchNorm(C, affine=False)
        y, grad = train_step(bn, share(xh), share(dyh))
        assert y.dtype == dtype and grad.dtype == dtype
        ref = reference(xh.float(), dyh.float(), None, None)
        assert same_bits(hvd.allgather(y, name="sbn.hy"), ref["y"].to(dtype))
        assert same_bits(hvd.allgather(grad, name="sbn.hg"), ref["grad_input"].to(dtype))
        assert bn.running_mean.dtype == torch.float32


def test_gradcheck_at_one_rank():
    if hvd.size() != 1:
        pytest.skip("gradcheck perturbs one rank's input alone; run at np 1")
    from detcoll.torch.sync_batch_norm import _SyncBatchNorm
    for shape in [(6, C), (4, C, 3, 2)]:
        x = global_batch(f"gradcheck{shape}", shape, torch.float64).requires_grad_()
        weight, bias = (t.requires_grad_() for t in parameters("gradcheck", torch.float64))
        fn = lambda x, w, b: _SyncBatchNorm.apply(x, w, b, None, None, EPS, 0.0)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x, weight, bias))


# ---- refusals ----

def test_refuses_non_cpu_input_naming_the_limitation():
    x = torch.empty((4, C), device="meta")  # as a CUDA tensor would be: not on the CPU
    bn = SyncBatchNorm(C)
    with pytest.raises(detcoll.InvalidArgumentError, match="CUDA tensors are not supported"):
        bn(x)
    bn.eval()
    with pytest.raises(detcoll.InvalidArgumentError, match="CPU tensors only"):
        bn(x)


def test_refuses_input_below_two_dimensions():
    bn = SyncBatchNorm(C)
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"expected at least 2D input \(got 1D input\)"):
        bn(torch.ones(C))


def test_a_check_failing_on_one_rank_fails_every_rank():
    """Rank 0 passes 1-D input, the others a valid batch: every rank raises, none waits."""
    bn = SyncBatchNorm(C)
    x = torch.ones(C) if hvd.rank() == 0 else share(global_batch("onefail", (8, C), torch.float32))
    with pytest.raises(detcoll.InvalidArgumentError, match="expected at least 2D input"):
        bn(x)
    # and the next collective still pairs up
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="sbn.after").item() == hvd.size()


def test_a_single_value_per_channel_is_refused_on_every_rank():
    bn = SyncBatchNorm(C)
    x = torch.ones((1, C)) if hvd.rank() == 0 else torch.ones((0, C))
    with pytest.raises(detcoll.InvalidArgumentError, match="more than 1 value per channel"):
        bn(x)


def test_with_the_distributed_optimizer_in_ordered_mode():
    """Training steps of Linear -> SyncBatchNorm -> Linear under DistributedOptimizer (whose
    hooks enqueue asynchronous allreduces while the layer's backward makes its blocking one):
    the ranks stay paired and two runs give the same weights."""
    detcoll.set_mode("ordered")

    def run():
        torch.manual_seed(7)
        model = torch.nn.Sequential(torch.nn.Linear(4, C), SyncBatchNorm(C), torch.nn.ReLU(),
                                    torch.nn.Linear(C, 1))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        for step in range(3):
            x = share(global_batch(f"train{step}", (8, 4), torch.float32))
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        return digest(*[p.detach() for p in model.parameters()], *model[1].buffers())

    assert run() == run()


# ---- sample leaves: parameter gradients that do not depend on the split ----

def leaf_optimizer(module):
    """An invariant DistributedOptimizer (op=Sum) over `module` made of sample leaves."""
    hvd.sample_leaves(module)
    return hvd.DistributedOptimizer(torch.optim.SGD(module.parameters(), lr=0.0),
                                    named_parameters=module.named_parameters(), op=hvd.Sum)


@pytest.mark.parametrize("counts_of", ["even", "uneven"])
def test_sync_batch_norm_weight_and_bias_gradients_are_invariant_sums_of_sample_leaves(counts_of):
    """Under sample_leaves and an invariant DistributedOptimizer, the weight's gradient is the
    invariant sum over the global batch of each sample's invstd * sum(dy * (x - mean)), and the
    bias's of each sample's sum(dy): the reference's bits at every world size and split."""
    shape, dtype = (8, C, 3, 2), torch.float64
    x, dy = global_batch("leaves.x", shape, dtype), global_batch("leaves.dy", shape, dtype)
    weight, bias = parameters("leaves.p", dtype)
    ref = reference(x, dy, weight, bias)
    counts = None
    if counts_of == "uneven":
        counts = [8 - hvd.size() + 1] + [1] * (hvd.size() - 1)
    bn = layer(dtype, weight, bias)
    opt = leaf_optimizer(bn)
    train_step(bn, share(x, counts), share(dy, counts))
    assert bn.weight.grad is None  # every sample's part went to the optimizer as a leaf
    opt.synchronize()
    assert same_bits(bn.weight.grad, invariant_sum(ref["sdx"] * ref["invstd"].reshape(1, -1)))
    assert same_bits(bn.bias.grad, invariant_sum(ref["sdy"]))


def per_sample_gradients(make, x, dy):
    """Each sample's parameter gradients, computed alone: a fresh module, its forward on that
    sample, backward with that sample's output gradient. [N, numel] per parameter name."""
    grads = {}
    for n in range(x.shape[0]):
        module = make()
        module(x[n:n + 1]).backward(dy[n:n + 1])
        for name, p in module.named_parameters():
            grads.setdefault(name, []).append(p.grad.reshape(-1))
    return {name: torch.stack(g) for name, g in grads.items()}


def assert_leaves_equal_per_sample_reference(make, x, dy, run=None):
    """Each parameter's reduced gradient, from a converted module (make()) run on this rank's
    share of x and backward with its share of dy, has the bits of the invariant sum of the
    gradients that each sample gives alone. run(module, x) replaces module(x) where the test
    wraps the call (checkpointing)."""
    expected = {name: invariant_sum(g) for name, g in per_sample_gradients(make, x, dy).items()}
    module = make()
    opt = leaf_optimizer(module)
    out = run(module, share(x)) if run else module(share(x))
    out.backward(share(dy))
    opt.synchronize()
    for name, p in module.named_parameters():
        assert same_bits(p.grad.reshape(-1), expected[name]), name


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_modules_with_parameters_give_invariant_sums_of_per_sample_gradients(kind):
    """sample_leaves on a Linear and a Conv2d: each parameter's reduced gradient is the invariant
    sum of the gradients that each sample gives alone (computed here module by module), so it
    is the same at every world size."""
    dtype = torch.float64
    shape_in, shape_out = ((8, 5), (8, 3)) if kind == "linear" else ((8, 2, 5, 4), (8, 3, 5, 4))

    def make():
        torch.manual_seed(5)
        module = torch.nn.Linear(5, 3) if kind == "linear" else torch.nn.Conv2d(2, 3, 3, padding=1)
        return module.to(dtype)

    x, dy = global_batch(f"{kind}.x", shape_in, dtype), global_batch(f"{kind}.dy", shape_out, dtype)
    assert_leaves_equal_per_sample_reference(make, x, dy)


def test_a_parameter_used_outside_its_module_is_refused_in_backward():
    """A weight tied to another use (here the embedding's weight as the output layer) gets part
    of its gradient as a sum over the rank's samples: the invariant optimizer refuses it."""
    emb = torch.nn.Embedding(5, 3).to(torch.float64)
    opt = leaf_optimizer(torch.nn.ModuleDict({"emb": emb}))
    tokens = torch.tensor([[1, 2], [3, 4], [0, 1], [2, 2]])
    logits = F.linear(emb(tokens), emb.weight)  # the tied use, outside emb's forward
    with pytest.raises(detcoll.InvalidArgumentError, match="'emb.weight'.*outside its module"):
        logits.sum().backward()
    del opt


@pytest.mark.parametrize("activation", [torch.nn.SiLU, torch.nn.ELU, torch.nn.GELU])
def test_activations_are_computed_per_chunk(activation):
    """torch computes SiLU, ELU and tanh-GELU with other bits in a kernel's vectorized body than
    in its scalar tail; run per chunk, a sample's values (and so the leaves) are the ones it
    gets computed alone, whatever the rank's batch."""
    dtype = torch.float32
    act = activation(approximate="tanh") if activation is torch.nn.GELU else activation()

    def make():
        torch.manual_seed(8)
        return torch.nn.Sequential(torch.nn.Linear(7, 13), act, torch.nn.Linear(13, 3)).to(dtype)

    # Values where these functions are not saturated (their approximations differ there), and 13
    # features, so that a rank's batch and a sample alone put different elements in the kernels'
    # vectorized bodies and scalar tails.
    g = generator("act")
    x = torch.randn((8, 7), generator=g, dtype=dtype) * 2
    dy = torch.randn((8, 3), generator=g, dtype=dtype)
    assert_leaves_equal_per_sample_reference(make, x, dy)


def test_checkpointed_and_in_place_modules_give_the_same_leaves():
    """torch.utils.checkpoint (reentrant) runs the forward without gradients first, then again
    with them: chunked modules must give a sample the same values both times. In-place
    activations run on copies of their chunks. The gradients equal the per-sample reference."""
    from torch.utils.checkpoint import checkpoint
    dtype = torch.float32

    def make():
        torch.manual_seed(12)
        return torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(inplace=True),
                                   torch.nn.Mish(), torch.nn.Linear(13, 3)).to(dtype)

    g = generator("ckpt")
    x = torch.randn((8, 7), generator=g, dtype=dtype) * 2
    dy = torch.randn((8, 3), generator=g, dtype=dtype)
    # The first layers checkpointed: the last layer sees the values of their first, gradient-free
    # forward, and its gradient shows them (Mish over this batch whole gives other bits in 6 of
    # its values than per sample, so a forward that skipped chunking without gradients fails).
    assert_leaves_equal_per_sample_reference(
        make, x, dy, run=lambda model, xs: model[3](checkpoint(model[:3], xs.requires_grad_())))


def test_a_copy_of_a_converted_model_runs_its_own_parameters():
    import copy
    model = hvd.sample_leaves(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.SiLU()))
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin[0].weight.zero_()
        twin[0].bias.fill_(7.0)
    x = torch.ones(3, 2)
    assert torch.equal(twin(x), torch.nn.functional.silu(torch.full((3, 2), 7.0)))
    assert not torch.equal(model(x), twin(x))


def test_refusals_do_not_depend_on_the_rank_s_share():
    """A rank with one chunk or none refuses what a rank with several refuses."""
    for batch in (1, 2, 5):
        counting = hvd.sample_leaves(_Counting(), samples_per_leaf=2)
        with pytest.raises(detcoll.InvalidArgumentError, match="changed its buffer"):
            counting(torch.ones(batch, 2))
        rnn = hvd.sample_leaves(torch.nn.GRU(2, 2, batch_first=True), samples_per_leaf=2)
        with pytest.raises(detcoll.InvalidArgumentError, match="must return one tensor"):
            rnn(torch.ones(batch, 4, 2))
    assert hvd.sample_leaves(torch.nn.Sigmoid())(torch.tensor(0.5)).item() == \
        torch.sigmoid(torch.tensor(0.5)).item()  # an activation on a scalar: no samples


def test_a_sync_batch_norm_in_eval_mode_gives_sample_leaves():
    """Frozen statistics, trainable affine: in eval mode the layer runs per chunk with taps, so
    its weight and bias gradients are leaves too (the per-sample reference's sums)."""
    dtype = torch.float64
    weight, bias = parameters("evalbn.p", dtype)

    def make():
        bn = layer(dtype, weight, bias)
        bn.eval()
        return bn

    x = global_batch("evalbn.x", (8, C, 3), dtype)
    dy = global_batch("evalbn.dy", (8, C, 3), dtype)
    assert_leaves_equal_per_sample_reference(make, x, dy)


def test_without_an_invariant_optimizer_the_taps_give_autograd_its_gradient():
    """Ordered mode: sample_leaves changes nothing but the forward's chunks; the gradient reaches
    .grad and agrees with the plain module's within rounding."""
    detcoll.set_mode("ordered")
    torch.manual_seed(9)
    plain = torch.nn.Linear(4, 2).to(torch.float64)
    chunked = hvd.sample_leaves(torch.nn.Linear(4, 2).to(torch.float64))
    chunked.load_state_dict(plain.state_dict())
    x = global_batch("taps.x", (6, 4), torch.float64)
    plain(x).square().sum().backward()
    chunked(x).square().sum().backward()
    for a, b in zip(plain.parameters(), chunked.parameters()):
        assert b.grad is not None and close(a.grad, b.grad, torch.float64)


class _Scaled(torch.nn.Module):
    """A container with a parameter of its own beside a submodule."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(2, 2)
        self.gain = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.inner(x) * self.gain


class _Counting(torch.nn.Linear):
    """A module whose forward changes a buffer."""

    def __init__(self):
        super().__init__(2, 2)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return super().forward(x)


def test_sample_leaves_refusals():
    """What sample_leaves cannot take per chunk is refused, naming the module."""
    with pytest.raises(detcoll.InvalidArgumentError, match=r"'1' \(BatchNorm1d\).*SyncBatchNorm"):
        hvd.sample_leaves(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)))
    with pytest.raises(detcoll.InvalidArgumentError, match="BatchNorm2d"):  # without parameters
        hvd.sample_leaves(torch.nn.Sequential(torch.nn.BatchNorm2d(2, affine=False)))
    with pytest.raises(detcoll.InvalidArgumentError, match="running statistics"):
        hvd.sample_leaves(torch.nn.InstanceNorm1d(2, affine=True, track_running_stats=True))
    with pytest.raises(detcoll.InvalidArgumentError, match="parameters of its own beside"):
        hvd.sample_leaves(torch.nn.Sequential(_Scaled()))
    counting = hvd.sample_leaves(_Counting())
    with pytest.raises(detcoll.InvalidArgumentError, match="changed its buffer 'calls'"):
        counting(torch.ones(3, 2))
    assert counting.calls.item() == 1  # stopped after the first chunk
    linear = hvd.sample_leaves(torch.nn.Linear(2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="got no positional argument"):
        linear(input=torch.ones(3, 2))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(detcoll.InvalidArgumentError, match="samples_per_leaf must be"):
            hvd.sample_leaves(torch.nn.Linear(2, 2), bad)
    with pytest.raises(detcoll.InvalidArgumentError, match="expected a torch.nn.Module"):
        hvd.sample_leaves(lambda x: x)
    once = hvd.sample_leaves(torch.nn.Linear(2, 2), 2)
    with pytest.raises(detcoll.InvalidArgumentError, match="another samples_per_leaf"):
        hvd.sample_leaves(once, 3)
    rnn = hvd.sample_leaves(torch.nn.GRU(2, 2, batch_first=True))  # returns a tuple
    with pytest.raises(detcoll.InvalidArgumentError, match="must return one tensor"):
        rnn(torch.ones(3, 4, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="samples in dimension 0"):
        hvd.sample_leaves(torch.nn.Linear(2, 2))(torch.ones(()))
