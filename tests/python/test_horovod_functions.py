"""detcoll.torch.functions and DistributedOptimizer under mpirun, against Horovod 0.28's
documented behaviour: objects from every rank, optimizer state from one rank (also for an
optimizer that has not stepped yet), sparse gradients, and the optimizer's guards and names.
Every rank checks its results against references built from every rank's inputs."""

import re
import warnings
import zlib

import pytest
import torch

import detcoll
import detcoll.torch as hvd
from detcoll.torch import functions
from detcoll.torch.optimizer import (_STEP_AFTER_SYNCHRONIZE, _TOO_MANY_PASSES,
                                     _ZERO_GRAD_IN_FLIGHT)

STEP_WARNING = ("optimizer.step() called without optimizer.skip_synchronize() context after "
                "optimizer.synchronize(). This can cause training slowdown. You may want to "
                "consider using optimizer.skip_synchronize() context if you use "
                "optimizer.synchronize() in your code.")


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()  # shutdown runs at exit
    torch.set_num_threads(1)
    yield


def generator(label, r):
    return torch.Generator().manual_seed(zlib.crc32(f"{label}/{r}".encode()))


def bits(t):
    t = t.detach().contiguous()
    return t.view(torch.int32 if t.element_size() == 4 else torch.int64)


def same_on_every_rank(t, name):
    """True if every rank holds t's exact bits."""
    flat = bits(t).reshape(1, -1).to(torch.int64)
    every = hvd.allgather(flat, name=name)
    return all(torch.equal(every[0], every[r]) for r in range(hvd.size()))


def roots(t, root, name):
    """root's copy of t."""
    return hvd.broadcast(t.detach().contiguous(), root_rank=root, name=name)


def fold(tensors):
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = acc + t
    return acc


# ---- allgather_object and broadcast_parameters ----

def rank_object(r):
    return {"rank": r, "text": "x" * (1000 * r + 1), "items": list(range(r)), "pair": (r, None)}


def test_allgather_object_returns_every_ranks_object_in_rank_order():
    got = functions.allgather_object(rank_object(hvd.rank()))
    assert got == [rank_object(r) for r in range(hvd.size())]
    assert functions.allgather_object(hvd.rank() * 7, name="ints") == [
        7 * r for r in range(hvd.size())]


def test_allgather_object_that_one_rank_cannot_pickle_fails_everywhere():
    bad = hvd.size() - 1
    obj = (lambda: 0) if hvd.rank() == bad else "fine"
    with pytest.raises(detcoll.InvalidArgumentError, match=f"rank {bad}:"):
        functions.allgather_object(obj, name="unpicklable")
    assert functions.allgather_object("after", name="after") == ["after"] * hvd.size()


def test_broadcast_object_and_parameters_forms():
    root = hvd.size() - 1
    assert functions.broadcast_object({"r": hvd.rank()}, root_rank=root) == {"r": root}
    bare = [torch.full((3,), float(hvd.rank())), torch.arange(4) * hvd.rank()]
    functions.broadcast_parameters(bare, root_rank=root)  # auto-named
    assert torch.equal(bare[0], torch.full((3,), float(root)))
    assert torch.equal(bare[1], torch.arange(4) * root)
    torch.manual_seed(40 + hvd.rank())
    model = torch.nn.Linear(3, 2)
    functions.broadcast_parameters(list(model.named_parameters()), root_rank=root)
    assert same_on_every_rank(model.weight, "bp.w") and same_on_every_rank(model.bias, "bp.b")
    functions.broadcast_parameters({"b": torch.ones(2) * hvd.rank(), "a": torch.zeros(1)}, 0)
    for params in (torch.ones(3), 3, "weights"):
        with pytest.raises(detcoll.InvalidArgumentError, match="invalid params of type"):
            functions.broadcast_parameters(params, root_rank=0)


# ---- broadcast_optimizer_state ----

