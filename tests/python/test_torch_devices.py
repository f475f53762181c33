"""detcoll.torch on CUDA tensors (docs/design.md, "Device tensors in the engine"), under mpirun.

Everywhere: a tensor on a device detcoll does not take, a CUDA tensor in a build without CUDA and
a call mixing devices are refused with an error naming the problem, on every rank. On a machine
with a GPU (the others report these as skipped): every collective, the deterministic ops and the
random fills on CUDA tensors give the bits of the same call on CPU tensors, in ordered and
invariant mode; a request runs after the work on torch's current stream and its result is
ordered before what that stream does next, without the host waiting (over NCCL); ranks that
give one name a CPU tensor and a CUDA tensor all fail with a mismatch; a small CNN trained with
DistributedOptimizer on the GPU gives the same weights twice. With NCCL at one rank, and at three
ranks on one GPU with DETCOLL_GPU_TRANSPORT=mpi (NCCL cannot run several ranks on one device).
"""

import os
import types
import zlib

import pytest
import torch

import detcoll
import detcoll.torch as hvd
from detcoll.torch import _tensors, ops, rng

CUDA = torch.cuda.is_available() and hvd.cuda_built()
gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device (or a build without CUDA): the CUDA "
                         "tensor tests are compiled and collected but not run here")


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()
    if CUDA:
        torch.cuda.set_device(0)
    yield


@pytest.fixture(params=["ordered", "invariant"])
def mode(request):
    before = detcoll.get_mode()
    detcoll.set_mode(request.param)
    yield request.param
    detcoll.set_mode(before)


def wide(label, shape, dtype=torch.float32, rank=None):
    """Non-integer values over a wide exponent range, per rank and label."""
    r = hvd.rank() if rank is None else rank
    g = torch.Generator().manual_seed(zlib.crc32(f"{label}/{r}".encode()))
    n = 1
    for d in shape:
        n *= d
    mantissa = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    exponent = torch.randint(-20, 21, (n,), generator=g).to(torch.float64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (sign * mantissa * torch.pow(2.0, exponent)).to(dtype).reshape(shape)


def bits(t):
    t = t.detach().cpu().contiguous()
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b):
    return a.shape == b.shape and torch.equal(bits(a), bits(b))


# ---- refusals (any machine) ----

def test_a_tensor_on_another_device_fails_every_rank_naming_it():
    mine = wide("meta", (16,))
    odd = torch.empty(16, device="meta") if hvd.rank() == min(1, hvd.size() - 1) else mine
    for call in (lambda: hvd.allreduce(odd, name="dev.meta.ar"),
                 lambda: hvd.broadcast(odd, 0, name="dev.meta.bc"),
                 lambda: hvd.allgather(odd, name="dev.meta.ag")):
        with pytest.raises(detcoll.InvalidArgumentError, match="is on meta"):
            call()


def test_a_cuda_tensor_in_a_build_without_cuda_is_refused(monkeypatch):
    fake = types.SimpleNamespace(device=torch.device("cuda:0"))
    monkeypatch.setattr(_tensors._detcoll, "cuda_built", lambda: False)
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"allreduce: the tensor is on cuda:0, but this build of detcoll "
                             r"has no CUDA"):
        _tensors.check_device(fake, "allreduce", "reduces")
    monkeypatch.setattr(_tensors._detcoll, "cuda_built", lambda: True)
    _tensors.check_device(fake, "allreduce", "reduces")  # taken with CUDA


def test_a_call_mixing_devices_is_refused_naming_them():
    cpu = torch.zeros(3)
    fake = types.SimpleNamespace(device=torch.device("cuda:0"))
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"grouped_allreduce: the tensors are on different devices "
                             r"\(cpu, cuda:0\)"):
        _tensors.same_device([cpu, fake, cpu], "grouped_allreduce")
    assert _tensors.same_device([cpu, cpu], "x") is None
    assert _tensors.same_device([fake], "x") == torch.device("cuda:0")


def test_ops_and_fills_refuse_another_device_by_name():
    meta = torch.empty(8, device="meta")
    index = torch.zeros(8, dtype=torch.int64)
    with pytest.raises(detcoll.InvalidArgumentError, match="scatter_add: input is on meta"):
        ops.scatter_add(meta, 0, index, meta)
    with pytest.raises(detcoll.InvalidArgumentError, match="is on meta"):
        rng.uniform_(meta, rng.Key.from_seed(1))


