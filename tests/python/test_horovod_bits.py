"""The bits of detcoll.torch's reducescatter and alltoall (and their grouped variants) under
mpirun at np 3 and 4, against single-process references computed from every rank's inputs
(each rank regenerates all of them from seeds): ordered mode = the left fold in rank order in
the dtype; invariant mode = the sum of every rank's value on the element's grid (design.md "The
invariant mode"), exact (then divided by size for Average), rounded once; with values whose
exponents are close, that is the exact sum of the values rounded once, which a test checks."""

import math
import zlib
from fractions import Fraction

import pytest
import torch

import detcoll
import detcoll.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()  # shutdown runs at exit
    yield
    detcoll.set_mode("ordered")


def wide(label, r, *shape, dtype=torch.float64):
    """Rank r's non-integer values over a wide range: randn * 10**uniform(-20, 20)."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{label}/{r}".encode()))
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    scale = torch.pow(10.0, torch.rand(*shape, generator=g, dtype=torch.float64) * 40 - 20)
    return (x * scale).to(dtype)


def every_rank(label, *shape, dtype=torch.float64):
    return [wide(label, r, *shape, dtype=dtype) for r in range(hvd.size())]


def split_rows(n, size):
    return [n // size + (1 if r < n % size else 0) for r in range(size)]


def my_rows(t, n):
    split = split_rows(n, hvd.size())
    start = sum(split[:hvd.rank()])
    return t[start:start + split[hvd.rank()]]


def bits(t):
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def ordered(xs, average):
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = acc + x  # in the dtype, rank order
    return acc / len(xs) if average else acc


def pow2(k):
    return Fraction(2 ** k) if k >= 0 else Fraction(1, 2 ** -k)


def to_float32(q):
    """The float32 nearest to the exact rational q (ties to even), rounded once."""
    if q == 0:
        return 0.0
    sign, a = (-1.0 if q < 0 else 1.0), abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < pow2(e):
        e -= 1
    quantum = pow2(max(e, -126) - 23)
    m = a / quantum
    n = m.numerator // m.denominator
    rest = m - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    value = n * quantum
    if value >= pow2(128) - pow2(103):  # beyond float32's largest finite, rounded
        return sign * math.inf
    return sign * float(value)  # exact: a float32 is a float64


def grid_quantum(values, dtype):
    """docs/design.md "The invariant mode": the element's key is the largest biased exponent
    over every leaf; each leaf is rounded once to the grid 2^(key - bias + 1 - 62 + H), H = 16."""
    bias = 1023 if dtype == torch.float64 else 127
    key = max((math.frexp(v)[1] - 1 + bias) if v != 0 else 0 for v in values)
    return pow2(key - bias + 1 - 62 + 16)


def invariant(xs, average, exact=False):
    """The invariant mode's result: every leaf (here one per rank) on the element's grid, summed
    exactly (then divided exactly by their number for Average), rounded once to the dtype.
    exact=True skips the grid: the exact sum of the values themselves."""
    dtype = xs[0].dtype
    flat = [x.reshape(-1).tolist() for x in xs]
    out = []
    for i in range(len(flat[0])):
        leaves = [f[i] for f in flat]
        if exact:
            total = sum((Fraction(v) for v in leaves), Fraction(0))
        else:
            q = grid_quantum(leaves, dtype)
            total = sum(round(Fraction(v) / q) for v in leaves) * q  # round(): ties to even
        if average:
            total /= len(xs)
        out.append(float(total) if dtype == torch.float64 else to_float32(total))
    return torch.tensor(out, dtype=dtype).reshape(xs[0].shape)


CASES = [(mode, dtype, op) for mode in ("ordered", "invariant")
         for dtype in (torch.float32, torch.float64) for op in ("Sum", "Average")]


def ids(case):
    mode, dtype, op = case
    return f"{mode}-{str(dtype).split('.')[-1]}-{op}"


@pytest.fixture(params=CASES, ids=ids)
def case(request):
    mode, dtype, op = request.param
    detcoll.set_mode(mode)
    yield mode, dtype, op
    detcoll.set_mode("ordered")


def reference(mode, xs, op):
    return (ordered if mode == "ordered" else invariant)(xs, op == "Average")


def test_reference_rounding_is_once():
    # A sum whose float64 rounding is a tie for float32: double rounding would go wrong.
    q = Fraction(1) + Fraction(1, 2 ** 24) + Fraction(1, 2 ** 60)
    assert to_float32(q) == 1.0 + 2.0 ** -23
    assert float(q) == 1.0 + 2.0 ** -24  # float64 first, then float32, would give 1.0
    assert to_float32(Fraction(3, 2 ** 150)) == 2.0 ** -148  # subnormal: 1.5 quanta to even


def test_reducescatter_bits(case):
    mode, dtype, op = case
    n = 3 * hvd.size() + 2
    xs = every_rank(f"rs.{mode}.{dtype}.{op}", n, 7, dtype=dtype)
    out = hvd.reducescatter(xs[hvd.rank()], op=getattr(hvd, op), name=f"rs.{ids(case)}")
    expected = my_rows(reference(mode, xs, op), n)
    assert out.shape == expected.shape
    assert torch.equal(bits(out), bits(expected))
    # ... and the same bits as that slice of the allreduce.
    total = hvd.allreduce(xs[hvd.rank()], op=getattr(hvd, op), name=f"rs.ar.{ids(case)}")
    assert torch.equal(bits(out), bits(my_rows(total, n)))


def test_grouped_reducescatter_bits(case):
    mode, dtype, op = case
    size = hvd.size()
    shapes = [(size + 1, 3), (2 * size - 1,), (1, 4)]
    xs = [every_rank(f"grs.{mode}.{dtype}.{op}.{i}", *s, dtype=dtype)
          for i, s in enumerate(shapes)]
    outs = hvd.grouped_reducescatter([x[hvd.rank()] for x in xs], op=getattr(hvd, op),
                                     name=f"grs.{ids(case)}")
    handle = hvd.grouped_reducescatter_async([x[hvd.rank()] for x in xs], op=getattr(hvd, op),
                                             name=f"grsa.{ids(case)}")
    asynchronous = hvd.synchronize(handle)
    for x, s, out, other in zip(xs, shapes, outs, asynchronous):
        expected = my_rows(reference(mode, x, op), s[0])
        assert torch.equal(bits(out), bits(expected))
        assert torch.equal(bits(other), bits(expected))


def test_grouped_allreduce_bits(case):
    mode, dtype, op = case
    xs = [every_rank(f"gar.{mode}.{dtype}.{op}.{i}", n, dtype=dtype)
          for i, n in enumerate((5, 33))]
    outs = hvd.grouped_allreduce([x[hvd.rank()] for x in xs], op=getattr(hvd, op),
                                 name=f"gar.{ids(case)}")
    for x, out in zip(xs, outs):
        assert torch.equal(bits(out), bits(reference(mode, x, op)))


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_invariant_reducescatter_of_close_values_is_the_exact_sum_rounded_once(op):
    """float32 values within a few binades: every leaf fits the grid, so the result is the
    exact sum, a Fraction, rounded once to float32 (not fsum's float64 rounded again)."""
    n = 2 * hvd.size() + 1
    xs = []
    for r in range(hvd.size()):
        g = torch.Generator().manual_seed(zlib.crc32(f"close/{r}".encode()))
        xs.append(((torch.rand(n, 9, generator=g, dtype=torch.float64) + 0.5)
                   * torch.where(torch.rand(n, 9, generator=g) < 0.5, -1.0, 1.0)
                   .to(torch.float64) * 3.0).to(torch.float32))
    expected = invariant(xs, op == "Average", exact=True)
    assert torch.equal(bits(expected), bits(invariant(xs, op == "Average")))
    detcoll.set_mode("invariant")
    try:
        out = hvd.reducescatter(xs[hvd.rank()], op=getattr(hvd, op), name=f"close.{op}")
    finally:
        detcoll.set_mode("ordered")
    assert torch.equal(bits(out), bits(my_rows(expected, n)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64],
                         ids=str)
def test_alltoall_moves_bits(dtype):
    size, rank = hvd.size(), hvd.rank()
    splits = [[(3 * r + j) % 4 for j in range(size)] for r in range(size)]
    xs = [wide(f"a2a.{dtype}", r, sum(splits[r]), 3, dtype=dtype) for r in range(size)]
    out, received = hvd.alltoall(xs[rank], splits=splits[rank], name=f"a2a.{dtype}")
    expected = torch.cat([xs[r][sum(splits[r][:rank]):sum(splits[r][:rank + 1])]
                          for r in range(size)])
    assert torch.equal(bits(out), bits(expected))
    assert received.tolist() == [splits[r][rank] for r in range(size)]
    # Equal split, asynchronous.
    even = [wide(f"a2a.even.{dtype}", r, 2 * size, dtype=dtype) for r in range(size)]
    out, received = hvd.synchronize(hvd.alltoall_async(even[rank], name=f"a2a.even.{dtype}"))
    assert torch.equal(bits(out), bits(torch.cat([e[2 * rank:2 * rank + 2] for e in even])))
