"""detcoll.torch.patch() on CPU (CUDA, where it patches by default, is in test_torch_devices.py):
an unchanged model's forward and backward run detcoll's kernels in place of torch's, with their
bits and a call each; unpatch() gives torch's back; a torch whose schema differs, an unknown op,
an unknown device and a second patch are refused with nothing registered."""

import pytest
import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as dt
from detcoll.torch import _patch as patch_module
from detcoll.torch import ops


@pytest.fixture(autouse=True)
def no_patch_left():
    dt.unpatch()
    yield
    dt.unpatch()


def wide(generator, *shape, dtype=torch.float32):
    """Non-integer values over a wide range of magnitudes and both signs."""
    sign = torch.randint(0, 2, shape, generator=generator).to(dtype) * 2 - 1
    exponent = torch.randint(-20, 21, shape, generator=generator).to(dtype)
    mantissa = torch.rand(shape, generator=generator, dtype=dtype) + 0.5
    return sign * mantissa * torch.pow(torch.tensor(2.0, dtype=dtype), exponent)


class Model(torch.nn.Module):
    """Embedding, max pooling, bilinear upsampling, index_select and gather: layers whose backward
    torch computes with the patched operators; the model knows nothing of detcoll."""

    def __init__(self, generator):
        super().__init__()
        self.table = torch.nn.Parameter(wide(generator, 12, 4))
        self.rows = torch.nn.Parameter(wide(generator, 9, 4))

    def forward(self, ids, picks, images, positions):
        e = F.embedding(ids, self.table)                              # [n, 4]
        r = self.rows.index_select(0, picks)                          # [m, 4]
        p = F.max_pool2d(images[0], 3, 2, 1)                          # [1, 2, 4, 4]
        u = F.interpolate(images[1], scale_factor=2, mode="bilinear", align_corners=False)
        g = images[2].reshape(2, -1).gather(1, positions)             # [2, k]
        return e, r, p, u, g


def run(generator_seed):
    """One forward and backward of Model, with upstream gradients of wide random values: the
    inputs' gradients and what each layer's backward received."""
    gen = torch.Generator().manual_seed(generator_seed)
    model = Model(gen)
    ids = torch.randint(0, 12, (300,), generator=gen)  # heavy duplication: 300 into 12 rows
    picks = torch.randint(0, 9, (200,), generator=gen)
    # One image per layer: each gradient is one backward's, not a sum in autograd's order.
    images = [wide(gen, 1, 2, 8, 8).requires_grad_() for _ in range(3)]
    positions = torch.randint(0, 64, (2, 90), generator=gen)
    outputs = model(ids, picks, images, positions)
    ups = [wide(gen, *o.shape) for o in outputs]
    torch.autograd.backward(outputs, ups)
    inputs = dict(ids=ids, picks=picks, image=images[0].detach(), positions=positions)
    grads = dict(table=model.table.grad, rows=model.rows.grad, pool=images[0].grad,
                 up=images[1].grad, gather=images[2].grad)
    return inputs, ups, grads


def reference(inputs, ups):
    """The same gradients from detcoll.torch.ops called directly, with the arguments aten's
    backward formulas pass."""
    e_up, r_up, p_up, u_up, g_up = ups
    table = ops.embedding_dense_backward(e_up, inputs["ids"], 12, -1, False)
    rows = ops.index_add_(torch.zeros(9, 4), 0, inputs["picks"], r_up)
    image = inputs["image"]
    _, indices = F.max_pool2d(image, 3, 2, 1, return_indices=True)
    from_pool = ops.max_pool2d_with_indices_backward(p_up, image, [3, 3], [2, 2], [1, 1],
                                                     [1, 1], False, indices)
    from_up = ops.upsample_bilinear2d_backward(u_up, [16, 16], [1, 2, 8, 8], False, 2.0, 2.0)
    from_gather = ops.scatter_add_(torch.zeros(2, 64), 1, inputs["positions"], g_up)
    return dict(table=table, rows=rows, pool=from_pool, up=from_up,
                gather=from_gather.reshape(1, 2, 8, 8))


