"""detcoll.torch against Horovod 0.28's documented behaviour, under mpirun at np 1, 2 and 3:
names and signatures, dtypes, scaling, Product, reducescatter and alltoall, grouped and
asynchronous variants, refusals, errors on every rank, and the gradients of the autograd ops
(float64, against the formulas computed here from every rank's inputs)."""

import math
import pathlib
import time
import zlib

import pytest
import torch

import detcoll
import detcoll.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()  # shutdown runs at exit
    yield


def gen(label, r):
    return torch.Generator().manual_seed(zlib.crc32(f"{label}/{r}".encode()))


def randn(label, r, *shape):
    """Rank r's float64 data for `label`, the same on every rank that regenerates it."""
    return torch.randn(*shape, generator=gen(label, r), dtype=torch.float64)


def fold(tensors, combine=torch.add):
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = combine(acc, t)
    return acc


def split_rows(n, size):
    return [n // size + (1 if r < n % size else 0) for r in range(size)]


# ---- names, queries and refusals ----

PUBLIC = """allgather_object broadcast_object broadcast_optimizer_state broadcast_parameters
allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce grouped_allreduce_async
grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async allgather allgather_async
grouped_allgather grouped_allgather_async broadcast broadcast_async broadcast_ broadcast_async_
alltoall alltoall_async reducescatter reducescatter_async grouped_reducescatter
grouped_reducescatter_async join barrier poll synchronize init shutdown is_initialized
start_timeline stop_timeline size local_size cross_size rank local_rank cross_rank
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built
ccl_built cuda_built rocm_built ProcessSet global_process_set add_process_set
remove_process_set Average Sum Adasum Min Max Product HorovodInternalError
DistributedOptimizer Compression""".split()


def test_horovod_names_exist():
    missing = [n for n in PUBLIC + ["SyncBatchNorm", "elastic"] if not hasattr(hvd, n)]
    assert missing == []
    assert [n for n in ("run", "TorchState", "ElasticSampler", "ObjectState")
            if not hasattr(hvd.elastic, n)] == []
    assert len({hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product}) == 6
    assert hvd.HorovodInternalError is detcoll.Error


def test_queries():
    assert hvd.mpi_built() is True and hvd.mpi_enabled() is True
    assert hvd.gloo_built() is False and hvd.gloo_enabled() is False
    # CUDA and NCCL as CMake found them (the build's generated common/config.h).
    config = (pathlib.Path(detcoll.__file__).resolve().parents[2] / "common" / "config.h"
              ).read_text()
    with_cuda = "#define DETCOLL_WITH_CUDA 1" in config
    with_nccl = "#define DETCOLL_WITH_NCCL 1" in config
    assert hvd.cuda_built() is with_cuda
    assert isinstance(hvd.nccl_built(), int)
    assert (hvd.nccl_built() > 20000) is with_nccl  # NCCL_VERSION_CODE: 2.x as 2xxyy
    for query in (hvd.ddl_built, hvd.ccl_built, hvd.rocm_built):
        assert query() is False
    assert isinstance(hvd.mpi_threads_supported(), bool)
    assert hvd.is_initialized() is True
    assert hvd.is_homogeneous() is True  # one node under the tests' mpirun
    assert hvd.cross_size() * hvd.local_size() == hvd.size()
    assert 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.global_process_set.size() == hvd.size()
    assert hvd.global_process_set.rank() == hvd.rank()
    assert hvd.global_process_set.included() is True
    assert hvd.global_process_set.ranks == list(range(hvd.size()))


def test_refusals_name_the_limitation_and_the_alternative():
    with pytest.raises(detcoll.InvalidArgumentError, match="DETCOLL_TIMELINE"):
        hvd.start_timeline("/tmp/never.json")
    with pytest.raises(detcoll.InvalidArgumentError, match="DETCOLL_TIMELINE"):
        hvd.stop_timeline()
    # A set not added: every call that takes one refuses it at once, on this rank alone.
    subset = hvd.ProcessSet([0])
    for call in (lambda: hvd.allreduce(torch.ones(2), name="ps.ar", process_set=subset),
                 lambda: hvd.allgather(torch.ones(2), name="ps.ag", process_set=subset),
                 lambda: hvd.barrier(process_set=subset)):
        with pytest.raises(detcoll.InvalidArgumentError, match="has not been added"):
            call()
    assert hvd.remove_process_set(subset) is False
    assert hvd.remove_process_set(hvd.global_process_set) is False
    with pytest.raises(detcoll.InvalidArgumentError) as error:
        hvd.allreduce(torch.ones(3), name="adasum", op=hvd.Adasum)
    message = str(error.value)
    assert "Adasum" in message and "op=hvd.Average" in message and "invariant" in message
    with pytest.raises(detcoll.InvalidArgumentError, match="Sum or Average"):
        hvd.reducescatter(torch.ones(4), name="rs.min", op=hvd.Min)
    with pytest.raises(detcoll.InvalidArgumentError, match="supersedes"):
        hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum)
    if hvd.size() > 1:  # every length divides over one rank
        with pytest.raises(detcoll.InvalidArgumentError, match="even multiple"):
            hvd.alltoall(torch.ones(hvd.size() + 1), name="a2a.uneven")
    with pytest.raises(detcoll.InvalidArgumentError, match="entries in splits"):
        hvd.alltoall(torch.ones(4), splits=[1] * (hvd.size() + 1), name="a2a.len")
    with pytest.raises(detcoll.InvalidArgumentError, match="greater than the first dimension"):
        hvd.alltoall(torch.ones(2), splits=[3] * hvd.size(), name="a2a.sum")
    # Nothing was left in flight: the world still works.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.refusals"),
                       torch.full((2,), float(hvd.size())))


