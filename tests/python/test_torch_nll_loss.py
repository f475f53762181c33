"""detcoll.torch.ops.nll_loss: each sample's loss as torch forms it, the sums in detcoll's fixed
tree, checked against the tree written out here; torch's results within rounding; bad arguments
refused by name; and through patch(), an unchanged CrossEntropyLoss on the CPU."""

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops


def wide(gen, *shape, dtype=torch.float32):
    sign = torch.randint(0, 2, shape, generator=gen).to(dtype) * 2 - 1
    exponent = torch.randint(-12, 13, shape, generator=gen).to(dtype)
    mantissa = torch.rand(shape, generator=gen, dtype=dtype) + 0.5
    return sign * mantissa * torch.pow(torch.tensor(2.0, dtype=dtype), exponent)


def tree_sum(values):
    """The README's tree, written out: chunks of 32 summed left to right from their first value,
    then pairwise level by level, an odd last sum passed up; in the values' dtype (float32 and
    float64 accumulate in themselves); an empty sequence sums to 0."""
    vals = list(values.reshape(-1))
    if not vals:
        return torch.zeros((), dtype=values.dtype)
    sums = []
    for start in range(0, len(vals), 32):
        acc = vals[start]
        for v in vals[start + 1:start + 32]:
            acc = acc + v
        sums.append(acc)
    while len(sums) > 1:
        sums = [sums[i] + sums[i + 1] if i + 1 < len(sums) else sums[i]
                for i in range(0, len(sums), 2)]
    return sums[0]


def bits(t):
    return t.contiguous().view({4: torch.int32, 8: torch.int64}[t.element_size()])


def case(seed, dtype, shape=(777, 13), ignored=True):
    gen = torch.Generator().manual_seed(seed)
    x = wide(gen, *shape, dtype=dtype)
    samples = (shape[0],) + tuple(shape[2:])
    target = torch.randint(0, shape[1], samples, generator=gen)  # heavy duplication
    if ignored:
        target.view(-1)[::7] = -100
    weight = wide(gen, shape[1], dtype=dtype).abs()
    return x, target, weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(777, 13), (5, 11, 6, 7)])
def test_the_sums_are_the_fixed_tree_of_torchs_per_sample_losses(dtype, shape):
    x, target, weight = case(3, dtype, shape)
    per_sample = F.nll_loss(x, target, weight, reduction="none")
    ours = ops.nll_loss(x, target, weight, reduction="none")
    assert torch.equal(bits(ours), bits(per_sample))  # one multiply and a sign per sample
    kept = target != -100
    weights = torch.where(kept, weight[torch.where(kept, target, 0)], torch.zeros((), dtype=dtype))
    summed = tree_sum(per_sample)
    assert torch.equal(bits(ops.nll_loss(x, target, weight, reduction="sum")), bits(summed))
    mean = summed / tree_sum(weights)
    assert torch.equal(bits(ops.nll_loss(x, target, weight)), bits(mean))
    tol = 1e-5 if dtype == torch.float32 else 1e-13
    for reduction in ("sum", "mean"):
        theirs = F.nll_loss(x, target, weight, reduction=reduction)
        assert torch.allclose(ops.nll_loss(x, target, weight, reduction=reduction), theirs,
                              rtol=tol, atol=0), reduction


def test_no_weight_a_single_sample_and_every_target_ignored():
    x, target, _ = case(5, torch.float64, ignored=False)
    assert torch.equal(ops.nll_loss(x, target, reduction="sum"),
                       tree_sum(F.nll_loss(x, target, reduction="none")))
    assert torch.equal(ops.nll_loss(x[0], target[0]), F.nll_loss(x[0], target[0]))
    none = torch.full_like(target, -100)
    assert torch.isnan(ops.nll_loss(x, none)) and torch.isnan(F.nll_loss(x, none))
    assert ops.nll_loss(x, none, reduction="sum") == 0
    assert ops.nll_loss(x, target, ignore_index=int(target[0])).isfinite()


def test_edges_torch_takes():
    x = torch.tensor([-0.5, -1.25, -2.0])
    w = torch.tensor([1.0, 2.0, 3.0])
    for reduction in (0, 1, 2):  # a lone sample: its weight is the total, unreduced too
        ours = ops.nll_loss(x, torch.tensor(1), w, reduction=["none", "mean", "sum"][reduction])
        theirs = torch.ops.aten.nll_loss_forward(x, torch.tensor(1), w, reduction, -100)
        assert torch.equal(ours, theirs[0])
        mine = dt._patch.PATCHABLE["nll_loss_forward"][1](x, torch.tensor(1), w, reduction, -100)
        assert torch.equal(mine[1], theirs[1]), reduction
    no_classes = torch.zeros(3, 0)
    assert torch.isnan(ops.nll_loss(no_classes, torch.full((3,), -100)))


def test_bad_arguments_are_refused_by_name():
    x, target, weight = case(7, torch.float32)
    bad = target.clone()
    bad[40] = 13
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"nll_loss: target\[40\] = 13 is out of range for 13 classes"):
        ops.nll_loss(x, bad)
    with pytest.raises(detcoll.InvalidArgumentError, match="weight must be a 1-D"):
        ops.nll_loss(x, target, weight[:5])
    with pytest.raises(detcoll.InvalidArgumentError, match="target must be an integer tensor"):
        ops.nll_loss(x, target.float())
    with pytest.raises(detcoll.InvalidArgumentError, match="target .776,. does not fit"):
        ops.nll_loss(x, target[:-1])
    with pytest.raises(detcoll.InvalidArgumentError, match="reduction 'avg'"):
        ops.nll_loss(x, target, reduction="avg")


def test_an_unchanged_cross_entropy_loss_runs_detcolls_sums():
    x, target, weight = case(11, torch.float32)
    image, pixels, _ = case(12, torch.float32, shape=(3, 13, 5, 6))
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight)
    with dt.patched(devices=("cpu",), ops=["nll_loss_forward", "nll_loss2d_forward"]):
        logits = x.clone().requires_grad_()
        loss = loss_fn(logits, target)
        loss.backward()
        dense = F.cross_entropy(image, pixels)
        calls = dt.patch_state()["calls"]
    assert calls == {"nll_loss_forward": 1, "nll_loss2d_forward": 1}
    logp = x.log_softmax(1)
    assert torch.equal(bits(loss.detach()), bits(ops.nll_loss(logp, target, weight)))
    assert torch.equal(bits(dense), bits(ops.nll_loss(image.log_softmax(1), pixels)))
    # The backward is torch's, given detcoll's total weight.
    _, total = torch.ops.aten.nll_loss_forward(logp, target, weight, 1, -100)
    ours_total = ops.sum(torch.where(target != -100, weight[target.clamp(min=0)],
                                     torch.zeros(())))
    grad_logp = torch.ops.aten.nll_loss_backward(torch.ones(()), logp, target, weight, 1, -100,
                                                 ours_total)
    expected = torch.ops.aten._log_softmax_backward_data(grad_logp, logp, 1, torch.float32)
    assert torch.equal(bits(logits.grad), bits(expected))
    assert torch.allclose(total, ours_total, rtol=1e-6)