def bits(t):
    return t.contiguous().view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def test_an_unchanged_model_runs_detcolls_kernels_with_their_bits():
    replaced = dt.patch(devices=("cpu",))
    absent = set(dt.patch_state()["absent"])       # torch 2 lacks some overloads
    assert set(replaced) == {f"aten::{name} on cpu" for name in patch_module.PATCHABLE
                             if f"aten::{name}" not in absent}
    inputs, ups, grads = run(5)
    calls = dt.patch_state()["calls"]
    for name in ("embedding_dense_backward", "index_add_", "max_pool2d_with_indices_backward",
                 "upsample_bilinear2d_backward.vec", "scatter_add_"):
        assert calls.get(name, 0) >= 1, (name, calls)
    dt.unpatch()
    expected = reference(inputs, ups)
    for name in grads:
        assert torch.equal(bits(grads[name]), bits(expected[name])), name


def test_unpatch_gives_torch_its_kernels_back():
    _, _, before = run(7)
    dt.patch(devices=("cpu",))
    _, _, during = run(7)
    calls = dict(dt.patch_state()["calls"])
    assert sum(calls.values()) >= 5
    assert dt.unpatch() != []
    assert dt.patch_state()["replaced"] == []
    _, _, after = run(7)
    assert dt.patch_state()["calls"] == calls  # kept for reading, and no kernel of ours ran
    for name in before:
        assert torch.equal(bits(after[name]), bits(before[name])), name
    # detcoll's order differs from torch's somewhere in this model: the patch changed bits.
    assert any(not torch.equal(bits(during[n]), bits(before[n])) for n in before)


def test_the_forward_ops_and_their_in_place_forms():
    gen = torch.Generator().manual_seed(11)
    base, src = wide(gen, 6, 3), wide(gen, 400, 3)
    index = torch.randint(0, 6, (400, 3), generator=gen)
    rows = index[:, 0].contiguous()
    weights = wide(gen, 400)
    expected = {
        "scatter_add": ops.scatter_add(base, 0, index, src),
        "index_add": ops.index_add(base, 0, rows, src, alpha=3),
        "bincount": ops.bincount(rows, weights, minlength=9),
    }
    with dt.patched(devices=("cpu",)) as replaced:
        assert "aten::scatter_add_ on cpu" in replaced
        got = {
            "scatter_add": torch.scatter_add(base, 0, index, src),
            "index_add": torch.index_add(base, 0, rows, src, alpha=3),
            "bincount": torch.bincount(rows, weights, minlength=9),
        }
        in_place = base.clone().scatter_add_(0, index, src)
        in_place_rows = base.clone().index_add_(0, rows, src, alpha=3)
        counts = torch.bincount(rows)
        small = torch.rand(400, generator=gen) - 0.5  # within float16's range
        half = torch.bincount(rows, small.half())
        calls = dt.patch_state()["calls"]
    assert dt.patch_state()["replaced"] == []
    for name, value in got.items():
        assert torch.equal(bits(value), bits(expected[name])), name
        assert calls[name] >= 1
    assert torch.equal(bits(in_place), bits(expected["scatter_add"]))
    assert torch.equal(bits(in_place_rows), bits(expected["index_add"]))
    assert counts.dtype == torch.int64 and counts.tolist() == torch.bincount(rows).tolist()
    # torch's result type: float16 weights count in float64.
    assert half.dtype == torch.float64
    assert torch.equal(half, ops.bincount(rows, small.half().double()))