def test_a_bad_argument_on_one_rank_fails_every_rank():
    if hvd.size() == 1:
        return
    bad = hvd.size() - 1
    splits = [1] * hvd.size() if hvd.rank() != bad else [1] * (hvd.size() + 1)
    with pytest.raises(detcoll.InvalidArgumentError, match=f"rank {bad}"):
        hvd.alltoall(torch.ones(hvd.size()), splits=splits, name="one.a2a")
    op = hvd.Max if hvd.rank() == bad else hvd.Sum
    with pytest.raises(detcoll.InvalidArgumentError, match=f"rank {bad}.*Sum or Average"):
        hvd.reducescatter(torch.ones(4), name="one.rs", op=op)
    with pytest.raises(detcoll.InvalidArgumentError, match=f"rank {bad}"):
        hvd.allgather(torch.ones(()) if hvd.rank() == bad else torch.ones(1), name="one.ag")
    hvd.barrier()


def test_shape_mismatch_with_equal_counts_fails_every_rank_naming_the_shapes():
    if hvd.size() == 1:
        return
    shape = (2, 3) if hvd.rank() % 2 == 0 else (3, 2)
    calls = {
        "allreduce": lambda: hvd.allreduce(torch.ones(shape), name="shape.ar"),
        "broadcast": lambda: hvd.broadcast(torch.ones(shape), root_rank=0, name="shape.bc"),
        "reducescatter": lambda: hvd.reducescatter(torch.ones(shape), name="shape.rs"),
        "allgather": lambda: hvd.allgather(torch.ones((1,) + shape), name="shape.ag"),
    }
    for call, run in calls.items():
        with pytest.raises(detcoll.MismatchError) as error:
            run()
        message = str(error.value)
        assert "2, 3" in message and "3, 2" in message, f"{call}: {message}"


# ---- dtypes ----

MOVED = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
         torch.bfloat16, torch.float32, torch.float64, torch.bool]


def values(dtype, r, n):
    """Rank r's n values of dtype, over the dtype's range (negatives included)."""
    k = torch.arange(n, dtype=torch.int64) * 37 + r * 101 + 5
    if dtype == torch.bool:
        return (k % 3) == 0
    if dtype == torch.uint8:
        return (k % 256).to(dtype)
    if dtype == torch.int8:
        return (k % 256 - 128).to(dtype)
    if dtype == torch.int16:
        return (k * 331 % 65536 - 32768).to(dtype)
    if dtype in (torch.int32, torch.int64):
        return ((k * 7919) * (-1) ** k).to(dtype)
    return ((k.to(torch.float64) - 50.0) / 8.0).to(dtype)


@pytest.mark.parametrize("dtype", MOVED, ids=str)
def test_allgather_broadcast_alltoall_move_every_dtype(dtype):
    size, rank = hvd.size(), hvd.rank()
    rows = [r + 1 for r in range(size)]
    mine = values(dtype, rank, rows[rank] * 3).reshape(rows[rank], 3)
    gathered = hvd.allgather(mine, name=f"dt.ag.{dtype}")
    expected = torch.cat([values(dtype, r, rows[r] * 3).reshape(rows[r], 3) for r in range(size)])
    assert gathered.dtype == dtype and torch.equal(gathered, expected)
    root = size - 1
    out = hvd.broadcast(values(dtype, rank, 7), root_rank=root, name=f"dt.bc.{dtype}")
    assert out.dtype == dtype and torch.equal(out, values(dtype, root, 7))
    inplace = values(dtype, rank, 5)
    assert hvd.broadcast_(inplace, root_rank=0, name=f"dt.bc_.{dtype}") is inplace
    assert torch.equal(inplace, values(dtype, 0, 5))
    # alltoall: rank r sends (r + j) % 3 rows to rank j.
    splits = [(rank + j) % 3 for j in range(size)]
    data = values(dtype, rank, sum(splits) * 2).reshape(-1, 2)
    out, received = hvd.alltoall(data, splits=splits, name=f"dt.a2a.{dtype}")
    pieces = []
    for r in range(size):
        theirs = [(r + j) % 3 for j in range(size)]
        rows_r = values(dtype, r, sum(theirs) * 2).reshape(-1, 2)
        start = sum(theirs[:rank])
        pieces.append(rows_r[start:start + theirs[rank]])
    assert out.dtype == dtype and torch.equal(out, torch.cat(pieces))
    assert received.dtype == torch.int32
    assert received.tolist() == [(r + rank) % 3 for r in range(size)]


