"""detcoll.torch.ops.crop_and_resize and sparse_dense_matmul (TensorFlow's arguments): forward
and gradients against loops written here with TensorFlow's definitions, float64 gradients against
finite differences (gradcheck), the same bits run after run, bad arguments refused by name."""

import math

import pytest
import torch

import detcoll
from detcoll.torch import ops
from op_testing import bits


def crop_loop(image, boxes, box_indices, crop_size, method, extrapolation):
    """tf.image.crop_and_resize's forward, and the image's gradient for an upstream gradient of
    ones times `up`, by loops in float64."""
    n, height, width, channels = image.shape
    ch, cw = crop_size
    out = torch.full((len(boxes), ch, cw, channels), float(extrapolation), dtype=torch.float64)
    for b, (y1, x1, y2, x2) in enumerate(boxes.double().tolist()):
        img = image[box_indices[b]].double()
        for y in range(ch):
            in_y = (y1 * (height - 1) + y * (y2 - y1) * (height - 1) / (ch - 1)) if ch > 1 \
                else 0.5 * (y1 + y2) * (height - 1)
            if in_y < 0 or in_y > height - 1:
                continue
            for x in range(cw):
                in_x = (x1 * (width - 1) + x * (x2 - x1) * (width - 1) / (cw - 1)) if cw > 1 \
                    else 0.5 * (x1 + x2) * (width - 1)
                if in_x < 0 or in_x > width - 1:
                    continue
                if method == "nearest":
                    out[b, y, x] = img[round(in_y), round(in_x)]
                    continue
                t, l = math.floor(in_y), math.floor(in_x)
                bo, r = math.ceil(in_y), math.ceil(in_x)
                yl, xl = in_y - t, in_x - l
                top = img[t, l] + (img[t, r] - img[t, l]) * xl
                bottom = img[bo, l] + (img[bo, r] - img[bo, l]) * xl
                out[b, y, x] = top + (bottom - top) * yl
    return out


def problem(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(3, 7, 9, 4, generator=gen, dtype=dtype) * 5
    # Boxes inside, partly outside, flipped (y2 < y1) and degenerate; several on the same image.
    boxes = torch.tensor([[0.1, 0.2, 0.8, 0.9], [-0.2, 0.3, 0.6, 1.3], [0.9, 0.7, 0.2, 0.1],
                          [0.3, 0.3, 0.3, 0.55], [0.05, 0.0, 1.0, 1.0]], dtype=dtype)
    box_indices = torch.tensor([0, 2, 0, 1, 0])
    return gen, image, boxes, box_indices


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(5, 6), (1, 4), (3, 1)])
def test_crop_and_resize_against_a_loop(method, crop):
    gen, image, boxes, box_indices = problem(1, torch.float32)
    ours = ops.crop_and_resize(image, boxes, box_indices, crop, method, -3.5)
    reference = crop_loop(image, boxes, box_indices, crop, method, -3.5)
    assert torch.allclose(ours.double(), reference, rtol=0, atol=1e-5 * 5 * 4)
    # The image's gradient: d sum(out * up) / d image by a loop over the crop positions.
    up = torch.randn(ours.shape, generator=gen)
    leaf = image.clone().requires_grad_()
    ops.crop_and_resize(leaf, boxes, box_indices, crop, method).backward(up)
    expected = torch.zeros_like(image, dtype=torch.float64)
    eps_image = image.double().clone()
    base = crop_loop(eps_image, boxes, box_indices, crop, method, 0)
    # Linear in the image: one loop per pixel with a unit image gives each pixel's weight.
    for i in range(image.shape[0]):
        for y in range(image.shape[1]):
            for x in range(image.shape[2]):
                unit = torch.zeros_like(eps_image)
                unit[i, y, x] = 1
                weights = crop_loop(unit, boxes, box_indices, crop, method, 0) - \
                    crop_loop(torch.zeros_like(unit), boxes, box_indices, crop, method, 0)
                expected[i, y, x] = (weights * up.double()).sum((0, 1, 2))
    assert base.shape == ours.shape
    assert torch.allclose(leaf.grad.double(), expected, rtol=0, atol=1e-4)