def test_composes_with_use_deterministic_algorithms():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with dt.patched(devices=("cpu",)):
            _, _, grads = run(3)
            calls = dt.patch_state()["calls"]
    finally:
        torch.use_deterministic_algorithms(previous)
    assert calls["embedding_dense_backward"] >= 1
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_refusals_name_the_problem_and_register_nothing(monkeypatch):
    with pytest.raises(detcoll.InvalidArgumentError, match="no deterministic kernel for nll_loss"):
        dt.patch(devices=("cpu",), ops=["nll_loss"])
    with pytest.raises(detcoll.InvalidArgumentError, match="devices must be among cuda, cpu"):
        dt.patch(devices=("xla",))
    with pytest.raises(detcoll.InvalidArgumentError, match="devices must be among"):
        dt.patch(devices=())
    schema, kernel = patch_module.PATCHABLE["bincount"]
    monkeypatch.setitem(patch_module.PATCHABLE, "bincount",
                        (schema.replace("int minlength=0", "int minlength=0, bool sorted"),
                         kernel))
    with pytest.raises(detcoll.InvalidArgumentError,
                       match=r"declares aten::bincount\(Tensor self, Tensor\? weights=None, int "
                             r"minlength=0\) -> Tensor, but detcoll's kernel was written for "
                             r".*bool sorted.*nothing was patched"):
        dt.patch(devices=("cpu",))
    assert dt.patch_state()["replaced"] == []
    monkeypatch.undo()
    x = torch.tensor([0, 2, 2])
    assert torch.bincount(x).tolist() == [1, 0, 2]
    dt.patch(devices=("cpu",), ops=["bincount"])
    with pytest.raises(detcoll.InvalidArgumentError, match="already patched .aten::bincount on "
                                                           "cpu.; call detcoll.torch.unpatch"):
        dt.patch(devices=("cpu",))
    assert dt.patch_state()["replaced"] == ["aten::bincount on cpu"]
    assert dt.unpatch() == ["aten::bincount on cpu"]
    assert dt.unpatch() == []


def test_a_bad_argument_is_refused_by_detcolls_kernel_by_name():
    with dt.patched(devices=("cpu",), ops=["scatter_add"]):
        with pytest.raises(detcoll.InvalidArgumentError, match="scatter_add"):
            torch.scatter_add(torch.zeros(3), 0, torch.tensor([0, 7]), torch.ones(2))


def test_what_torch_accepts_beyond_detcolls_own_types_gives_torchs_results():
    gen = torch.Generator().manual_seed(13)
    ids32 = torch.randint(0, 12, (300,), generator=gen, dtype=torch.int32)
    table = wide(gen, 12, 4)
    up = wide(gen, 300, 4)
    narrow = {dtype: torch.randint(0, 5, (6, 3), generator=gen).to(dtype)
              for dtype in (torch.int8, torch.uint8, torch.int16, torch.bool)}
    index = torch.randint(0, 6, (40, 3), generator=gen)
    rows = index[:, 0].contiguous()
    sources = {dtype: torch.randint(0, 3, (40, 3), generator=gen).to(dtype) for dtype in narrow}

    def calls_of_torch():
        t = table.clone().requires_grad_()
        F.embedding(ids32, t).backward(up)  # int32 indices
        picked = table.clone().requires_grad_()
        picked.index_select(0, ids32).backward(up)
        out = {"embedding": t.grad, "index_select": picked.grad,
               "bincount": torch.bincount(ids32.to(torch.uint8), minlength=3),
               "empty": torch.bincount(torch.tensor([], dtype=torch.int64), torch.tensor([]), 4),
               "scalar": torch.index_add(torch.tensor(1.5), 0, torch.tensor([0]),
                                         torch.tensor(2.25))}
        for dtype, base in narrow.items():
            out[f"scatter {dtype}"] = torch.scatter_add(base, 0, index, sources[dtype])
            out[f"index {dtype}"] = base.clone().index_add_(0, rows, sources[dtype])
            # A fractional alpha, as torch converts it for the dtype (toward zero; bool: nonzero).
            out[f"alpha {dtype}"] = base.clone().index_add_(0, rows, sources[dtype], alpha=2.5)
        long_base = torch.arange(6 * 3).reshape(6, 3)
        long_source = torch.randint(-9, 9, (40, 3), generator=torch.Generator().manual_seed(3))
        out["alpha int64"] = torch.index_add(long_base, 0, rows, long_source, alpha=-1.75)
        out["alpha int32"] = long_base.int().index_add_(0, rows, long_source.int(), alpha=0.5)
        # Integers past 2^53 exactly; uint8 takes negative integers, wrapped.
        out["alpha 2^53 + 1"] = long_base.clone().index_add_(0, rows, long_source,
                                                             alpha=2**53 + 1)
        out["alpha 2^63 - 1"] = long_base.clone().index_add_(0, rows, long_source,
                                                             alpha=2**63 - 1)
        out["alpha uint8 -3"] = narrow[torch.uint8].clone().index_add_(
            0, rows, sources[torch.uint8], alpha=-3)
        return out

    theirs = calls_of_torch()
    with dt.patched(devices=("cpu",)):
        ours = calls_of_torch()
        calls = dt.patch_state()["calls"]
    for name in ("embedding_dense_backward", "index_add_", "bincount", "index_add",
                 "scatter_add"):
        assert calls.get(name, 0) >= 1, (name, calls)
    for name, value in theirs.items():
        assert ours[name].dtype == value.dtype and ours[name].shape == value.shape, name
        # Integer and bool results are exact; the float ones here add in torch's order too.
        assert torch.equal(ours[name], value), name
    # An alpha past the dtype's range, compared before truncation, is refused by both.
    for dtype, alpha in ((torch.int8, 127.5), (torch.int16, -32768.5), (torch.uint8, -0.5),
                         (torch.int32, 2147483647.5), (torch.uint8, -256)):
        base = torch.zeros(3, dtype=dtype)
        with pytest.raises(RuntimeError):
            base.index_add_(0, torch.tensor([0]), torch.ones(1, dtype=dtype), alpha=alpha)
        with dt.patched(devices=("cpu",)):
            with pytest.raises(detcoll.InvalidArgumentError, match="does not fit"):
                base.index_add_(0, torch.tensor([0]), torch.ones(1, dtype=dtype), alpha=alpha)


