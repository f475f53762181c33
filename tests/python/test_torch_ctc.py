"""detcoll.torch.ops.ctc_loss_backward (ctc_loss's backward): against a float64 loop written here
(the forward-backward recursions in probabilities) and torch's CPU kernel, for padded and
concatenated targets with repeated labels, empty targets, short inputs and zero_infinity; through
patch(), F.ctc_loss's unchanged backward; bad arguments refused by name."""

import math

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import ops


def loop_gradient(log_probs, targets, input_lengths, target_lengths, blank, grad):
    """d(-log p(l|x)) / d log_probs times grad, by the textbook recursions, float64."""
    steps, batch, classes = log_probs.shape
    y = log_probs.double().exp()
    out = torch.zeros(steps, batch, classes, dtype=torch.float64)
    for b in range(batch):
        n, label = input_lengths[b], [int(v) for v in targets[b][:target_lengths[b]]]
        ext = [blank]
        for c in label:
            ext += [c, blank]
        width = len(ext)
        alpha = [[0.0] * width for _ in range(n)]
        beta = [[0.0] * width for _ in range(n)]
        if n == 0:
            continue
        alpha[0][0] = float(y[0, b, ext[0]])
        if width > 1:
            alpha[0][1] = float(y[0, b, ext[1]])
        for t in range(1, n):
            for s in range(width):
                a = alpha[t - 1][s] + (alpha[t - 1][s - 1] if s >= 1 else 0.0)
                if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                    a += alpha[t - 1][s - 2]
                alpha[t][s] = a * float(y[t, b, ext[s]])
        beta[n - 1][width - 1] = float(y[n - 1, b, ext[-1]])
        if width > 1:
            beta[n - 1][width - 2] = float(y[n - 1, b, ext[-2]])
        for t in range(n - 2, -1, -1):
            for s in range(width):
                v = beta[t + 1][s] + (beta[t + 1][s + 1] if s + 1 < width else 0.0)
                if s + 2 < width and ext[s] != blank and ext[s] != ext[s + 2]:
                    v += beta[t + 1][s + 2]
                beta[t][s] = v * float(y[t, b, ext[s]])
        p = alpha[n - 1][width - 1] + (alpha[n - 1][width - 2] if width > 1 else 0.0)
        for t in range(n):
            for c in range(classes):
                occupancy = sum(alpha[t][s] * beta[t][s] for s in range(width) if ext[s] == c)
                out[t, b, c] = (float(y[t, b, c]) - occupancy / (p * float(y[t, b, c]))) \
                    * float(grad[b])
    return out


def problem(seed, dtype, concatenated):
    gen = torch.Generator().manual_seed(seed)
    steps, batch, classes = 9, 4, 4
    log_probs = (torch.randn(steps, batch, classes, generator=gen, dtype=dtype) * 2) \
        .log_softmax(2)
    target_lengths = [3, 0, 4, 2]
    input_lengths = [9, 5, 9, 6]
    targets = torch.randint(1, 3, (batch, 5), generator=gen)          # repeats: 1 1, 2 2
    grad = torch.rand(batch, generator=gen, dtype=dtype) + 0.5
    flat = torch.cat([targets[b, :n] for b, n in enumerate(target_lengths)])
    return log_probs, (flat if concatenated else targets), targets, input_lengths, \
        target_lengths, grad


