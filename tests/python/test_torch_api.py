"""detcoll.torch under mpirun: Horovod's API on torch tensors, checked on every rank against
references computed from every rank's inputs (regenerated locally from per-rank seeds)."""

import zlib

import pytest
import torch

import detcoll
import detcoll.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()  # shutdown runs at exit
    yield


def inputs(label, count, dtype=torch.float32):
    """Every rank's input: non-integer values over a wide exponent range, one generator per rank."""
    out = []
    for r in range(hvd.size()):
        g = torch.Generator().manual_seed(zlib.crc32(f"{label}/{r}".encode()))  # same on every rank
        mantissa = torch.rand(count, generator=g, dtype=torch.float64) + 0.5
        exponent = torch.randint(-20, 21, (count,), generator=g).to(torch.float64)
        sign = torch.where(torch.rand(count, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
        out.append((sign * mantissa * torch.pow(2.0, exponent)).to(dtype))
    return out


def local_batch(label, rows, cols):
    """This rank's own data."""
    return inputs(label, rows * cols)[hvd.rank()].reshape(rows, cols).clamp(-4, 4)


def fold(tensors):
    """The ordered mode's definition: the left fold in rank order."""
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = acc + t
    return acc


def bits(t):
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int64)


def test_allreduce_is_the_rank_order_fold_bit_for_bit():
    hvd_inputs = inputs("allreduce", 1001)
    mine = hvd_inputs[hvd.rank()]
    total = hvd.allreduce(mine, op=hvd.Sum, name="t.sum")
    assert torch.equal(bits(total), bits(fold(hvd_inputs)))
    assert torch.equal(mine, hvd_inputs[hvd.rank()]), "allreduce changed its input"
    average = hvd.allreduce(mine, name="t.avg")  # Horovod's default: Average
    assert torch.equal(bits(average), bits(fold(hvd_inputs) / hvd.size()))
    inplace = mine.clone()
    assert hvd.allreduce_(inplace, op=hvd.Sum, name="t.inplace") is inplace
    assert torch.equal(bits(inplace), bits(total))


def test_async_and_grouped_requests_give_the_blocking_bits():
    xs = [inputs(f"async{i}", n)[hvd.rank()] for i, n in enumerate([1, 17, 4099])]
    blocking = [hvd.allreduce(x, op=hvd.Sum, name=f"b{i}") for i, x in enumerate(xs)]
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"a{i}") for i, x in enumerate(xs)]
    assert all(isinstance(hvd.poll(h), bool) for h in handles)
    for h, b in zip(handles, blocking):
        assert torch.equal(bits(hvd.synchronize(h)), bits(b))
    grouped = hvd.grouped_allreduce(xs, op=hvd.Sum, name="g")
    for g, b in zip(grouped, blocking):
        assert torch.equal(bits(g), bits(b))


def test_broadcast_allgather_and_parameters():
    t = torch.full((5,), float(hvd.rank()) + 0.25)
    assert torch.equal(hvd.broadcast(t, root_rank=hvd.size() - 1, name="bc"),
                       torch.full((5,), hvd.size() - 0.75))
    rows = torch.full((hvd.rank() + 1, 3), float(hvd.rank()))  # ranks differ in dimension 0
    gathered = hvd.allgather(rows, name="ag")
    expected = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(hvd.size())])
    assert torch.equal(gathered, expected)
    torch.manual_seed(100 + hvd.rank())
    model = torch.nn.Linear(4, 3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    weights = hvd.allgather(model.weight.detach().reshape(1, -1).contiguous(), name="w")
    assert all(torch.equal(weights[0], weights[r]) for r in range(hvd.size()))


def test_optimizer_state_is_broadcast():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1))
    model(local_batch("adam", 4, 3)).sum().backward()
    optimizer.step()  # each rank's own moments
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    for i, state in enumerate(optimizer.state_dict()["state"].values()):
        for key in ("exp_avg", "exp_avg_sq"):
            every = hvd.allgather(state[key].reshape(1, -1).contiguous(), name=f"adam.{i}.{key}")
            assert all(torch.equal(every[0], every[r]) for r in range(hvd.size()))
            assert every[0].abs().sum() > 0