def test_the_out_forms_run_detcolls_kernel():
    gen = torch.Generator().manual_seed(17)
    base, src = wide(gen, 6, 3), wide(gen, 50, 3)
    index = torch.randint(0, 6, (50, 3), generator=gen)
    expected = ops.scatter_add(base, 0, index, src)
    expected_rows = ops.index_add(base, 0, index[:, 0].contiguous(), src, alpha=0.5)
    out, out_rows = torch.empty(0), torch.empty(2, 2)
    with dt.patched(devices=("cpu",)):
        torch.scatter_add(base, 0, index, src, out=out)
        torch.index_add(base, 0, index[:, 0].contiguous(), src, alpha=0.5, out=out_rows)
        calls = dt.patch_state()["calls"]
    assert calls["scatter_add.out"] == 1 and calls["index_add.out"] == 1
    assert torch.equal(bits(out), bits(expected))
    assert torch.equal(bits(out_rows), bits(expected_rows))


def test_refused_like_torch_or_by_name():
    with dt.patched(devices=("cpu",)):
        y = torch.arange(6.0)
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            y.index_add_(0, torch.tensor([1, 2, 3]), y[:3])
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            y.scatter_add_(0, torch.tensor([1, 2]), y[2:4])
        with pytest.raises(detcoll.InvalidArgumentError,
                           match="index_add_ of torch.complex64 has no deterministic kernel"):
            torch.zeros(3, dtype=torch.complex64).index_add_(
                0, torch.tensor([0]), torch.ones(1, dtype=torch.complex64))
        with pytest.raises(detcoll.InvalidArgumentError, match="exactly one of output_size"):
            torch.ops.aten.upsample_bilinear2d_backward.vec(
                torch.ones(1, 1, 4, 4), [4, 4], [1, 1, 2, 2], False, [2.0, 2.0])
    assert torch.equal(y, torch.arange(6.0))


