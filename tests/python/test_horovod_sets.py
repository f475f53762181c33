"""Process sets and join, under mpirun at np 3 and 4 (docs/design.md, "Process sets" and
"Join"): collectives among some ranks give the bits of an independent reference computed from
every member's inputs, sets that share ranks never deadlock whatever order ranks enqueue in, a
rank outside a set fails alone and at once, ranks that disagree on a set fail together; a rank
that joined answers the others' allreduces with zeros (averages divide by size(), as Horovod's)
and their other collectives fail naming it."""

import time
import zlib

import pytest
import torch

import detcoll
import detcoll.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()
    if hvd.size() < 3:
        pytest.skip("process sets that share ranks need 3 ranks or more")
    yield


def data(label, r, *shape):
    """Rank r's wide-range float64 data for `label`, the same wherever it is regenerated."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{label}/{r}".encode()))
    scale = 10.0 ** torch.randint(-12, 13, shape, generator=g, dtype=torch.float64)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def fold(tensors):
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = acc + t
    return acc


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.int64 if a.element_size() == 8 else torch.int32),
        b.contiguous().view(torch.int64 if b.element_size() == 8 else torch.int32))


def sets_of(size):
    """Three sets that share ranks: every rank is in two of them."""
    return [list(range(0, size - 1)), list(range(1, size)), [0, size - 1]]


def test_sets_report_their_members():
    sets = [hvd.add_process_set(ranks) for ranks in sets_of(hvd.size())]
    try:
        ids = [ps.process_set_id for ps in sets]
        assert len(set(ids)) == 3 and 0 not in ids
        me = hvd.rank()
        for ps in sets:
            assert ps.size() == len(ps.ranks)
            assert ps.included() == (me in ps.ranks)
            if me in ps.ranks:
                assert ps.rank() == ps.ranks.index(me)
            else:
                with pytest.raises(detcoll.InvalidArgumentError, match="not part"):
                    ps.rank()
    finally:
        for ps in sets:
            assert hvd.remove_process_set(ps) is True
            assert ps.process_set_id is None


def test_collectives_in_sets_that_share_ranks_match_references():
    size, me = hvd.size(), hvd.rank()
    sets = [hvd.add_process_set(ranks) for ranks in sets_of(size)]
    try:
        mine = [ps for ps in sets if me in ps.ranks]
        # Each rank enqueues its sets' requests in an order of its own: no deadlock either way.
        if me % 2:
            mine.reverse()
        handles = []
        for ps in mine:
            k = ps.process_set_id
            x = data(f"sum{k}", me, 5, 3)
            handles.append(("sum", ps, hvd.allreduce_async(x, name=f"s{k}", op=hvd.Sum,
                                                           process_set=ps)))
            handles.append(("avg", ps, hvd.allreduce_async(x, name=f"a{k}", process_set=ps)))
            handles.append(("gather", ps, hvd.allgather_async(
                data(f"g{k}", me, ps.ranks.index(me) + 1, 2), name=f"g{k}", process_set=ps)))
            handles.append(("scatter", ps, hvd.reducescatter_async(
                data(f"rs{k}", me, 7, 2), name=f"rs{k}", op=hvd.Sum, process_set=ps)))
        for kind, ps, h in handles:
            out = hvd.synchronize(h)
            k, n, r = ps.process_set_id, ps.size(), ps.rank()
            if kind in ("sum", "avg"):
                expected = fold([data(f"sum{k}", m, 5, 3) for m in ps.ranks])
                if kind == "avg":
                    expected = expected / n
            elif kind == "gather":
                expected = torch.cat([data(f"g{k}", m, i + 1, 2) for i, m in enumerate(ps.ranks)])
            else:
                total = fold([data(f"rs{k}", m, 7, 2) for m in ps.ranks])
                rows = [7 // n + (1 if i < 7 % n else 0) for i in range(n)]
                expected = total[sum(rows[:r]):sum(rows[:r + 1])]
            assert bits_equal(out, expected), (kind, ps.ranks)
        # Alltoall and broadcast (root given as a rank of the world) in the first set.
        first = sets[0]
        if me in first.ranks:
            n = first.size()
            splits = [(first.rank() + j) % 3 for j in range(n)]
            x = data("a2a", me, sum(splits), 2)
            out, received = hvd.alltoall(x, splits=splits, name="a2a", process_set=first)
            pieces = []
            for m in first.ranks:
                theirs = [(first.ranks.index(m) + j) % 3 for j in range(n)]
                start = sum(theirs[:first.rank()])
                pieces.append(data("a2a", m, sum(theirs), 2)[start:start + theirs[first.rank()]])
            assert bits_equal(out, torch.cat(pieces))
            assert received.tolist() == [p.shape[0] for p in pieces]
            root = first.ranks[-1]
            got = hvd.broadcast(data("bc", me, 4), root_rank=root, name="bc", process_set=first)
            assert bits_equal(got, data("bc", root, 4))
        hvd.barrier(process_set=sets[1]) if me in sets[1].ranks else None
    finally:
        for ps in sets:
            hvd.remove_process_set(ps)


def test_a_rank_outside_a_set_fails_alone_and_at_once():
    size, me = hvd.size(), hvd.rank()
    ps = hvd.add_process_set([0, 1])
    try:
        x = torch.full((3,), float(me + 1))
        if me in (0, 1):
            out = hvd.allreduce(x, name="members", op=hvd.Sum, process_set=ps)
            assert out.tolist() == [3.0] * 3
            # A root that is not a member fails on every member, naming it.
            with pytest.raises(detcoll.InvalidArgumentError, match="root 2 is not a member"):
                hvd.broadcast(x, root_rank=2, name="outside.root", process_set=ps)
        else:
            with pytest.raises(detcoll.InvalidArgumentError,
                               match=f"rank {me} is not a member of the provided process set"):
                hvd.allreduce(x, name="members", process_set=ps)
        hvd.barrier()
    finally:
        hvd.remove_process_set(ps)


def test_sets_are_namespaces():
    """As in Horovod, a name in one process set never pairs with the same name in another: two
    disjoint sets run ops of the same names with different shapes at the same time, each with
    its members' result. (Unnamed ops are numbered by one counter per process, as Horovod's
    handles are, so they pair only where the members have made the same number of ops.)"""
    size, me = hvd.size(), hvd.rank()
    a, b = hvd.add_process_set([0, 1]), hvd.add_process_set(list(range(2, size)))
    try:
        mine = a if me in (0, 1) else b
        width = 3 if mine is a else 5
        for i in range(5):
            out = hvd.allreduce(data(f"ns{i}", me, width), name=f"same{i}", op=hvd.Sum,
                                process_set=mine)
            assert bits_equal(out, fold([data(f"ns{i}", m, width) for m in mine.ranks]))
            rows = hvd.allgather(data(f"nsg{i}", me, 1, width), name=f"gathered{i}",
                                 process_set=mine)
            assert bits_equal(rows, torch.cat([data(f"nsg{i}", m, 1, width) for m in mine.ranks]))
        hvd.barrier()
    finally:
        hvd.remove_process_set(a)
        hvd.remove_process_set(b)


def test_functions_and_the_optimizer_in_a_set():
    """Horovod 0.28 takes process_set= in broadcast_object, allgather_object,
    sparse_allreduce_async and DistributedOptimizer: each runs among the members, in the order of
    their ranks; the ranks outside train alone meanwhile (rank 0 is outside)."""
    size, me = hvd.size(), hvd.rank()
    members = list(range(1, size))
    ps = hvd.add_process_set(members)
    try:
        if me not in members:
            with pytest.raises(detcoll.InvalidArgumentError, match="not a member"):
                hvd.allgather_object(me, process_set=ps)
            hvd.barrier()
            return
        root = members[-1]
        assert hvd.broadcast_object({"from": me}, root_rank=root, process_set=ps) == {"from": root}
        assert hvd.allgather_object(("r", me), process_set=ps) == [("r", m) for m in members]
        # Sparse: each member's entries at rows m and 0; the sum over the members in their order.
        sparse = torch.sparse_coo_tensor(torch.tensor([[me, 0]]), data("sp", me, 2), (size,))
        out = hvd.sparse_allreduce_async(sparse, name="sp", op=hvd.Sum, process_set=ps)()
        expected = torch.zeros(size, dtype=torch.float64)
        for m in members:
            expected[m] = data("sp", m, 2)[0]
        expected[0] = fold([data("sp", m, 2)[1:] for m in members])[0]
        assert bits_equal(out.to_dense(), expected)
        # DistributedOptimizer in the set: Average divides by the set's size.
        weight = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([weight], lr=1.0),
                                       named_parameters=[("w", weight)], process_set=ps)
        (weight * data("grad", me, 4)).sum().backward()
        opt.step()
        average = fold([data("grad", m, 4) for m in members]) / len(members)
        assert bits_equal(weight.detach(), -average)
        hvd.barrier()
    finally:
        hvd.remove_process_set(ps)


def test_the_invariant_optimizer_refuses_a_set():
    ps = hvd.add_process_set([0, 1])
    try:
        if hvd.rank() in (0, 1):
            detcoll.set_mode("invariant")
            try:
                with pytest.raises(detcoll.InvalidArgumentError, match="not supported in invariant"):
                    hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))],
                                                             lr=1.0), process_set=ps)
            finally:
                detcoll.set_mode("ordered")
    finally:
        hvd.remove_process_set(ps)


def test_ranks_that_add_different_sets_all_fail():
    ranks = [0, 1] if hvd.rank() != 2 else [0, 2]
    with pytest.raises(detcoll.MismatchError, match="ranks of the process set"):
        hvd.add_process_set(ranks)
    # Nothing was added: the next set gets registered everywhere alike.
    ps = hvd.add_process_set([1, 2])
    assert ps.size() == 2
    hvd.remove_process_set(ps)


def test_join_answers_allreduces_with_zeros_and_returns_the_last_rank():
    size, me = hvd.size(), hvd.rank()
    steps = me + 1  # rank r runs out of data after r + 1 steps
    for s in range(steps):
        x = data(f"join{s}", me, 6)
        out = hvd.allreduce(x, name=f"join.step{s}")  # Average: divides by size(), as Horovod
        active = [r for r in range(size) if r + 1 > s]
        parts = [data(f"join{s}", r, 6) if r in active else torch.zeros(6, dtype=torch.float64)
                 for r in range(size)]
        assert bits_equal(out, fold(parts) / size), s
    last = hvd.join()
    assert last == size - 1


def test_other_collectives_fail_while_ranks_have_joined():
    size, me = hvd.size(), hvd.rank()
    if me == 0:
        hvd.join()
        return
    with pytest.raises(detcoll.InvalidArgumentError, match="rank 0 has joined"):
        hvd.broadcast(torch.ones(2), root_rank=1, name="after.join")
    with pytest.raises(detcoll.InvalidArgumentError, match="rank 0 has joined"):
        hvd.allgather(torch.ones(2), name="after.join.gather")
    out = hvd.allreduce(torch.full((2,), float(me)), name="after.join.sum", op=hvd.Sum)
    assert out.tolist() == [float(sum(range(1, size)))] * 2
    assert hvd.join() in range(1, size)


def test_every_rank_joins_in_turn_while_the_others_try_unnamed_allgathers():
    """Horovod's join test: rank k joins while the others call an unnamed allgather, which must
    fail at once naming rank k, then join too. The joined rank made no allgather, so from the
    second round on the ranks' unnamed names differ: the refusal must not wait for them to
    match. join() returns the same rank everywhere, never the first to join."""
    size, me = hvd.size(), hvd.rank()
    start = time.monotonic()
    for first in range(size):
        if me == first:
            last = hvd.join()
        else:
            # Ranks that got their refusal first may have joined too: "ranks 1 and 3 have".
            with pytest.raises(detcoll.InvalidArgumentError,
                               match=rf"ranks? ([0-9, and]* )?\b{first}\b.* ha(s|ve) joined"):
                hvd.allgather(torch.zeros(4, 3))
            last = hvd.join()
        assert last != first
        assert hvd.allgather_object(last, name=f"joined.last.{first}") == [last] * size
    assert time.monotonic() - start < 30


def test_a_set_removed_with_a_request_in_flight_fails_it():
    """Removing a set whose requests have not completed is a misuse: the request that waits for
    a member that will never make it fails at once, naming the set, instead of waiting forever
    (a removed set's requests are no stall: the coordinator no longer knows its members)."""
    ps = hvd.add_process_set([0, 1])
    set_id = ps.process_set_id
    handle = hvd.allreduce_async(torch.ones(3), name="orphaned", process_set=ps) \
        if hvd.rank() == 0 else None
    start = time.monotonic()
    hvd.remove_process_set(ps)
    if handle is not None:
        with pytest.raises(detcoll.InvalidArgumentError,
                           match=rf"'allreduce.orphaned' in process set {set_id}: "
                                 r"the process set was removed while the request was in flight"):
            hvd.synchronize(handle)
        assert time.monotonic() - start < 10
    hvd.barrier()