def rank_model(label):
    torch.manual_seed(zlib.crc32(f"{label}/{hvd.rank()}".encode()))  # each rank its own values
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def check_state_is_roots(optimizer, root, label):
    state = optimizer.state_dict()
    options = [{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]]
    assert functions.broadcast_object(options, root_rank=root, name=label + ".opts") == options
    keys = sorted((pid, key) for pid, entries in state["state"].items() for key in entries)
    assert functions.allgather_object(keys, name=label + ".keys") == [keys] * hvd.size()
    assert keys, "the optimizer has no state"
    for i, (pid, key) in enumerate(keys):
        value = state["state"][pid][key]
        if torch.is_tensor(value):
            mine = value.reshape(-1)
            assert torch.equal(bits(mine), bits(roots(mine, root, f"{label}.{i}")))
        else:
            assert functions.broadcast_object(value, root, name=f"{label}.v{i}") == value


@pytest.mark.parametrize("kind", ["sgd_momentum", "adam"])
def test_a_fresh_optimizer_gets_roots_state_and_hyper_parameters(kind):
    model = rank_model(kind)
    assert all(p.grad is None for p in model.parameters())
    r = hvd.rank()
    if kind == "sgd_momentum":  # weight decay makes the initial state depend on the weights
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 + r, momentum=0.5 + 0.1 * r,
                                    weight_decay=0.25 + r, nesterov=(r % 2 == 0))
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1),
                                     betas=(0.8 + 0.01 * r, 0.99), weight_decay=0.5 + r,
                                     amsgrad=(r == 0))
    weights = [p.detach().clone() for p in model.parameters()]
    root = hvd.size() - 1
    functions.broadcast_optimizer_state(optimizer, root_rank=root)
    # The initializing step left the weights alone and every gradient is now zeros.
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    check_state_is_roots(optimizer, root, kind)
    expected_lr = (0.1 + root) if kind == "sgd_momentum" else 0.01 * (root + 1)
    assert optimizer.param_groups[0]["lr"] == expected_lr
    if kind == "adam":
        assert optimizer.param_groups[0]["amsgrad"] == (root == 0)
        # Momentum depends on each rank's own weights: root's, also where they differ.
        assert same_on_every_rank(optimizer.state_dict()["state"][0]["exp_avg"], "adam.m")


def test_roots_trained_state_reaches_ranks_that_have_none():
    """The checkpoint case: root has stepped, the others have fresh optimizers."""
    model = rank_model("resume")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    if hvd.rank() == 0:
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(5, 4)).pow(2).sum().backward()
            optimizer.step()
    functions.broadcast_optimizer_state(optimizer, root_rank=0)
    check_state_is_roots(optimizer, 0, "resume")
    assert float(optimizer.state_dict()["state"][0]["step"]) == 2.0