def test_views_that_share_a_buffer_but_no_element_are_written_as_torch_writes_them():
    # torch refuses only the same tensor, or dense tensors whose spans meet; a column beside
    # another, or the even rows beside the odd ones, pass (at::assert_no_overlap).
    def cases():
        b = torch.arange(20.0).reshape(5, 4) / 3
        b[:, 0].index_add_(0, torch.tensor([0, 2, 2, 1, 4]), b[:, 1])
        yield b
        b = torch.arange(24.0).reshape(6, 4) / 7
        b[::2].index_put_((torch.tensor([0, 2, 0]),), b[1::2], accumulate=True)
        yield b
        b = torch.arange(24.0).reshape(6, 4) / 7
        b[::2][torch.tensor([1, 1])] = b[1::2][:2]
        yield b
        b = torch.arange(12.0).reshape(3, 4) / 9
        b[:, 1].scatter_add_(0, torch.tensor([2, 0, 2]), b[:, 3])
        yield b
        b = torch.arange(12.0).reshape(3, 4) / 9
        b[:, 0].put_(torch.tensor([1, 1, 0]), b[:, 2], accumulate=True)
        yield b
    expected = list(cases())
    with dt.patched(devices=("cpu",)):
        ours = list(cases())
        calls = dt.patch_state()["calls"]
    assert calls.get("index_add_", 0) + calls.get("index_add", 0) >= 1, calls
    for mine, theirs in zip(ours, expected):
        assert torch.equal(bits(mine), bits(theirs))
    with dt.patched(devices=("cpu",)):
        # Views that are not dense but share elements: torch lets them through and its loop
        # reads what it wrote; detcoll refuses them.
        x = torch.tensor([1.0, 10.0, 100.0])
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            x[1:3].index_add_(0, torch.tensor([1, 0]), x[::2])
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            x[1:3].index_put_((torch.tensor([1, 0]),), x[::2])
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            x[:2].scatter_add_(0, torch.tensor([0, 1, 0]), x[1:2].expand(3))
        assert torch.equal(x, torch.tensor([1.0, 10.0, 100.0]))
    with dt.patched(devices=("cpu",)):
        # A written-to view that reaches an element twice (unfolded windows): torch's loop
        # reads its own writes there too; refused, and so in the out= forms.
        b = torch.arange(6.0)
        with pytest.raises(detcoll.InvalidArgumentError, match="more than once"):
            b.unfold(0, 2, 1).index_add_(0, torch.tensor([0, 2, 0]), torch.ones(3, 2))
        with pytest.raises(detcoll.InvalidArgumentError, match="more than once"):
            b.unfold(0, 2, 1).index_put_((torch.tensor([0, 2]),), torch.ones(2, 2), True)
        with pytest.raises(detcoll.InvalidArgumentError, match="more than once"):
            torch.index_add(torch.zeros(5, 2), 0, torch.tensor([1]), torch.ones(1, 2),
                            out=b.unfold(0, 2, 1))
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            torch.index_add(torch.zeros(4), 0, torch.tensor([1, 2, 3, 0]), b[2:6], out=b[0:4])
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            torch.scatter_add(torch.zeros(4), 0, torch.tensor([1, 2, 3, 0]), b[2:6], out=b[0:4])
        assert torch.equal(b, torch.arange(6.0))
        # out= as torch takes it: a view of exactly self's elements is an in-place call, an out
        # of another shape is resized first, one of another dtype is refused.
        for make_out in (lambda a: a[:], lambda a: a.view(4, 3),
                         lambda a: torch.zeros(1).expand(5)):
            a, expected = torch.arange(12.0).reshape(4, 3), None
            dt.unpatch()
            expected = torch.index_add(a.clone(), 0, torch.tensor([0, 2]), torch.ones(2, 3))
            dt.patch(devices=("cpu",))
            out = make_out(a)
            result = torch.index_add(a, 0, torch.tensor([0, 2]), torch.ones(2, 3), out=out)
            assert torch.equal(result, expected) and torch.equal(out, expected)
        with pytest.raises(detcoll.InvalidArgumentError, match="out has dtype torch.int64"):
            torch.index_add(torch.zeros(4), 0, torch.tensor([1]), torch.ones(1),
                            out=torch.empty(4, dtype=torch.int64))
        # Index dtypes torch refuses are refused, not read as positions.
        with pytest.raises(detcoll.InvalidArgumentError, match="put_: index has dtype torch.bool"):
            torch.zeros(3).put_(torch.tensor([True, False]), torch.ones(2))
        with pytest.raises(detcoll.InvalidArgumentError, match="must be long, byte or bool"):
            torch.zeros(3).index_put_((torch.tensor([0, 1], dtype=torch.int32),), torch.ones(2))
    with dt.patched(devices=("cpu",)):  # the same dense elements are still refused
        b = torch.arange(8.0)
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            b[1:5].index_put_((torch.tensor([0, 1]),), b[:2])
        with pytest.raises(detcoll.InvalidArgumentError, match="single memory location"):
            b.put_(torch.tensor([0, 1]), b[:2], accumulate=True)
    assert torch.equal(b, torch.arange(8.0))


