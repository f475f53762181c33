"""The window, resampling, indexing, loss and TensorFlow families of detcoll.torch.ops on CUDA
tensors: each result has the CPU call's bits (ctc_loss: the same bits run after run, and the CPU's
within the devices' exp and log); through patch() under torch.use_deterministic_algorithms(True),
an unchanged model's CUDA backward runs them without raising and with the CPU's bits. Without a
GPU (or in a build without CUDA) every test reports itself skipped."""

import zlib

import pytest
import torch
import torch.nn.functional as F

import detcoll.torch as dt
from detcoll.torch import ops

CUDA = torch.cuda.is_available() and dt.cuda_built()
gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device (or a build without CUDA): the CUDA "
                                          "families run on a GPU machine only")


def wide(label, shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(zlib.crc32(label.encode()))
    sign = torch.randint(0, 2, shape, generator=g).to(dtype) * 2 - 1
    exponent = torch.randint(-20, 21, shape, generator=g).to(dtype)
    return sign * (torch.rand(shape, generator=g, dtype=dtype) + 0.5) * 2.0 ** exponent


def ints(label, high, shape, low=0):
    g = torch.Generator().manual_seed(zlib.crc32(label.encode()))
    return torch.randint(low, high, shape, generator=g)


def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]) \
        if t.is_floating_point() else t


def same(a, b):
    return a.shape == b.shape and torch.equal(bits(a), bits(b))


def both(fn):
    """fn on the CPU and on CUDA (its tensors moved by `to`)."""
    return fn(lambda t: t), fn(lambda t: t.cuda())


@gpu
def test_each_family_on_cuda_has_the_cpu_bits():
    x = wide("x", (2, 3, 9, 10))
    v = wide("v", (1, 2, 5, 6, 7))
    cases = {
        "reflection_pad": lambda to: ops.reflection_pad_backward(
            to(wide("rp", (2, 3, 12, 13))), x.shape, (1, 2, 2, 1)),
        "replication_pad": lambda to: ops.replication_pad_backward(
            to(wide("pp", (1, 2, 7, 8, 9))), v.shape, (1, 1, 1, 1, 1, 1)),
        "avg_pool": lambda to: ops.avg_pool_backward(
            to(wide("ap", (2, 3, 5, 6))), x.shape, (3, 3), (2, 2), (1, 1), True, False),
        "avg_pool3d": lambda to: ops.avg_pool_backward(
            to(wide("ap3", (1, 2, 3, 3, 4))), v.shape, (3, 2, 3), (2, 2, 2), (1, 0, 1)),
        "adaptive_avg": lambda to: ops.adaptive_avg_pool_backward(to(wide("aa", (2, 3, 4, 3))),
                                                                  x.shape),
        "max_pool": lambda to: ops.max_pool_backward(
            to(wide("mp", (2, 3, 4, 3))), x.shape, to(ints("mi", 90, (2, 3, 4, 3)))),
        "max_unpool_repeats": lambda to: ops.max_unpool(
            to(wide("mu", (2, 3, 4, 4))), to(ints("mui", 25, (2, 3, 4, 4))), (5, 5)),
        "linear": lambda to: ops.upsample_backward(to(wide("l1", (2, 3, 17))), [17],
                                                   [2, 3, 7], False),
        "trilinear": lambda to: ops.upsample_backward(to(wide("l3", (1, 2, 9, 11, 5))),
                                                      [9, 11, 5], [1, 2, 5, 6, 7], True),
        "bicubic": lambda to: ops.upsample_backward(to(wide("bc", (2, 3, 15, 17))), [15, 17],
                                                    [2, 3, 9, 10], False, (1.7, 1.7), "bicubic"),
        "index_put": lambda to: ops.index_put_(to(wide("ib", (50, 8))),
                                               [to(ints("ii", 50, (3000,)))],
                                               to(wide("iv", (3000, 8))), True),
        "index_put_last": lambda to: ops.index_put_(to(wide("ib", (50, 8))),
                                                    [to(ints("ii", 50, (3000,)))],
                                                    to(wide("iv", (3000, 8)))),
        "put": lambda to: ops.put_(to(wide("pb", (20, 5))), to(ints("pi", 100, (3000,), -100)),
                                   to(wide("pv", (3000,))), True),
        "histc": lambda to: ops.histc(to(torch.randn(5000, generator=torch.Generator()
                                                     .manual_seed(3))), 37, -2, 2.5),
        "embedding_bag_max": lambda to: ops.embedding_bag_dense_backward(
            to(wide("eg", (6, 4))), to(ints("ei", 10, (30,))), to(torch.zeros(30).long()),
            to(torch.tensor([5, 0, 7, 3, 9, 6])), to(ints("em", 10, (6, 4))), 10, False, 2),
        "sparse_dense_matmul": lambda to: ops.sparse_dense_matmul(
            to(torch.stack([ints("sr", 6, (500,)), ints("sc", 9, (500,))], 1)),
            to(wide("sv", (500,))), (6, 9), to(wide("sd", (9, 5)))),
    }
    for name, fn in cases.items():
        host, device = both(fn)
        assert device.is_cuda and same(device, host), name
    grid = torch.rand(2, 4, 7, 2, generator=torch.Generator().manual_seed(4)) * 3 - 1.5
    for mode in (0, 1, 2):
        for padding in (0, 1, 2):
            host, device = both(lambda to: ops.grid_sampler_backward(
                to(wide("gg", (2, 3, 4, 7))), to(x), to(grid), mode, padding, mode == 1))
            assert same(device[0], host[0]) and same(device[1], host[1]), (mode, padding)