def test_a_wrapped_fresh_optimizer_is_initialized_without_reductions_and_trains():
    model = rank_model("wrapped")
    functions.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1), momentum=0.9),
        named_parameters=model.named_parameters())
    functions.broadcast_optimizer_state(optimizer, root_rank=0)
    check_state_is_roots(optimizer, 0, "wrapped")
    g = generator("wrapped", hvd.rank())
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(6, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert same_on_every_rank(flat, "wrapped.replicas")


class Plain(torch.optim.Optimizer):
    """A stateless optimizer: gradient descent that keeps nothing per parameter."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def test_a_stateless_optimizer_broadcasts_nothing():
    model = rank_model("stateless")
    optimizer = Plain(model.parameters(), lr=1.0 + hvd.rank())
    functions.broadcast_optimizer_state(optimizer, root_rank=0)
    assert optimizer.state_dict()["state"] == {}
    assert optimizer.param_groups[0]["lr"] == 1.0 + hvd.rank()  # Horovod: not even options
    # Nothing was left in flight: the next collective is the one every rank expects.
    assert functions.allgather_object(hvd.rank(), name="stateless.after") == list(
        range(hvd.size()))


def test_lbfgs_is_refused():
    optimizer = torch.optim.LBFGS(torch.nn.Linear(2, 1).parameters())
    with pytest.raises(ValueError, match=re.escape("cannot broadcast torch.optim.LBFGS state")):
        functions.broadcast_optimizer_state(optimizer, root_rank=0)


# ---- DistributedOptimizer ----

def train(model, optimizer, label, steps=3):
    g = generator(label, hvd.rank())
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_without_named_parameters_it_trains_as_with_them_bit_for_bit():
    def build():
        torch.manual_seed(5)
        model = rank_model("names")
        functions.broadcast_parameters(model.state_dict(), root_rank=0)
        groups = [{"params": model[0].parameters()},
                  {"params": model[2].parameters(), "lr": 0.05}]
        return model, torch.optim.SGD(groups, lr=0.1, momentum=0.5)

    model, base = build()
    unnamed = hvd.DistributedOptimizer(base)
    assert sorted(unnamed._names.values()) == [
        "allreduce.noname.0.0", "allreduce.noname.0.1", "allreduce.noname.1.0",
        "allreduce.noname.1.1"]
    a = train(model, unnamed, "names")
    model, base = build()
    b = train(model, hvd.DistributedOptimizer(base, named_parameters=model.named_parameters()),
              "names")
    assert torch.equal(bits(a), bits(b))
    assert same_on_every_rank(a, "names.replicas")


def test_named_parameters_are_checked_as_horovod_checks_them():
    model = rank_model("checks")

    def build(named):
        return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        named_parameters=named)

    with pytest.raises(ValueError, match=re.escape(
            "named_parameters should be a sequence of tuples (name, parameter), usually "
            "produced by model.named_parameters().")):
        build(list(model.parameters()))
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match=re.escape(
            "Parameter names in named_parameters must be unique. Found duplicates: 0.bias")):
        build(named + [("0.bias", torch.nn.Parameter(torch.zeros(1)))])
    with pytest.raises(ValueError, match=re.escape(
            "named_parameters was specified, but one or more model parameters were not named. "
            f"Python object ids: {id(named[-1][1])}")):
        build(named[:-1])
    # Horovod's map from parameter to name, which scripts read; generators are taken once.
    opt = build(p for p in model.named_parameters())
    assert opt._parameter_names == {p: n for n, p in model.named_parameters()}


def test_constructor_arguments_are_checked():
    params = torch.nn.Linear(2, 1).parameters
    with pytest.raises(ValueError, match="gradient_predivide_factor not supported with op != "
                                         "Average"):
        hvd.DistributedOptimizer(torch.optim.SGD(params(), lr=1.0), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)
    with pytest.warns(DeprecationWarning, match="`num_groups` has been replaced by `groups`"):
        hvd.DistributedOptimizer(torch.optim.SGD(params(), lr=1.0), num_groups=2)
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="A parameter can only appear once in groups."):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), groups=[[p], [p]])
    with pytest.raises(ValueError, match="groups must consist of torch.Tensor."):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), groups=[[1.0]])
    with pytest.raises(ValueError, match="groups should be a non-negative integer"):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), groups="two")


def test_step_after_synchronize_warns_and_skip_synchronize_does_not():
    assert _STEP_AFTER_SYNCHRONIZE == STEP_WARNING
    model = rank_model("warn")
    functions.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x = torch.randn(4, 4, generator=generator("warn", hvd.rank()))
    model(x).sum().backward()
    optimizer.synchronize()
    reduced = [p.grad.clone() for p in model.parameters()]
    with pytest.warns(UserWarning, match=re.escape(STEP_WARNING)):
        optimizer.step()
    # The step used the gradients synchronize() reduced.
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), reduced))
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with optimizer.skip_synchronize():
            optimizer.step()
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()  # a new pass: no warning
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert same_on_every_rank(flat, "warn.replicas")


def test_zero_grad_while_reducing_and_extra_passes_raise_horovods_assertions():
    model = rank_model("guards")
    functions.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x = torch.randn(4, 4, generator=generator("guards", hvd.rank()))
    model(x).sum().backward()
    with pytest.raises(AssertionError, match=re.escape(_ZERO_GRAD_IN_FLIGHT)):
        optimizer.zero_grad()
    assert _ZERO_GRAD_IN_FLIGHT == (
        "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
        "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")
    with pytest.raises(AssertionError, match=re.escape(_TOO_MANY_PASSES)):
        model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


# ---- sparse gradients ----

def embedding_batch(label, r):
    """Rank r's indices: duplicates, and rows only some ranks touch."""
    g = generator(label, r)
    return torch.randint(0, 6 + 2 * r, (12,), generator=g)


def embedding_grads(embedding, label):
    """Every rank's sparse gradient of its own batch, computed here (equal weights)."""
    grads = []
    for r in range(hvd.size()):
        batch = embedding_batch(label, r)
        weights = torch.randn(12, 3, generator=generator(label + ".w", r))
        grads.append(torch.autograd.grad((embedding(batch) * weights).sum(),
                                         embedding.weight)[0])
    return grads


@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_sparse_gradients_are_the_rank_order_sum(sparse_as_dense, op):
    torch.manual_seed(9)
    embedding = torch.nn.Embedding(12, 3, sparse=True)
    dense = torch.nn.Linear(3, 1)
    functions.broadcast_parameters(embedding.state_dict(), root_rank=0)
    functions.broadcast_parameters(dense.state_dict(), root_rank=0)
    label = f"sparse.{sparse_as_dense}.{op}"
    grads = embedding_grads(embedding, label)
    assert grads[0].is_sparse
    reference = fold([g.to_dense() for g in grads])
    if op == "Average":
        reference = reference / hvd.size()
    params = [("emb", embedding.weight)] + list(dense.named_parameters())
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.0),
                                         named_parameters=params, op=getattr(hvd, op),
                                         sparse_as_dense=sparse_as_dense)
    batch = embedding_batch(label, hvd.rank())
    weights = torch.randn(12, 3, generator=generator(label + ".w", hvd.rank()))
    optimizer.zero_grad()
    ((embedding(batch) * weights).sum() + dense(weights[:2]).sum()).backward()
    optimizer.step()
    assert embedding.weight.grad.is_sparse
    assert torch.equal(bits(embedding.weight.grad.to_dense()), bits(reference))