def test_a_mask_with_one_value_of_any_dtype_fills_as_torch_fills():
    # torch's index_put_ without accumulate is masked_fill_ for one bool or uint8 mask (after
    # any None) and a one-element CPU value, whatever the value's dtype.
    def cases():
        x = torch.arange(6.0).reshape(2, 3)
        mask = torch.tensor([[True, False, True], [False, True, False]])
        x[mask] = torch.tensor(3)  # int64 into float32
        yield x
        y = torch.arange(6).reshape(2, 3)
        y[y > 2] = torch.tensor(2.75)  # float into int64: truncated, as item() does
        yield y
        z = torch.zeros(2, 3, 4, dtype=torch.bfloat16)
        torch.ops.aten.index_put_(z, [None, torch.tensor([1, 0, 1], dtype=torch.uint8)],
                                  torch.tensor([1.5]), False)
        yield z
        w = torch.zeros(4, 2, dtype=torch.float64)
        w[torch.tensor([True, False, False, True])] = torch.tensor(0.1, dtype=torch.float32)
        yield w
        v = torch.arange(4.0)
        torch.ops.aten.index_put_(v, [torch.tensor(True)], torch.tensor(-2.0), False)
        yield v
    expected = list(cases())
    with dt.patched(devices=("cpu",)):
        ours = list(cases())
        calls = dt.patch_state()["calls"]
    assert calls.get("_index_put_impl_", 0) >= 4, calls
    for mine, theirs in zip(ours, expected):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), (mine, theirs)
    # As torch: too many indices are refused before the shortcut, and a uint8 mask reaches
    # masked_fill_ as it is (0 and 1 only).
    for call in (lambda: torch.ops.aten.index_put_(torch.zeros(3), [torch.tensor([True, False,
                                                   True]), None], torch.tensor(5.0), False),
                 lambda: torch.zeros(()).index_put_((torch.tensor(True),), torch.tensor(5.0))):
        with pytest.raises(IndexError, match="too many indices"):
            call()
        with dt.patched(devices=("cpu",)):
            with pytest.raises(detcoll.InvalidArgumentError, match="index"):
                call()
    x = torch.zeros(4)
    with dt.patched(devices=("cpu",)):
        with pytest.raises(RuntimeError, match="Mask tensor can take 0 and 1 values only"):
            x[torch.tensor([0, 2, 1, 0], dtype=torch.uint8)] = torch.tensor(5.0)
    assert torch.equal(x, torch.zeros(4))
    with dt.patched(devices=("cpu",)):  # values of several elements keep the dtype check
        x = torch.zeros(3)
        with pytest.raises(detcoll.InvalidArgumentError, match="values has dtype torch.int64"):
            x[torch.tensor([True, False, True])] = torch.tensor([1, 2])