def test_reductions_refuse_the_dtypes_horovod_refuses():
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.bool):
        with pytest.raises(detcoll.InvalidArgumentError, match="unsupported dtype"):
            hvd.allreduce(torch.zeros(3, dtype=dtype), name=f"refuse.{dtype}")
        with pytest.raises(detcoll.InvalidArgumentError, match="unsupported dtype"):
            hvd.reducescatter(torch.zeros(3, dtype=dtype), name=f"refuse.rs.{dtype}")


# ---- scaling, Average on integers, Product ----

def trunc_scale(x, factor):
    return int(math.trunc(float(factor) * float(x)))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_prescale_postscale_and_average_truncate_as_horovod(dtype):
    size, rank = hvd.size(), hvd.rank()
    xs = [[-(7 * r + 3), 11 * r + 5, 1000 * r - 2999, 1] for r in range(size)]
    mine = torch.tensor(xs[rank], dtype=dtype)
    out = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.5, postscale_factor=0.3,
                        name=f"iscale.{dtype}")
    expected = [trunc_scale(sum(trunc_scale(x[i], 2.5) for x in xs), 0.3) for i in range(4)]
    assert out.dtype == dtype and out.tolist() == expected
    average = hvd.allreduce(mine, name=f"iavg.{dtype}")  # Average: trunc(sum * (1 / size))
    assert average.tolist() == [trunc_scale(sum(x[i] for x in xs), 1.0 / size)
                                for i in range(4)]
    rows = torch.tensor([xs[rank]] * (size + 1), dtype=dtype)
    scattered = hvd.reducescatter(rows, name=f"irs.{dtype}", prescale_factor=1.5,
                                  postscale_factor=2.0)  # Average
    sums = [sum(trunc_scale(x[i], 1.5) for x in xs) for i in range(4)]
    row = [trunc_scale(s, 2.0 / size) for s in sums]
    assert scattered.tolist() == [row] * split_rows(size + 1, size)[rank]