@gpu
def test_crop_and_resize_on_cuda_has_the_cpu_bits():
    image = wide("img", (3, 7, 9, 4))
    boxes = torch.tensor([[0.1, 0.2, 0.8, 0.9], [-0.2, 0.3, 0.6, 1.3], [0.9, 0.7, 0.2, 0.1]])
    owners = torch.tensor([0, 2, 0])
    up = wide("crop.up", (3, 5, 6, 4))

    def run(to):
        i, b = to(image).detach().requires_grad_(), to(boxes).detach().requires_grad_()
        out = ops.crop_and_resize(i, b, to(owners), (5, 6))
        out.backward(to(up))
        return out, i.grad, b.grad

    for host, device in zip(*both(run)):
        assert same(device, host)


@gpu
def test_ctc_loss_backward_on_cuda_repeats_and_is_close_to_the_cpu():
    g = torch.Generator().manual_seed(5)
    logp = torch.randn(30, 4, 6, generator=g).log_softmax(2)
    targets = torch.randint(1, 3, (4, 8), generator=g)
    lengths, target_lengths = [30, 21, 30, 25], [8, 3, 6, 0]
    nll, alpha = torch.ops.aten._ctc_loss(logp, targets, lengths, target_lengths, 0, False)
    grad = torch.rand(4, generator=g) + 0.5
    args = [t.cuda() for t in (grad, logp, targets)]
    nll_d, alpha_d = torch.ops.aten._ctc_loss(args[1], args[2], lengths, target_lengths, 0, False)
    first = ops.ctc_loss_backward(*args, lengths, target_lengths, nll_d, alpha_d, 0)
    second = ops.ctc_loss_backward(*args, lengths, target_lengths, nll_d, alpha_d, 0)
    assert same(first, second)
    # The CPU's backward of the same forward: only the devices' float64 exp and log differ.
    host = ops.ctc_loss_backward(grad, logp, targets, lengths, target_lengths, nll_d.cpu(),
                                 alpha_d.cpu(), 0)
    assert torch.allclose(first.cpu(), host, rtol=0, atol=1e-6)