# ---- CUDA tensors (a machine with a GPU) ----

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_of_cuda_tensors_has_the_cpu_bits(mode, dtype):
    x = wide(f"ar.{dtype}", (1000, 37), dtype)
    for op, tag in ((hvd.Sum, "sum"), (hvd.Average, "avg")):
        cpu = hvd.allreduce(x, op=op, name=f"c.{mode}.{dtype}.{tag}")
        dev = hvd.allreduce(x.cuda(), op=op, name=f"d.{mode}.{dtype}.{tag}")
        assert dev.is_cuda and same(dev, cpu), (mode, dtype, tag)
    inplace = x.cuda()
    hvd.allreduce_(inplace, op=hvd.Sum, name=f"i.{mode}.{dtype}")
    assert same(inplace, hvd.allreduce(x, op=hvd.Sum, name=f"j.{mode}.{dtype}"))


@gpu
def test_async_and_grouped_cuda_requests_fuse_with_the_cpu_bits(mode):
    shapes = [(3,), (1000,), (64, 3, 3, 3), (5,), (300, 301), (2, 1 << 20), (17,)]
    xs = [wide(f"grp.{i}", s) for i, s in enumerate(shapes)]
    cpu = hvd.grouped_allreduce(xs, op=hvd.Sum, name=f"gc.{mode}")
    dev = hvd.grouped_allreduce([x.cuda() for x in xs], op=hvd.Sum, name=f"gd.{mode}")
    assert all(d.is_cuda and same(d, c) for d, c in zip(dev, cpu))
    handles = [hvd.allreduce_async(x.cuda(), op=hvd.Average, name=f"a.{mode}.{i}")
               for i, x in enumerate(xs)]
    outs = [hvd.synchronize(h) for h in handles]
    ref = [hvd.allreduce(x, op=hvd.Average, name=f"b.{mode}.{i}") for i, x in enumerate(xs)]
    assert all(same(o, r) for o, r in zip(outs, ref))


@gpu
def test_a_request_follows_the_current_stream_and_precedes_its_next_work(mode):
    side = torch.cuda.Stream()
    x = wide(f"stream.{mode}", (1 << 20,))
    ref = hvd.allreduce(x * 3.0, op=hvd.Sum, name=f"s.c.{mode}")
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # the producer is still running at enqueue
        y = x.cuda(non_blocking=False) * 3.0
        handle = hvd.allreduce_async_(y, op=hvd.Sum, name=f"s.d.{mode}")
        out = hvd.synchronize(handle)
        doubled = out * 2.0  # queued on the side stream after the result
    side.synchronize()
    assert same(out, ref)
    assert same(doubled, ref * 2.0)


@gpu
def test_an_op_of_two_exchanges_follows_the_callers_stream():
    # The second exchange (the rows, once every rank's count is known) may be enqueued by the
    # progress thread: it must still run after the caller's stream, and the result before the
    # stream that synchronizes.
    side = torch.cuda.Stream()
    rows = wide("ag.side", (hvd.rank() + 2, 5))
    ref = hvd.allgather(rows, name="ags.c")
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the producer is still running
        x = rows.cuda() * 1.0
        handle = hvd.allgather_async(x, name="ags.d")
    out = hvd.synchronize(handle)  # on the default stream
    assert same(out, ref)


@gpu
def test_no_host_wait_over_nccl():
    if hvd.size() != 1 or os.environ.get("DETCOLL_GPU_TRANSPORT", "auto") == "mpi":
        pytest.skip("over NCCL at one rank only: the staged transport waits by design")
    x = torch.ones(1 << 20, device="cuda")
    hvd.allreduce(x, op=hvd.Sum, name="warm")  # NCCL's start
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time ahead of the request
    out = hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name="nowait"))
    pending = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert pending, "synchronize() waited for the GPU"
    assert same(out, x)


@gpu
def test_broadcast_allgather_reducescatter_alltoall_of_cuda_tensors(mode):
    size, rank = hvd.size(), hvd.rank()
    x = wide("bc", (33, 7))
    assert same(hvd.broadcast(x.cuda(), size - 1, name="bc.d"), hvd.broadcast(x, size - 1,
                                                                                name="bc.c"))
    rows = wide("ag", (rank + 2, 5))  # ranks differ in dimension 0
    assert same(hvd.allgather(rows.cuda(), name="ag.d"), hvd.allgather(rows, name="ag.c"))
    z = wide("rs", (2 * size + 1, 6))
    assert same(hvd.reducescatter(z.cuda(), op=hvd.Sum, name=f"rs.d.{mode}"),
                hvd.reducescatter(z, op=hvd.Sum, name=f"rs.c.{mode}"))
    splits = [(rank + j) % 3 for j in range(size)]
    a = wide("aa", (sum(splits), 4))
    got, got_splits = hvd.alltoall(a.cuda(), splits=splits, name="aa.d")
    want, want_splits = hvd.alltoall(a, splits=splits, name="aa.c")
    assert got.is_cuda and same(got, want) and torch.equal(got_splits, want_splits)