def test_float_prescale_postscale():
    size, rank = hvd.size(), hvd.rank()
    xs = [randn("fscale", r, 6) for r in range(size)]
    out = hvd.allreduce(xs[rank], op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0,
                        name="fscale")
    assert torch.equal(out, fold([x * 0.5 for x in xs]) * 3.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scaling_is_done_in_float32_and_rounded_once(dtype):
    """Horovod scales 16-bit floats on the CPU in float32 math, rounding once to the dtype (its
    tests compare with factor.float() * tensor.float()); multiplying in the dtype would round the
    factor first (0.19151945 is 0.19152832 in float16) and differ by an ulp."""
    size, rank = hvd.size(), hvd.rank()
    factor = 0.1915194503788923

    def summed(tensors):  # the ordered fold of 16-bit floats: in float32, rounded once
        return fold([t.to(torch.float32) for t in tensors]).to(dtype)

    xs = [(randn("hscale", r, 64) * 60).round().to(dtype) for r in range(size)]
    pre = hvd.allreduce(xs[rank], op=hvd.Sum, prescale_factor=factor, name=f"hscale.pre.{dtype}")
    scaled = [(x.to(torch.float32) * factor).to(dtype) for x in xs]
    assert torch.equal(pre, summed(scaled))
    assert not torch.equal(scaled[0], xs[0] * factor)  # the rule matters for these values
    post = hvd.allreduce(xs[rank], op=hvd.Sum, postscale_factor=factor, name=f"hscale.post.{dtype}")
    assert torch.equal(post, (summed(xs).to(torch.float32) * factor).to(dtype))
    rows = hvd.reducescatter(xs[rank].reshape(16, 4), op=hvd.Sum, prescale_factor=factor,
                             name=f"hscale.rs.{dtype}")
    counts = split_rows(16, size)
    start = sum(counts[:rank])
    assert torch.equal(rows, summed(scaled).reshape(16, 4)[start:start + counts[rank]])


def test_product_is_the_rank_order_fold():
    size, rank = hvd.size(), hvd.rank()
    xs = [randn("prod", r, 9) * 3 for r in range(size)]
    out = hvd.allreduce(xs[rank], op=hvd.Product, name="prod.f64")
    assert torch.equal(out, fold(xs, torch.mul))
    out32 = hvd.allreduce(xs[rank].float(), op=hvd.Product, name="prod.f32",
                          prescale_factor=2.0)
    assert torch.equal(out32, fold([x.float() * 2.0 for x in xs], torch.mul))
    big = [torch.tensor([2**20 + r, -(2**19) - 3 * r, 7], dtype=torch.int32) for r in range(size)]
    wrapped = hvd.allreduce(big[rank], op=hvd.Product, name="prod.i32")
    assert torch.equal(wrapped, fold(big, torch.mul))  # two's complement wraparound
    grouped = hvd.grouped_allreduce([xs[rank], big[rank].long()], op=hvd.Product,
                                    name="prod.grouped")
    assert torch.equal(grouped[0], fold(xs, torch.mul))
    assert torch.equal(grouped[1], fold([b.long() for b in big], torch.mul))


def test_product_in_invariant_mode():
    detcoll.set_mode("invariant")
    try:
        with pytest.raises(detcoll.InvalidArgumentError, match="not world-size invariant.*ordered"):
            hvd.allreduce(torch.ones(3), op=hvd.Product, name="prod.inv")
        ints = [torch.tensor([r + 2, -3], dtype=torch.int64) for r in range(hvd.size())]
        assert torch.equal(hvd.allreduce(ints[hvd.rank()], op=hvd.Product, name="prod.inv.i"),
                           fold(ints, torch.mul))
    finally:
        detcoll.set_mode("ordered")


def test_min_and_max():
    size, rank = hvd.size(), hvd.rank()
    xs = [randn("minmax", r, 8) for r in range(size)]
    assert torch.equal(hvd.allreduce(xs[rank], op=hvd.Min, name="min"), fold(xs, torch.minimum))
    assert torch.equal(hvd.allreduce(xs[rank], op=hvd.Max, name="max"), fold(xs, torch.maximum))


# ---- reducescatter and alltoall ----

@pytest.mark.parametrize("rows", [1, 5, 7])
def test_reducescatter_splits_dimension_zero_as_horovod(rows):
    size, rank = hvd.size(), hvd.rank()
    xs = [randn(f"rs{rows}", r, rows, 3) for r in range(size)]
    split = split_rows(rows, size)
    start = sum(split[:rank])
    total = hvd.allreduce(xs[rank], op=hvd.Sum, name=f"rs.ref{rows}")
    out = hvd.reducescatter(xs[rank], op=hvd.Sum, name=f"rs.sum{rows}")
    assert out.shape == (split[rank], 3)
    assert torch.equal(out, total[start:start + split[rank]])
    assert torch.equal(out, fold(xs)[start:start + split[rank]])
    average = hvd.reducescatter(xs[rank], name=f"rs.avg{rows}")  # the default: Average
    assert torch.equal(average, (fold(xs) / size)[start:start + split[rank]])
    handle = hvd.reducescatter_async(xs[rank], op=hvd.Sum, name=f"rs.async{rows}",
                                     prescale_factor=0.5, postscale_factor=4.0)
    assert torch.equal(hvd.synchronize(handle),
                       (fold([x * 0.5 for x in xs]) * 4.0)[start:start + split[rank]])


def test_alltoall_equal_and_uneven_splits():
    size, rank = hvd.size(), hvd.rank()
    data = [torch.arange(size * 2, dtype=torch.float32).reshape(size * 2, 1) + 100 * r
            for r in range(size)]
    out = hvd.alltoall(data[rank], name="a2a.equal")  # splits None: the tensor alone
    assert isinstance(out, torch.Tensor)
    assert torch.equal(out, torch.cat([d[2 * rank:2 * rank + 2] for d in data]))
    # Rank r sends j + 2r rows to rank j, and keeps 3 trailing rows unsent.
    splits = [[j + 2 * r for j in range(size)] for r in range(size)]
    rows = [torch.arange((sum(s) + 3) * 2, dtype=torch.int64).reshape(-1, 2) * 10 + r
            for r, s in enumerate(splits)]
    out, received = hvd.alltoall(rows[rank], splits=torch.tensor(splits[rank],
                                                                 dtype=torch.int32),
                                 name="a2a.uneven")
    expected = torch.cat([rows[r][sum(splits[r][:rank]):sum(splits[r][:rank + 1])]
                          for r in range(size)])
    assert torch.equal(out, expected)
    assert received.tolist() == [splits[r][rank] for r in range(size)]
    handle = hvd.alltoall_async(data[rank], name="a2a.async")
    output, received = hvd.synchronize(handle)  # async: always the pair
    assert torch.equal(output, torch.cat([d[2 * rank:2 * rank + 2] for d in data]))
    assert received.tolist() == [2] * size


# ---- grouped and asynchronous variants ----

def test_grouped_variants():
    size, rank = hvd.size(), hvd.rank()
    a = [randn("ga", r, 5) for r in range(size)]
    b = [randn("gb", r, 2, 3) for r in range(size)]
    out = hvd.grouped_allreduce([a[rank], b[rank]], op=hvd.Sum, name="g.ar")
    assert isinstance(out, list) and torch.equal(out[0], fold(a)) and torch.equal(out[1], fold(b))
    inplace = [a[rank].clone(), b[rank].clone()]
    hvd.grouped_allreduce_(inplace, op=hvd.Sum, name="g.ar_")
    assert torch.equal(inplace[0], fold(a)) and torch.equal(inplace[1], fold(b))
    handle = hvd.grouped_allreduce_async([a[rank], b[rank]], name="g.ara")
    avg = hvd.synchronize(handle)
    assert torch.equal(avg[0], fold(a) / size) and torch.equal(avg[1], fold(b) / size)
    handle = hvd.grouped_allreduce_async_(inplace, op=hvd.Max, name="g.ara_")
    hvd.synchronize(handle)
    assert torch.equal(inplace[0], fold(a))  # the max of equal sums
    rows = [torch.full((r + 1, 2), float(r)) for r in range(size)]
    gathered = hvd.grouped_allgather([rows[rank], a[rank].reshape(5, 1)], name="g.ag")
    assert torch.equal(gathered[0], torch.cat(rows))
    assert torch.equal(gathered[1], torch.cat([x.reshape(5, 1) for x in a]))
    gathered = hvd.synchronize(hvd.grouped_allgather_async([rows[rank]], name="g.aga"))
    assert torch.equal(gathered[0], torch.cat(rows))
    split = split_rows(5, size)
    start = sum(split[:rank])
    scattered = hvd.grouped_reducescatter([a[rank], b[rank]], op=hvd.Sum, name="g.rs")
    assert torch.equal(scattered[0], fold(a)[start:start + split[rank]])
    split2 = split_rows(2, size)
    start2 = sum(split2[:rank])
    assert torch.equal(scattered[1], fold(b)[start2:start2 + split2[rank]])
    scattered = hvd.synchronize(hvd.grouped_reducescatter_async([a[rank]], name="g.rsa"))
    assert torch.equal(scattered[0], (fold(a) / size)[start:start + split[rank]])


def test_unnamed_ops_pair_by_call_order():
    size, rank = hvd.size(), hvd.rank()
    xs = [randn("noname", r, 4) for r in range(size)]
    handles = [hvd.allreduce_async(xs[rank], op=hvd.Sum) for _ in range(3)]
    assert all(torch.equal(hvd.synchronize(h), fold(xs)) for h in handles)
    assert torch.equal(hvd.allgather(xs[rank].reshape(1, 4)), torch.stack(xs))


def test_barrier():
    for _ in range(3):
        assert hvd.barrier() is None


def test_a_blocking_call_pairs_with_an_asynchronous_one():
    size, rank = hvd.size(), hvd.rank()
    xs = [randn("mixed", r, 6) for r in range(size)]
    if rank == 0:
        total = hvd.allreduce(xs[rank], op=hvd.Sum, name="mixed.ar")
        gathered = hvd.allgather(xs[rank][:rank + 1].reshape(-1, 1), name="mixed.ag")
        out, received = hvd.alltoall(xs[rank][:size], splits=[1] * size, name="mixed.a2a")
    else:
        total = hvd.synchronize(hvd.allreduce_async(xs[rank], op=hvd.Sum, name="mixed.ar"))
        gathered = hvd.synchronize(hvd.allgather_async(xs[rank][:rank + 1].reshape(-1, 1),
                                                       name="mixed.ag"))
        handle = hvd.alltoall_async(xs[rank][:size], splits=[1] * size, name="mixed.a2a")
        while not hvd.poll(handle):
            pass
        out, received = hvd.synchronize(handle)
    assert torch.equal(total, fold(xs))
    assert torch.equal(gathered, torch.cat([x[:r + 1] for r, x in enumerate(xs)]).reshape(-1, 1))
    assert torch.equal(out, torch.stack([x[rank] for x in xs]))
    assert received.tolist() == [1] * size


def test_two_exchange_ops_complete_whatever_order_ranks_synchronize_them():
    """Allgathers and alltoalls take two exchanges (the counts, then the data). Each rank here
    synchronizes its ops in an order of its own (rank r starts at op r): if an op's second
    exchange waited for its own synchronize(), rank 0 would wait in op 0's data for rank 1,
    which waits in op 1's for rank 0. Horovod completes them in any order, so must detcoll, well
    within the stall limit; every output is checked against the inputs."""
    size, rank = hvd.size(), hvd.rank()
    ops = []
    for k in range(4):
        rows = [torch.full((r + k + 1, 2), float(10 * k + r)) for r in range(size)]
        ops.append(("ag", rows, hvd.allgather_async(rows[rank], name=f"order.ag{k}")))
        data = [torch.arange(2 * size, dtype=torch.float64) + 100 * r + k for r in range(size)]
        ops.append(("a2a", data, hvd.alltoall_async(data[rank], name=f"order.a2a{k}")))
    start = time.monotonic()
    for i in range(len(ops)):
        kind, inputs, handle = ops[(i + 2 * rank) % len(ops)]
        if kind == "ag":
            assert torch.equal(hvd.synchronize(handle), torch.cat(inputs))
        else:
            out, received = hvd.synchronize(handle)
            assert torch.equal(out, torch.cat([d[2 * rank:2 * rank + 2] for d in inputs]))
            assert received.tolist() == [2] * size
    assert time.monotonic() - start < 30


class _FailingTorch:
    """torch, except that empty() of a tensor of more than 1000 rows raises, as an allocation
    that runs out of memory would."""

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, shape, *args, **kwargs):
        if (shape if isinstance(shape, int) else shape[0]) > 1000:
            raise RuntimeError(f"simulated: cannot allocate {tuple(shape)}")
        return torch.empty(shape, *args, **kwargs)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_rank_that_cannot_make_its_second_exchange_fails_every_rank(monkeypatch, asynchronous):
    """The buffers of an allgather's or alltoall's data exchange are made after the counts are
    known, on the caller's thread or the progress thread. When rank 0 cannot make them, every
    rank's op fails with rank 0's reason instead of the others waiting for it."""
    size, rank = hvd.size(), hvd.rank()
    if size == 1:
        pytest.skip("one rank: nobody waits for another")
    from detcoll.torch import _exchanges
    if rank == 0:
        monkeypatch.setattr(_exchanges, "torch", _FailingTorch())
    calls = [lambda n: hvd.allgather_async(torch.ones(600, 2), name=n),
             lambda n: hvd.alltoall_async(torch.ones(600 * size, 2), name=n)]
    for i, call in enumerate(calls):
        handle = call(f"nomem{i}.{asynchronous}")
        if asynchronous:
            time.sleep(0.5)  # the progress thread makes the second exchange meanwhile
        with pytest.raises(detcoll.InvalidArgumentError,
                           match="rank 0: RuntimeError: simulated: cannot allocate"):
            hvd.synchronize(handle)
    monkeypatch.undo()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after.nomem").item() == size