@gpu
def test_patch_runs_the_families_on_cuda_under_deterministic_algorithms():
    images = [wide(f"m.img{i}", (2, 3, 9, 10)) for i in range(3)]
    volume = wide("m.vol", (1, 2, 5, 6, 7))
    table = wide("m.table", (10, 4))
    picks = ints("m.picks", 10, (25,))
    ids, offsets = ints("m.ids", 10, (40,)), torch.tensor([0, 5, 5, 17, 30])
    grid = torch.rand(2, 4, 7, 2, generator=torch.Generator().manual_seed(6)) * 2 - 1
    logp = torch.randn(12, 2, 5, generator=torch.Generator().manual_seed(7)).log_softmax(2)
    targets = torch.tensor([[1, 2, 2], [3, 1, 0]])

    def step(to):
        leaves = [to(t).detach().requires_grad_()
                  for t in images + [volume, table, table.clone(), logp]]
        a, b, c, vol, tab, bag_weight, lp = leaves
        outputs = [
            F.avg_pool2d(F.pad(a, (1, 2, 2, 1), mode="reflect"), 3, 2, 1),
            F.adaptive_avg_pool2d(b, (3, 5)),
            F.interpolate(c, scale_factor=1.7, mode="bicubic", align_corners=False),
            F.interpolate(vol, size=(5, 7, 3), mode="trilinear", align_corners=False),
            F.max_pool3d(F.pad(vol, (1, 1, 0, 2, 1, 0), mode="replicate"), 2, 1),
            tab[to(picks)],
            F.embedding_bag(to(ids), bag_weight, to(offsets), mode="max"),
            F.grid_sample(a, to(grid), align_corners=False),
            F.adaptive_max_pool2d(b, (4, 3)),
        ]
        loss = F.ctc_loss(lp, to(targets), (12, 10), (3, 2), reduction="sum")
        # Writes without accumulation: torch's deterministic CUDA index_copy_ and scatter_ run
        # index_put_, which the patch replaces (no recursion through detcoll's own writes).
        written = to(wide("m.base", (10, 4))).clone()
        written[to(picks)] = to(wide("m.rows", (25, 4)))
        written.put_(to(ints("m.put", 40, (30,))), to(wide("m.put.v", (30,))))
        pooled, where = F.max_pool2d(to(images[0]), 2, return_indices=True)
        unpooled = F.max_unpool2d(pooled, where, 2, output_size=(9, 10))
        ups = [to(wide(f"m.up{i}", tuple(o.shape))) for i, o in enumerate(outputs)]
        torch.autograd.backward(outputs + [loss], ups + [None])
        return [written, unpooled] + [t.grad for t in leaves]

    previous = torch.are_deterministic_algorithms_enabled()
    with dt.patched() as replaced:
        assert "aten::grid_sampler_2d_backward on cuda" in replaced
        torch.use_deterministic_algorithms(False)
        try:
            on_device = step(lambda t: t.cuda())
            calls = dict(dt.patch_state()["calls"])
            # Under deterministic algorithms torch 2 routes linear interpolation and replication
            # padding on CUDA through its own decompositions, whose backward is index_put_
            # (patched): nothing raises, and the bits repeat.
            torch.use_deterministic_algorithms(True)
            first, second = step(lambda t: t.cuda()), step(lambda t: t.cuda())
        finally:
            torch.use_deterministic_algorithms(previous)
    with dt.patched(devices=("cpu",)):
        on_host = step(lambda t: t)
    for i, (a, b, host) in enumerate(zip(first, second, on_host)):
        assert same(a, b), f"result {i} under deterministic algorithms"
        assert torch.allclose(a.cpu(), host, rtol=1e-5, atol=1e-6 * float(host.abs().max())), i
    for name in ("reflection_pad2d_backward", "avg_pool2d_backward",
                 "_adaptive_avg_pool2d_backward", "replication_pad3d_backward",
                 "max_pool3d_with_indices_backward", "_index_put_impl_",
                 "_embedding_bag_dense_backward", "grid_sampler_2d_backward",
                 "adaptive_max_pool2d_backward"):
        assert calls.get(name, 0) >= 1, (name, calls)
    assert sum(v for k, v in calls.items() if k.startswith("_ctc_loss_backward")) >= 1
    for name in ("put_", "max_unpool2d"):
        assert calls.get(name, 0) >= 1, (name, calls)
    for i, (device, host) in enumerate(zip(on_device[:-1], on_host[:-1])):
        assert device.is_cuda and same(device, host), f"result {i}"
    assert torch.allclose(on_device[-1].cpu(), on_host[-1], rtol=0, atol=1e-5)   # ctc: exp, log