def test_crop_and_resize_gradients_match_finite_differences():
    gen, image, _, _ = problem(2, torch.float64)
    # Boxes whose points stay inside the image and off the pixel grid: there the crop is
    # differentiable in the boxes.
    boxes = (torch.rand(6, 4, generator=gen, dtype=torch.float64) * 0.8 + 0.1)
    box_indices = torch.tensor([0, 1, 2, 0, 1, 2])
    image.requires_grad_()
    boxes.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda i, b: ops.crop_and_resize(i, b, box_indices, (4, 5)), (image, boxes),
        eps=1e-7, atol=1e-6)


def test_crop_and_resize_bits_repeat():
    gen, image, boxes, box_indices = problem(3, torch.float32)
    up = torch.randn(5, 6, 6, 4, generator=gen)
    results = []
    for _ in range(2):
        i, b = image.clone().requires_grad_(), boxes.clone().requires_grad_()
        ops.crop_and_resize(i, b, box_indices, (6, 6)).backward(up)
        results.append((bits(i.grad), bits(b.grad)))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1],
                                                                     results[1][1])


def sparse_problem(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    nnz = 200
    indices = torch.stack([torch.randint(0, 6, (nnz,), generator=gen),      # heavy duplication
                           torch.randint(0, 9, (nnz,), generator=gen)], 1)
    sign = torch.randint(0, 2, (nnz,), generator=gen).to(dtype) * 2 - 1
    values = sign * (torch.rand(nnz, generator=gen, dtype=dtype) + 0.5) * \
        2.0 ** torch.randint(-20, 21, (nnz,), generator=gen).to(dtype)
    dense = torch.randn(9, 5, generator=gen, dtype=dtype)
    return indices, values, dense


@pytest.mark.parametrize("adjoint_a,adjoint_b", [(False, False), (True, False), (False, True),
                                                 (True, True)])
def test_sparse_dense_matmul_is_the_loop_in_nonzero_order(adjoint_a, adjoint_b):
    indices, values, dense = sparse_problem(4, torch.float32)
    shape = (6, 9)
    a_rows, a_cols = indices[:, 0].tolist(), indices[:, 1].tolist()
    if adjoint_a:
        a_rows, a_cols, shape = a_cols, a_rows, (9, 6)
        dense = torch.randn(6, 5)
    b = dense.t().contiguous() if adjoint_b else dense
    out = ops.sparse_dense_matmul(indices, values, (6, 9), b, adjoint_a, adjoint_b)
    # float32 sums in the nonzeros' order, each product rounded once: the loop's bits.
    expected = torch.zeros(shape[0], dense.shape[1])
    for k, (r, c) in enumerate(zip(a_rows, a_cols)):
        expected[r] += values[k] * dense[c]
    assert torch.equal(bits(out), bits(expected))


def test_sparse_dense_matmul_gradients():
    indices, values, dense = sparse_problem(5, torch.float64)
    values = (values / values.abs().max()).requires_grad_()
    dense.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda v, d: ops.sparse_dense_matmul(indices, v, (6, 9), d), (values, dense))
    assert torch.autograd.gradcheck(
        lambda v, d: ops.sparse_dense_matmul(indices, v, (6, 9), d.t(), True, True),
        (values, torch.randn(6, 5, dtype=torch.float64, requires_grad=True)))