def test_a_dropped_handle_does_not_block_and_still_takes_part():
    """Rank 0 drops its alltoall and allgather handles, then waits at a barrier that the other
    ranks reach before they enqueue theirs: if dropping waited for them, this would deadlock.
    Their results show that rank 0's second exchanges still ran."""
    size, rank = hvd.size(), hvd.rank()
    data = [torch.arange(size, dtype=torch.float64) + 10 * r for r in range(size)]
    rows = [torch.full((r + 1, 2), float(r)) for r in range(size)]
    if rank == 0:
        handle = hvd.alltoall_async(data[rank], splits=[1] * size, name="drop.a2a")  # noqa: F841
        dropped = hvd.allgather_async(rows[rank], name="drop.ag")  # noqa: F841
        del handle, dropped
        hvd.barrier()
    else:
        hvd.barrier()
        out, _ = hvd.alltoall(data[rank], splits=[1] * size, name="drop.a2a")
        assert torch.equal(out, torch.stack([d[rank] for d in data]))
        assert torch.equal(hvd.allgather(rows[rank], name="drop.ag"), torch.cat(rows))
    hvd.barrier()


def test_broadcast_parameters_and_object_still_work():
    torch.manual_seed(100 + hvd.rank())
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    w = hvd.allgather(model.weight.detach().reshape(1, -1).contiguous(), name="bp.w")
    assert all(torch.equal(w[0], w[r]) for r in range(hvd.size()))
    assert hvd.broadcast_object({"r": hvd.rank()}, root_rank=hvd.size() - 1) == {
        "r": hvd.size() - 1}