def test_zero_size_tensors_give_torchs_empty_results():
    # An empty tensor's data pointer is null: nothing to write is not a missing buffer.
    def cases():
        yield torch.zeros(4, 0).index_add(0, torch.tensor([1, 1]), torch.zeros(2, 0))
        x = torch.randn(4, 0, requires_grad=True)
        x.index_select(0, torch.tensor([1, 3])).sum().backward()
        yield x.grad
        w = torch.randn(5, 0, requires_grad=True)
        F.embedding(torch.tensor([1, 2]), w).sum().backward()
        yield w.grad
        w = torch.randn(5, 0, requires_grad=True)
        F.embedding_bag(torch.tensor([0, 1, 2]), w, torch.tensor([0, 1])).sum().backward()
        yield w.grad
        for spatial in (2, 3):
            x = torch.randn((1, 0) + (4,) * spatial, requires_grad=True)
            grid = (torch.rand((1,) + (3,) * spatial + (spatial,)) * 2 - 1).requires_grad_()
            F.grid_sample(x, grid, align_corners=False).sum().backward()
            yield x.grad
            yield grid.grad
    expected = list(cases())
    with dt.patched(devices=("cpu",)):
        ours = list(cases())
        calls = dt.patch_state()["calls"]
    assert calls.get("grid_sampler_2d_backward", 0) == 1, calls
    assert calls.get("grid_sampler_3d_backward", 0) == 1, calls
    for mine, theirs in zip(ours, expected):
        assert mine.shape == theirs.shape and torch.equal(mine, theirs), (mine, theirs)
    segments = ops.unsorted_segment_sum(torch.zeros(3, 0), torch.tensor([0, 1, 1]), 2)
    assert segments.shape == (2, 0)
    product = ops.sparse_dense_matmul(torch.tensor([[0, 1], [2, 0]]), torch.tensor([1.5, -2.0]),
                                      (3, 2), torch.zeros(2, 0))
    assert product.shape == (3, 0)


def test_an_empty_list_of_ops_patches_nothing_and_leaves_patch_free():
    assert dt.patch(devices=("cpu",), ops=[]) == []
    assert dt.patch_state()["replaced"] == []
    assert dt.patch(devices=("cpu",), ops=["bincount"]) == ["aten::bincount on cpu"]
    assert dt.unpatch() == ["aten::bincount on cpu"]
    with dt.patched(devices=("cpu",), ops=()) as replaced:
        assert replaced == []
    assert dt.unpatch() == []


def test_a_patch_that_fails_partway_leaves_torchs_kernels(monkeypatch):
    other = torch.library.Library("aten", "IMPL")  # another Python override of scatter_add
    with pytest.warns(UserWarning):
        other.impl("scatter_add", lambda self, dim, index, src: self.clone(), "CPU")
    try:
        with pytest.raises(RuntimeError, match="already a kernel registered from python") as info:
            dt.patch(devices=("cpu",))
        # The failure's traceback still holds patch()'s frame: the kernels it registered before
        # scatter_add are gone all the same.
        assert info.value is not None
        assert dt.patch_state()["replaced"] == []
        assert torch.bincount(torch.tensor([0, 2, 2])).tolist() == [1, 0, 2]
        assert "bincount" not in dt.patch_state()["calls"]
    finally:
        del other
    assert dt.patch(devices=("cpu",), ops="bincount") == ["aten::bincount on cpu"]
    assert dt.unpatch() == ["aten::bincount on cpu"]


def test_an_operator_this_torch_lacks_is_left_out_unless_named(monkeypatch):
    # torch 2 has no upsample_*_backward.vec: patch() of every op leaves such an operator out
    # (nothing can call it) and reports it absent; naming it refuses.
    schema, kernel = patch_module.PATCHABLE["bincount"]
    monkeypatch.setitem(patch_module.PATCHABLE, "bincount.gone",
                        (schema.replace("bincount(", "bincount.gone("), kernel))
    replaced = dt.patch(devices=("cpu",))
    try:
        assert "aten::bincount.gone on cpu" not in replaced
        assert "aten::bincount on cpu" in replaced
        assert dt.patch_state()["absent"] == ["aten::bincount.gone"]
        assert torch.bincount(torch.tensor([1, 1])).tolist() == [0, 2]
        assert dt.patch_state()["calls"].get("bincount") == 1
    finally:
        dt.unpatch()
    with pytest.raises(detcoll.InvalidArgumentError,
                       match="has no operator aten::bincount.gone, but detcoll's kernel"):
        dt.patch(devices=("cpu",), ops=["bincount", "bincount.gone"])
    assert dt.patch_state()["replaced"] == []