def test_distributed_optimizer_keeps_replicas_identical():
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(1000 + hvd.rank())  # each rank its own data
    for _ in range(5):
        x = torch.randn(32, 8, generator=g)
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).reshape(1, -1)
    everyone = hvd.allgather(flat.contiguous(), name="replicas")
    assert all(torch.equal(bits(everyone[0]), bits(everyone[r])) for r in range(hvd.size()))


def test_bad_input_raises_a_clear_error():
    with pytest.raises(detcoll.InvalidArgumentError, match="not contiguous"):
        hvd.allreduce(torch.zeros(4, 4).t())
    with pytest.raises(detcoll.InvalidArgumentError, match="unsupported dtype torch.uint8"):
        hvd.allreduce(torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(detcoll.InvalidArgumentError, match="unknown op"):
        hvd.allreduce(torch.zeros(4), op=17)
    if hvd.size() == 1:
        return  # nothing can differ between ranks
    # Every rank passes a different shape: every rank learns each rank's, none hangs.
    with pytest.raises(detcoll.MismatchError, match=r"shape \(4,\).*shape \(5,\)"):
        hvd.allreduce(torch.zeros(4 + hvd.rank()), name="mismatch")
    with pytest.raises(detcoll.MismatchError):
        hvd.allgather(torch.zeros((2, 2 + hvd.rank())), name="ag.bad")


def test_gradient_predivide_factor_scales_before_and_after():
    """Horovod's meaning: Average with factor f sums the gradients scaled by 1/f, then scales
    the sum by f/size."""
    torch.manual_seed(3)
    model = torch.nn.Linear(5, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = [p.detach().clone() for p in model.parameters()]
    x = inputs("predivide", 40)[hvd.rank()].reshape(8, 5)
    local = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                         named_parameters=model.named_parameters(),
                                         gradient_predivide_factor=4.0)
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    for i, (p, b, g) in enumerate(zip(model.parameters(), before, local)):
        every = hvd.allgather(g.reshape(1, -1).contiguous(), name=f"predivide.{i}")
        expected = fold([row * 0.25 for row in every]) * (4.0 / hvd.size())
        assert torch.equal(bits(p.detach()), bits(b.add(expected.view_as(b), alpha=-1.0)))
    with pytest.raises(detcoll.InvalidArgumentError, match="not supported with op != Average"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)


def test_bad_input_on_one_rank_fails_every_rank():
    """A tensor refused by the Python checks on one rank fails the call on every rank, naming
    that rank and the reason; nobody waits, and the next call works."""
    if hvd.size() == 1:
        return
    bad = hvd.size() - 1
    good = torch.ones(4, 4)

    def mine(refused):
        return refused if hvd.rank() == bad else good

    calls = {
        "allreduce": lambda: hvd.allreduce(mine(good.t()), name="one.ar"),
        "allreduce_": lambda: hvd.allreduce_(mine(good.t().clone()), name="one.ar_"),
        "allreduce_async": lambda: hvd.synchronize(
            hvd.allreduce_async(mine(good.t()), name="one.async")),
        "grouped_allreduce": lambda: hvd.grouped_allreduce(
            [good, mine(good.to(torch.uint8))], name="one.grouped"),
        "broadcast": lambda: hvd.broadcast(mine(good.t()), root_rank=0, name="one.bc"),
        "broadcast_async_": lambda: hvd.synchronize(
            hvd.broadcast_async_(mine(good.t().clone()), root_rank=0, name="one.bca")),
        "allgather": lambda: hvd.allgather(mine(good.t()), name="one.ag"),
        "allgather_async": lambda: hvd.synchronize(
            hvd.allgather_async(mine(good.t()), name="one.aga")),
    }
    for call, run in calls.items():
        with pytest.raises(detcoll.InvalidArgumentError) as error:
            run()
        message = str(error.value)
        assert f"rank {bad}" in message, f"{call}: {message}"
        assert "not contiguous" in message or "unsupported dtype" in message, f"{call}: {message}"
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after"),
                       torch.full((3,), float(hvd.size())))