# ---- gradients (float64, against the formulas computed from every rank's inputs) ----

def weights(label, shapes):
    """Every rank's weights for sum(w * output): w[r] is rank r's."""
    return [randn(label, r, *shapes[r]) for r in range(hvd.size())]


def grad_of(x, forward, w):
    x = x.clone().requires_grad_(True)
    out = forward(x)
    (out * w).sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("op", ["Sum", "Average", "Max"])
def test_allreduce_gradient_is_the_allreduce_of_the_gradient(op):
    size, rank = hvd.size(), hvd.rank()
    xs = [randn(f"gx.{op}", r, 4) for r in range(size)]
    w = weights(f"gw.{op}", [(4,)] * size)
    pre, post = 0.5, 3.0
    _, grad = grad_of(xs[rank], lambda x: hvd.allreduce(x, op=getattr(hvd, op),
                                                        prescale_factor=pre,
                                                        postscale_factor=post), w[rank])
    combine = {"Sum": torch.add, "Average": torch.add, "Max": torch.maximum}[op]
    expected = fold([v * pre for v in w], combine)
    if op == "Average":
        expected = expected / size
    assert torch.allclose(grad, expected * post, rtol=1e-12, atol=0)


def test_grouped_allreduce_gradient():
    size, rank = hvd.size(), hvd.rank()
    a, b = randn("gga", rank, 3).requires_grad_(True), randn("ggb", rank, 2).requires_grad_(True)
    wa, wb = weights("ggwa", [(3,)] * size), weights("ggwb", [(2,)] * size)
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    ((ya * wa[rank]).sum() + (yb * wb[rank]).sum()).backward()
    assert torch.allclose(a.grad, fold(wa), rtol=1e-12, atol=0)
    assert torch.allclose(b.grad, fold(wb), rtol=1e-12, atol=0)