@gpu
def test_cpu_on_one_rank_cuda_on_the_others_is_a_mismatch_everywhere():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    x = wide("mix", (64,))
    t = x if hvd.rank() == 1 else x.cuda()
    with pytest.raises(detcoll.MismatchError, match="on a CUDA device"):
        hvd.allreduce(t, op=hvd.Sum, name="mixed")
    assert same(t, x), "a failed call wrote its tensor"


@gpu
def test_ops_on_cuda_tensors_have_the_cpu_bits():
    g = torch.Generator().manual_seed(7)
    src = wide("ops.src", (4000, 8))
    index = torch.randint(0, 50, (4000, 8), generator=g)
    base = wide("ops.base", (50, 8))
    pairs = [
        lambda d: ops.scatter_add(base.to(d), 0, index.to(d), src.to(d)),
        lambda d: ops.index_add(base.to(d), 0, index[:, 0].to(d), src.to(d)),
        lambda d: ops.unsorted_segment_sum(src.to(d), index[:, 0].to(d), 50),
        lambda d: ops.bincount(index[:, 0].to(d), weights=src[:, 0].to(d), minlength=60),
        lambda d: ops.sum(src.to(d), dim=0),
        lambda d: ops.bias_add_grad(wide("ops.bias", (4, 16, 5, 5)).to(d), "NCHW"),
        lambda d: ops.embedding_dense_backward(src.to(d), index[:, 0].to(d), 50, -1, False),
        lambda d: ops.nll_loss(src.to(d), index[:, 0].to(d) % 8, src[:8, 1].abs().to(d)),
        lambda d: ops.nll_loss(src.to(d), index[:, 0].to(d) % 8, reduction="sum"),
        lambda d: ops.nll_loss(src.to(d), index[:, 0].to(d) % 8, reduction="none"),
    ]
    for i, f in enumerate(pairs):
        cpu, dev = f("cpu"), f("cuda")
        assert dev.is_cuda and same(dev, cpu), f"op {i}"
    g_near = wide("near", (2, 3, 37, 29))
    assert same(ops.upsample_nearest_backward(g_near.cuda(), [37, 29], [2, 3, 11, 7], (3.3, 4.1)),
                ops.upsample_nearest_backward(g_near, [37, 29], [2, 3, 11, 7], (3.3, 4.1)))
    ties = (index[:400].float() % 5).reshape(400, 8)  # many equal values in every slice
    ties[::7, 3] = float("nan")
    for f in (lambda d: ops.kthvalue(ties.to(d), 3, 1), lambda d: ops.median(ties.to(d), 0),
              lambda d: ops.median(ties.to(d), 1, keepdim=True)):
        cpu, dev = f("cpu"), f("cuda")
        assert same(dev.values, cpu.values) and torch.equal(dev.indices.cpu(), cpu.indices)
    x = wide("pool", (2, 3, 17, 19))
    out_c, idx_c = ops.max_pool2d_with_indices(x, 3, 2, 1)
    out_d, idx_d = ops.max_pool2d_with_indices(x.cuda(), 3, 2, 1)
    assert same(out_d, out_c) and torch.equal(idx_d.cpu(), idx_c)
    grad = wide("pool.grad", tuple(out_c.shape))
    back_c = ops.max_pool2d_with_indices_backward(grad, x, 3, 2, 1, 1, False, idx_c)
    back_d = ops.max_pool2d_with_indices_backward(grad.cuda(), x.cuda(), 3, 2, 1, 1, False,
                                                  idx_d)
    assert same(back_d, back_c)
    g_up = wide("up", (2, 3, 34, 38))
    assert same(ops.upsample_bilinear2d_backward(g_up.cuda(), (34, 38), (2, 3, 17, 19), False),
                ops.upsample_bilinear2d_backward(g_up, (34, 38), (2, 3, 17, 19), False))