def test_sparse_allreduce_async_sums_duplicates_and_ranks_in_order():
    shape = (5, 4, 2)  # two sparse dimensions, one dense
    mine = None
    every = []
    for r in range(hvd.size()):
        g = generator("sar", r)
        n = 0 if r == 1 else 7 + r  # rank 1 has nothing to add
        indices = torch.stack([torch.randint(0, 5, (n,), generator=g),
                               torch.randint(0, 4, (n,), generator=g)])
        values = torch.randn(n, 2, generator=g) * torch.pow(
            2.0, torch.randint(-12, 12, (n, 1), generator=g).float())
        t = torch.sparse_coo_tensor(indices, values, shape)
        every.append(t)
        if r == hvd.rank():
            mine = t
    handle = functions.sparse_allreduce_async(mine, name="sar", op=hvd.Sum)
    assert callable(handle)
    out = handle()
    assert out.is_sparse and out.is_coalesced() and out.shape == shape
    assert torch.equal(bits(out.to_dense()), bits(fold([t.to_dense() for t in every])))
    average = functions.sparse_allreduce_async(mine, name="sar.avg", op=hvd.Average)()
    assert torch.equal(bits(average.to_dense()),
                       bits(fold([t.to_dense() for t in every]) / hvd.size()))
    empty = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64), torch.zeros(0),
                                    (3,))
    assert functions.sparse_allreduce_async(empty, name="sar.empty", op=hvd.Sum)()._nnz() == 0


def test_invariant_mode_sparse_gradients_are_the_exact_sum():
    torch.manual_seed(10)
    embedding = torch.nn.Embedding(12, 3, sparse=True)
    functions.broadcast_parameters(embedding.state_dict(), root_rank=0)
    grads = embedding_grads(embedding, "inv")
    exact = torch.stack([g.to_dense().double() for g in grads]).sum(0).float()
    detcoll.set_mode("invariant")
    try:
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.0),
                                             op=hvd.Sum)
        batch = embedding_batch("inv", hvd.rank())
        weights = torch.randn(12, 3, generator=generator("inv.w", hvd.rank()))
        optimizer.zero_grad()
        (embedding(batch) * weights).sum().backward()
        optimizer.step()
    finally:
        detcoll.set_mode("ordered")
    assert embedding.weight.grad.is_sparse
    assert torch.equal(bits(embedding.weight.grad.to_dense()), bits(exact))