def test_allgather_gradient_is_this_ranks_rows_of_the_average():
    size, rank = hvd.size(), hvd.rank()
    rows = [r + 1 for r in range(size)]
    total = sum(rows)
    w = weights("agw", [(total, 2)] * size)
    out, grad = grad_of(randn("agx", rank, rows[rank], 2), hvd.allgather, w[rank])
    assert torch.equal(out, torch.cat([randn("agx", r, rows[r], 2) for r in range(size)]))
    start = sum(rows[:rank])
    expected = (fold(w) / size)[start:start + rows[rank]]
    assert torch.allclose(grad, expected, rtol=1e-12, atol=0)


def test_grouped_allgather_gradient():
    size, rank = hvd.size(), hvd.rank()
    x = randn("gagx", rank, rank + 1, 2).requires_grad_(True)
    y = randn("gagy", rank, 2).requires_grad_(True)
    wx = weights("gagwx", [(sum(range(1, size + 1)), 2)] * size)
    wy = weights("gagwy", [(2 * size,)] * size)
    gx, gy = hvd.grouped_allgather([x, y])
    ((gx * wx[rank]).sum() + (gy * wy[rank]).sum()).backward()
    start = sum(range(1, rank + 1))
    assert torch.allclose(x.grad, (fold(wx) / size)[start:start + rank + 1], rtol=1e-12, atol=0)
    assert torch.allclose(y.grad, (fold(wy) / size)[2 * rank:2 * rank + 2], rtol=1e-12, atol=0)