@pytest.mark.parametrize("concatenated", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_against_a_loop_and_torchs_cpu_kernel(dtype, concatenated):
    lp, targets, padded, il, tl, grad = problem(3 + concatenated, dtype, concatenated)
    nll, alpha = torch.ops.aten._ctc_loss(lp, targets, il, tl, 0, False)
    ours = ops.ctc_loss_backward(grad, lp, targets, il, tl, nll, alpha, 0)
    assert ours.dtype == dtype
    reference = loop_gradient(lp, padded, il, tl, 0, grad)
    tolerance = 1e-12 if dtype == torch.float64 else 2e-6     # one rounding from float64
    assert (ours.double() - reference).abs().max() <= tolerance
    theirs = torch.ops.aten._ctc_loss_backward(grad, lp, targets, il, tl, nll, alpha, 0)
    assert (ours.double() - theirs.double()).abs().max() <= 10 * tolerance
    assert torch.equal(ours, ops.ctc_loss_backward(grad, lp, targets, il, tl, nll, alpha, 0))
    assert not ours[5:, 1].any() and not ours[6:, 3].any()   # past the input lengths


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_an_unchanged_ctc_loss_runs_ours_through_patch(reduction):
    lp, targets, padded, il, tl, _ = problem(8, torch.float32, False)
    leaf = lp.detach().clone().requires_grad_()
    F.ctc_loss(leaf, targets, torch.tensor(il), torch.tensor(tl), reduction=reduction).backward()
    theirs = leaf.grad
    leaf = lp.detach().clone().requires_grad_()
    with dt.patched(devices=("cpu",)):
        F.ctc_loss(leaf, targets, torch.tensor(il), torch.tensor(tl),
                   reduction=reduction).backward()
        calls = dt.patch_state()["calls"]
    assert sum(v for k, v in calls.items() if k.startswith("_ctc_loss_backward")) == 1
    assert torch.allclose(leaf.grad, theirs, rtol=0, atol=2e-6)


def test_zero_infinity_zeroes_impossible_alignments():
    gen = torch.Generator().manual_seed(9)
    lp = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64).log_softmax(2)
    targets = torch.tensor([[1, 1, 1], [2, 3, 0]])     # 1 1 1 needs 5 steps; 3 are given
    il, tl = [3, 3], [3, 2]
    nll, alpha = torch.ops.aten._ctc_loss(lp, targets, il, tl, 0, True)
    assert math.isinf(float(nll[0]))
    ours = ops.ctc_loss_backward(torch.ones(2, dtype=torch.float64), lp, targets, il, tl, nll,
                                 alpha, 0, True)
    assert not ours[:, 0].any()
    reference = loop_gradient(lp[:, 1:], targets[1:], il[1:], tl[1:], 0, torch.ones(1))
    assert (ours[:, 1] - reference[:, 0]).abs().max() <= 1e-12


def test_bad_arguments_are_refused_by_name():
    lp = torch.zeros(4, 2, 3).log_softmax(2)
    targets = torch.tensor([[1, 2], [2, 1]])
    nll, alpha = torch.ops.aten._ctc_loss(lp, targets, [4, 4], [2, 2], 0, False)
    grad = torch.ones(2)
    call = lambda **kw: ops.ctc_loss_backward(  # noqa: E731
        kw.get("grad", grad), kw.get("lp", lp), kw.get("targets", targets),
        kw.get("il", [4, 4]), kw.get("tl", [2, 2]), nll, kw.get("alpha", alpha),
        kw.get("blank", 0))
    with pytest.raises(detcoll.InvalidArgumentError, match="blank 3 is not one of 3"):
        call(blank=3)
    with pytest.raises(detcoll.InvalidArgumentError, match="input_lengths .* must lie in"):
        call(il=[5, 4])
    with pytest.raises(detcoll.InvalidArgumentError, match="1 input_lengths for a batch of 2"):
        call(il=[4])
    with pytest.raises(detcoll.InvalidArgumentError, match=r"input_lengths \[4, 3.5\] must be"):
        call(il=[4, 3.5])
    with pytest.raises(detcoll.InvalidArgumentError, match="target_lengths has dtype torch.float32"):
        call(tl=torch.tensor([2.0, 2.0]))
    with pytest.raises(detcoll.InvalidArgumentError, match="a target is not one of 3"):
        call(targets=torch.tensor([[1, 3], [2, 1]]))
    with pytest.raises(detcoll.InvalidArgumentError, match="targets must be an integer"):
        call(targets=targets.float())
    with pytest.raises(detcoll.InvalidArgumentError, match="log_alpha"):
        call(alpha=alpha[:, :3])
    with pytest.raises(detcoll.InvalidArgumentError, match=r"log_probs must be \[T"):
        call(lp=lp[0])
    with pytest.raises(detcoll.InvalidArgumentError, match="one value per batch element"):
        call(grad=torch.ones(3))


def test_targets_padded_past_their_lengths_are_not_read():
    gen = torch.Generator().manual_seed(11)
    lp = torch.randn(8, 2, 5, generator=gen, dtype=torch.float64).log_softmax(2)
    padded = torch.tensor([[1, 2, 3], [1, -1, -1]])
    clean = torch.tensor([[1, 2, 3], [1, 0, 0]])
    nll, alpha = torch.ops.aten._ctc_loss(lp, clean, [8, 8], [3, 1], 0, False)
    ours = ops.ctc_loss_backward(torch.ones(2, dtype=torch.float64), lp, padded, [8, 8], [3, 1],
                                 nll, alpha, 0)
    reference = loop_gradient(lp, clean, [8, 8], [3, 1], 0, torch.ones(2))
    assert (ours - reference).abs().max() <= 1e-12
    empty = ops.ctc_loss_backward(torch.ones(2), torch.zeros(0, 2, 5), clean, [0, 0], [0, 0],
                                  torch.zeros(2), torch.zeros(2, 0, 7), 0)
    assert empty.shape == (0, 2, 5)