def test_broadcast_moves_any_dtype_and_unpicklable_objects_fail_everywhere():
    flags = torch.tensor([hvd.rank() % 2 == 0, True, False, hvd.rank() == 0])
    assert torch.equal(hvd.broadcast(flags, root_rank=0, name="bool"),
                       torch.tensor([True, True, False, True]))
    small = torch.arange(7, dtype=torch.int8) * (hvd.rank() + 1)
    hvd.broadcast_(small, root_rank=hvd.size() - 1, name="int8")
    assert torch.equal(small, torch.arange(7, dtype=torch.int8) * hvd.size())
    state = {"step": torch.tensor(5), "mask": torch.ones(3, dtype=torch.uint8) * hvd.rank()}
    hvd.broadcast_parameters(state, root_rank=0)
    assert torch.equal(state["mask"], torch.zeros(3, dtype=torch.uint8))
    assert hvd.broadcast_object({"epoch": hvd.rank() + 3}, root_rank=0) == {"epoch": 3}
    with pytest.raises(detcoll.InvalidArgumentError, match="rank 0 could not pickle"):
        hvd.broadcast_object(lambda: None if hvd.rank() == 0 else 1, root_rank=0)


def replicas_identical(model, name):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).reshape(1, -1)
    everyone = hvd.allgather(flat.contiguous(), name=name)
    return all(torch.equal(bits(everyone[0]), bits(everyone[r])) for r in range(hvd.size()))


def test_optimizer_refuses_extra_passes_and_zero_grad_in_flight():
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x = local_batch("guards", 4, 3)
    model(x).sum().backward()
    with pytest.raises(detcoll.InvalidArgumentError, match="zero_grad"):
        optimizer.zero_grad()
    reducing = [p.grad for p in model.parameters()]
    with pytest.raises(detcoll.InvalidArgumentError, match="more than backward_passes_per_step times"):
        model(x).sum().backward()  # refused before it adds to a gradient under reduction
    assert all(p.grad is g for p, g in zip(model.parameters(), reducing))
    optimizer.step()  # the first pass's reduction completes; the state is clean again
    assert replicas_identical(model, "guards.first")
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    assert replicas_identical(model, "guards.replicas")


def test_a_step_skipped_after_synchronize_does_not_skip_the_next_reduction():
    """As with a gradient scaler that finds an inf: synchronize(), no step(), next pass."""
    torch.manual_seed(11)
    model = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    for step in range(3):
        optimizer.zero_grad()
        model(local_batch(f"skip{step}", 5, 4)).pow(2).sum().backward()
        if step == 0:
            optimizer.synchronize()  # ... and the step is skipped
        else:
            optimizer.step()
    assert replicas_identical(model, "skip.replicas")


def test_channels_last_gradients_are_reduced():
    torch.manual_seed(12)
    model = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x = local_batch("cl", 2, 3 * 8 * 8).reshape(2, 3, 8, 8).contiguous(
        memory_format=torch.channels_last)
    optimizer.zero_grad()
    model(x).sum().backward()
    assert not model.weight.grad.is_contiguous()
    optimizer.step()
    assert replicas_identical(model, "cl.replicas")


def test_invariant_optimizer_with_a_branch_only_one_rank_uses():
    """A parameter without a gradient in some rank's pass contributes zero leaves there: the
    step works on every rank and the branch's gradient is rank 0's own, exactly."""
    torch.manual_seed(13)
    trunk, branch = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    params = list(trunk.named_parameters(prefix="trunk")) + list(
        branch.named_parameters(prefix="branch"))
    detcoll.set_mode("invariant")
    try:
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.0),
                                             named_parameters=params, op=hvd.Sum)
        x = local_batch("branch", 4, 3)
        out = trunk(x) + (branch(x) if hvd.rank() == 0 else 0.0)
        mine = torch.autograd.grad(branch(x).sum(), list(branch.parameters()))
        optimizer.zero_grad()
        out.sum().backward()
        optimizer.step()
        for p, g in zip(branch.parameters(), mine):
            rank0 = hvd.broadcast(g, root_rank=0, name=f"branch.{p.shape}")
            assert torch.equal(bits(p.grad), bits(rank0))
        with pytest.raises(detcoll.InvalidArgumentError, match="mode changed"):
            detcoll.set_mode("ordered")
            optimizer.zero_grad()
            trunk(x).sum().backward()
            optimizer.step()
    finally:
        detcoll.set_mode("ordered")