def test_broadcast_gradient_is_the_average_on_the_root_and_zero_elsewhere():
    size, rank = hvd.size(), hvd.rank()
    root = 1 % size
    w = weights("bcw", [(3,)] * size)
    out, grad = grad_of(randn("bcx", rank, 3), lambda x: hvd.broadcast(x, root_rank=root),
                        w[rank])
    assert torch.equal(out, randn("bcx", root, 3))
    expected = fold(w) / size if rank == root else torch.zeros(3, dtype=torch.float64)
    assert torch.allclose(grad, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_gradient(op):
    size, rank = hvd.size(), hvd.rank()
    n = 2 * size + 1
    split = split_rows(n, size)
    w = [randn(f"rsw.{op}", r, split[r], 2) for r in range(size)]
    pre, post = 2.0, 0.25
    _, grad = grad_of(randn(f"rsx.{op}", rank, n, 2),
                      lambda x: hvd.reducescatter(x, op=getattr(hvd, op), prescale_factor=pre,
                                                  postscale_factor=post), w[rank])
    expected = torch.cat(w) * pre * post * (size if op == "Sum" else 1)
    assert torch.allclose(grad, expected, rtol=1e-12, atol=0)


def test_grouped_reducescatter_gradient():
    size, rank = hvd.size(), hvd.rank()
    split = split_rows(size + 2, size)
    x = randn("grsx", rank, size + 2, 3).requires_grad_(True)
    w = [randn("grsw", r, split[r], 3) for r in range(size)]
    (out,) = hvd.grouped_reducescatter([x], op=hvd.Average)
    (out * w[rank]).sum().backward()
    assert torch.allclose(x.grad, torch.cat(w), rtol=1e-12, atol=0)


def test_alltoall_gradient_sends_each_block_back():
    size, rank = hvd.size(), hvd.rank()
    splits = [[(r * 2 + j) % 3 + 1 for j in range(size)] for r in range(size)]
    recv = [[splits[k][r] for k in range(size)] for r in range(size)]
    w = [randn("a2aw", r, sum(recv[r]), 2) for r in range(size)]
    (out, received) = (None, None)
    x = randn("a2ax", rank, sum(splits[rank]), 2).requires_grad_(True)
    out, received = hvd.alltoall(x, splits=splits[rank])
    assert not received.requires_grad
    (out * w[rank]).sum().backward()
    # My block for rank j sits in j's output after the blocks of ranks before me.
    expected = []
    for j in range(size):
        start = sum(recv[j][:rank])
        expected.append(w[j][start:start + splits[rank][j]])
    assert torch.equal(x.grad, torch.cat(expected))


# Finite differences: each op's autograd gradient against the change of the sum of the ranks'
# losses when one rank's input element moves. Horovod's backward formulas give that derivative
# times a factor of their own: 1 for allreduce and alltoall, 1/size for allgather and broadcast
# (their backward averages over the ranks), size for reducescatter (its backward allgathers the
# gradient and scales a Sum's by the set's size; Horovod's own test expects size). Every op
# here is linear, so a central difference of step 1 is exact up to rounding.
FD_OPS = {
    "allreduce.sum": (lambda x, n: hvd.allreduce(x, op=hvd.Sum, name=n), 1, (6,)),
    "allreduce.average": (lambda x, n: hvd.allreduce(x, op=hvd.Average, name=n), 1, (6,)),
    "allgather": (lambda x, n: hvd.allgather(x, name=n), 0, (2, 3)),
    "broadcast": (lambda x, n: hvd.broadcast(x, root_rank=hvd.size() - 1, name=n), 0, (5,)),
    "reducescatter.sum": (lambda x, n: hvd.reducescatter(x, op=hvd.Sum, name=n), 2, (7, 2)),
    "reducescatter.average": (lambda x, n: hvd.reducescatter(x, op=hvd.Average, name=n), 2,
                              (7, 2)),
    "alltoall": (lambda x, n: hvd.alltoall(x, name=n), 1, None),
}


@pytest.mark.parametrize("case", sorted(FD_OPS))
def test_gradients_match_finite_differences_of_the_global_loss(case):
    size, rank = hvd.size(), hvd.rank()
    forward, power, shape = FD_OPS[case]  # factor: size ** (power - 1)
    shape = shape or (2 * size, 2)
    x = randn(f"fd.x.{case}", rank, *shape)
    calls = iter(range(10 ** 6))

    def loss(x_mine):
        out = forward(x_mine, f"fd.{case}.{next(calls)}")
        w = randn(f"fd.w.{case}", rank, *out.shape)
        local = (out * w).sum().reshape(1)
        total = hvd.allreduce(local.detach(), op=hvd.Sum, name=f"fd.{case}.loss.{next(calls)}")
        return local, float(total)

    leaf = x.clone().requires_grad_(True)
    local, _ = loss(leaf)
    local.backward()
    grad = leaf.grad
    g = torch.Generator().manual_seed(zlib.crc32(case.encode()))
    for k in range(size):  # the rank whose element moves
        j = int(torch.randint(0, x.numel(), (1,), generator=g))
        differences = []
        for step in (1.0, -1.0):
            moved = x.clone()
            if rank == k:
                moved.view(-1)[j] += step
            differences.append(loss(moved)[1])
        fd = (differences[0] - differences[1]) / 2 * float(size) ** (power - 1)
        if rank == k:
            assert math.isclose(fd, float(grad.view(-1)[j]), rel_tol=1e-9, abs_tol=1e-9), \
                (case, k, j, fd, float(grad.view(-1)[j]))


def test_a_name_in_flight_is_refused_until_its_op_completes():
    """Horovod's duplicate-name tests: a second op of a name whose op is in flight on this rank
    fails at once there (ValueError), even when the first op's first exchange has completed
    (rank 0's allgather waits for the others, theirs completes at once); once the op has
    completed, synchronized or not, the name may be used again."""
    size, rank = hvd.size(), hvd.rank()
    if size == 1:
        pytest.skip("one rank: an op may complete before the duplicate is made")
    t = torch.ones(5, 3)
    handles = []
    for turn in (0, 1):  # rank 0 first, then the others, while the other side waits
        name = f"duplicate{turn}"
        mine = (rank == 0) == (turn == 0)
        if mine:
            handles.append(hvd.allgather_async(t, name=name))
            with pytest.raises(ValueError, match=f"'allgather.{name}' is already in flight"):
                hvd.allgather_async(t, name=name)
            with pytest.raises(ValueError, match="already in flight"):
                hvd.allgather(t, name=name)
        hvd.barrier()
        if not mine:
            handles.append(hvd.allgather_async(t, name=name))
    assert [hvd.synchronize(h).shape for h in handles] == [(5 * size, 3)] * 2
    again = hvd.allreduce_async(torch.ones(2), name="again", op=hvd.Sum)
    while not hvd.poll(again):
        time.sleep(0.01)
    second = hvd.allreduce_async(torch.ones(2), name="again", op=hvd.Sum)
    assert hvd.synchronize(second).tolist() == [float(size)] * 2
    assert hvd.synchronize(again).tolist() == [float(size)] * 2


def test_names_never_pair_with_the_stages_of_another_op():
    """An allgather sends its row counts before its rows, and an alltoall its splits: those
    stages are named apart by a byte that no name given can hold, so an op named like a stage
    ("x.sizes", "y.splits") pairs only with its own kind, in any order."""
    size, rank = hvd.size(), hvd.rank()
    rows = [torch.full((r + 1, 2), float(r)) for r in range(size)]
    ops = [("ag", hvd.allgather_async(rows[rank], name="x")),
           ("ag", hvd.allgather_async(rows[rank], name="x.sizes")),
           ("a2a", hvd.alltoall_async(torch.arange(size, dtype=torch.float64) + rank,
                                      name="y")),
           ("a2a", hvd.alltoall_async(torch.arange(size, dtype=torch.float64) - rank,
                                      name="y.splits"))]
    if rank % 2:
        ops.reverse()
    for kind, handle in ops:
        out = hvd.synchronize(handle)
        if kind == "ag":
            assert torch.equal(out, torch.cat(rows))
        else:
            assert out[0].shape == (size,)
    for bad in ("a\x1fb", "a\x00b"):
        with pytest.raises(detcoll.InvalidArgumentError, match="reserves"):
            hvd.allgather(torch.ones(1), name=bad)