# ---- hvd.elastic under mpirun ----

def small_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2).to(torch.float64)


def snapshot(model, opt):
    return [p.detach().clone() for p in model.parameters()] + \
        [v.clone() for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]


def test_elastic_state_commit_restore_and_sync():
    """Ranks start apart (their own weights and epoch); sync() makes them rank 0's; restore()
    goes back to the last commit() bit for bit, model, optimizer state and plain attributes."""
    model = small_model(40 + hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, scheduler=sched,
                                   epoch=10 + hvd.rank())
    state.sync()
    assert state.epoch == 10
    for p in model.parameters():
        assert torch.equal(p.detach(), roots(p, 0, "elastic.w"))
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    sched.step()
    state.epoch = 11
    state.commit()
    committed = snapshot(model, opt)
    lr = opt.param_groups[0]["lr"]
    opt.zero_grad()
    model(torch.full((1, 3), 2.0, dtype=torch.float64)).sum().backward()
    opt.step()
    sched.step()
    state.epoch = 12
    state.restore()
    assert state.epoch == 11 and opt.param_groups[0]["lr"] == lr
    assert all(torch.equal(a, b) for a, b in zip(snapshot(model, opt), committed))


def test_elastic_sampler_deals_the_unprocessed_indices_of_an_epoch_round_robin():
    """Against the rule written out here: indices 0..n-1 shuffled by random.Random(seed +
    epoch), less the processed ones, padded by wrapping to a multiple of size(), rank r takes
    every size()-th from r; together the ranks cover every unprocessed index."""
    import random
    dataset = list(range(23))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)
    sampler.set_epoch(3)
    sampler.record_batch(0, 2)  # 2 samples on every rank
    sampler.reset()
    order = list(range(23))
    random.Random(8).shuffle(order)
    remaining = order[2 * hvd.size():]
    per_rank = -(-len(remaining) // hvd.size())
    padded = remaining + remaining[:per_rank * hvd.size() - len(remaining)]
    mine = list(iter(sampler))
    assert mine == padded[hvd.rank()::hvd.size()] and len(sampler) == per_rank
    assert set().union(*hvd.allgather_object(set(mine))) == set(remaining)
    state = hvd.elastic.TorchState(sampler=sampler)
    sampler.set_epoch(4)
    state.restore()  # back to the state at TorchState(): epoch 3, processed
    assert sampler.state_dict() == {"epoch": 3, "processed_num": 2 * hvd.size()}


def test_elastic_run_syncs_then_restores_and_explains_a_failure():
    model = small_model(50 + hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=hvd.rank())

    @hvd.elastic.run
    def train(state, fail, start):
        assert state.step == start  # rank 0's last saved state, on every rank
        state.step = 5
        state.commit()
        state.step = 6
        if fail == "job":  # as a stall past the limit fails it on every rank
            raise detcoll.TimeoutError("allreduce 'g' stalled: rank 1 did not submit it")
        if fail == "mismatch" and hvd.size() > 1:  # a caller's error, on every rank
            shape = (2, 3) if hvd.rank() == 0 else (3, 2)
            hvd.allreduce(torch.ones(shape), name="elastic.mismatch")
        return state.step

    assert train(state, None, 0) == 6  # saved at TorchState(): step = rank
    state.step = 7 + hvd.rank()  # not committed: sync() brings back the commit of 5
    with pytest.raises(detcoll.TimeoutError, match="stalled.*restart"):
        train(state, "job", 5)
    assert state.step == 5  # restored to the last commit
    if hvd.size() > 1:
        with pytest.raises(detcoll.MismatchError) as error:
            train(state, "mismatch", 5)
        assert "restart" not in str(error.value) and "(3, 2)" in str(error.value)
        assert state.step == 6  # not restored: Horovod restores on a failure of the job only