@gpu
def test_patch_runs_detcolls_kernels_for_cuda_tensors_under_deterministic_algorithms():
    # An unchanged model's CUDA backward and forward ops through detcoll.torch.patch(): each is
    # detcoll's (a call) with the bits of detcoll's CPU kernel on the same data; with
    # torch.use_deterministic_algorithms(True) none raises and the bits repeat.
    g = torch.Generator().manual_seed(23)
    table = wide("patch.table", (40, 8))
    ids = torch.randint(0, 40, (3000,), generator=g)
    image = wide("patch.image", (2, 3, 17, 19))
    src = wide("patch.src", (3000, 8))
    base = wide("patch.base", (40, 8))
    rows = torch.randint(0, 40, (3000,), generator=g)
    up_e, up_p, up_u = (wide(f"patch.up{i}", s) for i, s in
                        enumerate([(3000, 8), (2, 3, 9, 10), (2, 3, 34, 38)]))

    def step(d):
        t = table.to(d).requires_grad_()
        a, b, c = (image.to(d).detach().clone().requires_grad_() for _ in range(3))
        torch.autograd.backward(
            [torch.nn.functional.embedding(ids.to(d), t),
             torch.nn.functional.max_pool2d(a, 3, 2, 1),
             torch.nn.functional.interpolate(b, size=(34, 38), mode="bilinear",
                                             align_corners=False),
             torch.nn.functional.interpolate(c, size=(34, 38), mode="nearest")],
            [up_e.to(d), up_p.to(d), up_u.to(d), up_u.to(d)])
        return [t.grad, a.grad, b.grad, c.grad,
                base.to(d).clone().index_add_(0, rows.to(d), src.to(d)),
                torch.scatter_add(base.to(d), 0, rows.to(d)[:, None].expand(-1, 8), src.to(d)),
                torch.bincount(rows.to(d), src[:, 0].to(d), minlength=45),
                torch.nn.functional.nll_loss(src.to(d), rows.to(d) % 8, base[0].abs().to(d)),
                *torch.kthvalue((rows.to(d) % 5).reshape(300, 10), 4, 1),
                *torch.median((rows.to(d) % 5).reshape(300, 10).float(), 0)]

    previous = torch.are_deterministic_algorithms_enabled()
    with hvd.patched() as replaced:
        assert "aten::index_add_ on cuda" in replaced
        torch.use_deterministic_algorithms(False)
        try:
            on_device = step("cuda")
            calls = dict(hvd.patch_state()["calls"])
            # Under deterministic algorithms torch 2 routes bilinear interpolation on CUDA
            # through its own decomposition, whose backward is index_put_ (patched): nothing
            # raises, and the bits repeat.
            torch.use_deterministic_algorithms(True)
            first, second = step("cuda"), step("cuda")
        finally:
            torch.use_deterministic_algorithms(previous)
    with hvd.patched(devices=("cpu",)):
        on_host = step("cpu")
    for i, (a, b, host) in enumerate(zip(first, second, on_host)):
        assert same(a, b), f"output {i} under deterministic algorithms"
        assert torch.allclose(a.cpu().double(), host.double(), rtol=1e-5,
                              atol=1e-6 * float(host.abs().max())), i
    for name in ("embedding_dense_backward", "max_pool2d_with_indices_backward", "index_add_",
                 "scatter_add", "bincount", "nll_loss_forward", "kthvalue", "median.dim"):
        assert calls.get(name, 0) >= 1, (name, calls)
    # torch 1.13's autograd calls the .vec overloads; torch 2 has only the others.
    for name in ("upsample_bilinear2d_backward", "upsample_nearest2d_backward"):
        assert calls.get(name, 0) + calls.get(f"{name}.vec", 0) >= 1, (name, calls)
    for i, (dev, host) in enumerate(zip(on_device, on_host)):
        assert dev.is_cuda and same(dev, host), f"output {i}"


@gpu
def test_random_fills_of_cuda_tensors_have_the_cpu_bits():
    key = rng.Key.from_seed(1234).derive("fills")
    for dtype in (torch.float32, torch.float64):
        for fill in (lambda t: rng.uniform_(t, key, offset=5),
                     lambda t: rng.normal_(t, key, mean=1.5, std=3.0),
                     lambda t: rng.bernoulli_(t, key, p=0.3)):
            cpu = fill(torch.empty(10007, dtype=dtype))
            dev = fill(torch.empty(10007, dtype=dtype, device="cuda"))
            assert same(dev, cpu)
    keys = [key.derive("row", i) for i in range(6)]
    assert same(rng.normal_rows_(torch.empty(6, 100, device="cuda"), keys),
                rng.normal_rows_(torch.empty(6, 100), keys))


def _train(device, mode, seed=5):
    """A small CNN trained for a few steps with DistributedOptimizer; its final weights."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(16, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(100 + hvd.rank())
    for step in range(4):
        x = torch.randn(16, 3, 16, 16, generator=g).to(device)
        y = torch.randint(0, 10, (16,), generator=g).to(device)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().cpu().clone() for p in model.parameters()]


@gpu
def test_a_cnn_trained_on_the_gpu_gives_the_same_weights_twice(mode):
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    first, second = _train("cuda", mode), _train("cuda", mode)
    assert all(same(a, b) for a, b in zip(first, second))
    # And the ranks hold the same model.
    for i, w in enumerate(first):
        root = hvd.broadcast(w, 0, name=f"cnn.{mode}.{i}")
        assert same(root, w)