def test_bad_arguments_are_refused_by_name():
    image, boxes, index = torch.zeros(2, 4, 4, 3), torch.zeros(3, 4), torch.zeros(3,
                                                                                  dtype=torch.long)
    with pytest.raises(detcoll.InvalidArgumentError, match="method 'area'"):
        ops.crop_and_resize(image, boxes, index, (2, 2), "area")
    with pytest.raises(detcoll.InvalidArgumentError, match="box index is outside the batch of 2"):
        ops.crop_and_resize(image, boxes, index + 2, (2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="one entry per box"):
        ops.crop_and_resize(image, boxes, index[:2], (2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="crop_size"):
        ops.crop_and_resize(image, boxes, index, (0, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="boxes has dtype"):
        ops.crop_and_resize(image, boxes.double(), index, (2, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match=r"image .* must be \[batch"):
        ops.crop_and_resize(image[0], boxes, index, (2, 2))
    indices = torch.tensor([[0, 1], [2, 9]])
    with pytest.raises(detcoll.InvalidArgumentError, match="outside dense_shape"):
        ops.sparse_dense_matmul(indices, torch.ones(2), (3, 4), torch.ones(4, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="the sparse matrix is"):
        ops.sparse_dense_matmul(indices[:1], torch.ones(1), (3, 4), torch.ones(5, 2))
    with pytest.raises(detcoll.InvalidArgumentError, match="sp_values .* \\[nnz\\]"):
        ops.sparse_dense_matmul(indices[:1], torch.ones(2), (3, 4), torch.ones(4, 2))


def test_nearest_rounds_half_away_from_zero_and_takes_the_bilinear_box_gradient():
    image = torch.arange(36.0).reshape(1, 6, 6, 1)
    boxes, owner = torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([0])
    crop = ops.crop_and_resize(image, boxes, owner, (3, 3), "nearest")[0, ..., 0]
    # Rows and columns 0, 2.5 and 5: TensorFlow's roundf reads 0, 3 and 5.
    assert crop.tolist() == [[0, 3, 5], [18, 21, 23], [30, 33, 35]]
    up = torch.randn(1, 3, 3, 1, generator=torch.Generator().manual_seed(1))
    grads = []
    for method in ("nearest", "bilinear"):
        b = boxes.clone().requires_grad_()
        ops.crop_and_resize(image, b, owner, (3, 3), method).backward(up)
        grads.append(b.grad)
    assert torch.equal(grads[0], grads[1]) and grads[0].abs().sum() > 0


def test_second_derivatives_are_refused_not_dropped():
    idx = torch.tensor([[0, 1], [2, 0], [1, 3]])
    v = torch.randn(3, dtype=torch.float64, requires_grad=True)
    d = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    loss = (ops.sparse_dense_matmul(idx, v, (3, 4), d) ** 2).sum()
    gd, = torch.autograd.grad(loss, d, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiate twice"):
        (gd ** 2).sum().backward()


def test_more_bad_crops_and_products_are_refused_by_name():
    image, boxes, index = torch.zeros(2, 4, 4, 3), torch.zeros(3, 4), torch.zeros(3,
                                                                                  dtype=torch.long)
    with pytest.raises(detcoll.InvalidArgumentError, match="crop_size 3 must be 2 sizes"):
        ops.crop_and_resize(image, boxes, index, 3)
    with pytest.raises(detcoll.InvalidArgumentError, match="extrapolation_value 'x'"):
        ops.crop_and_resize(image, boxes, index, (2, 2), extrapolation_value="x")
    with pytest.raises(detcoll.InvalidArgumentError, match="not finite"):
        ops.crop_and_resize(image, boxes + float("inf"), index, (2, 2))
    none = ops.crop_and_resize(image, torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), (2, 2))
    assert none.shape == (0, 2, 2, 3)
    with pytest.raises(detcoll.InvalidArgumentError, match="dense must be a matrix"):
        ops.sparse_dense_matmul(torch.tensor([[0, 1]]), torch.ones(1), (3, 4), torch.ones(4),
                                adjoint_b=True)
    with pytest.raises(detcoll.InvalidArgumentError, match="dense_shape"):
        ops.sparse_dense_matmul(torch.tensor([[0, 1]]), torch.ones(1), (-3, 4), torch.ones(4, 2))
