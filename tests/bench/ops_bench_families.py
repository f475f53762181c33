"""The ops benchmark's rows for the window, resampling, indexing, loss and TensorFlow families
(tests/bench/ops_bench.py): each detcoll.torch.ops call beside the PyTorch CPU op it replaces,
called with the arguments autograd's backward formula passes. crop_and_resize's peer is
F.grid_sample on the same points (align_corners, the crop's coordinates), and both rows compare
the image's gradient; sparse_dense_matmul's is torch.sparse.mm, both rows comparing the dense
operand's gradient."""

import torch
import torch.nn.functional as F

from detcoll.torch import ops

aten = torch.ops.aten

# Rows whose PyTorch call does not reach a patched operator (the second table leaves them out).
UNPATCHED = ("crop_and_resize", "sparse_dense_matmul")


def _wide_on(shape, g, device="cpu"):
    n = 1
    for s in shape:
        n *= s
    mantissa = torch.rand(n, generator=g, dtype=torch.float64) + 1.0
    exponent = torch.randint(-4, 5, (n,), generator=g).double()
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return (sign * mantissa * torch.pow(2.0, exponent)).float().reshape(shape).to(device)


def _grads(fn, *inputs):
    """Forward and backward of fn through autograd for every input: the first one's gradient."""
    def run():
        leaves = [t.detach().requires_grad_() for t in inputs]
        fn(*leaves).sum().backward()
        return leaves[0].grad
    return run


def cases(g, device="cpu"):
    """(label, detcoll's call, PyTorch's call) for each row, its tensors on `device`."""
    out = []

    def _wide(shape, gen):
        return _wide_on(shape, gen, device)

    def on(t):
        return t.to(device)

    x = _wide((16, 32, 56, 56), g)
    up = _wide((16, 32, 62, 62), g)
    out.append(("reflection_pad2d backward, [16, 32, 56, 56] +3",
                lambda: ops.reflection_pad_backward(up, x.shape, (3, 3, 3, 3)),
                lambda: aten.reflection_pad2d_backward(up, x, [3, 3, 3, 3])))
    v = _wide((4, 16, 16, 32, 32), g)
    vup = _wide((4, 16, 18, 34, 34), g)
    out.append(("replication_pad3d backward, [4, 16, 16, 32, 32] +1",
                lambda: ops.replication_pad_backward(vup, v.shape, (1,) * 6),
                lambda: aten.replication_pad3d_backward(vup, v, [1] * 6)))
    big = _wide((16, 32, 112, 112), g)
    pup = _wide((16, 32, 56, 56), g)
    out.append(("avg_pool2d backward, [16, 32, 112, 112] 3x3 s2",
                lambda: ops.avg_pool_backward(pup, big.shape, (3, 3), (2, 2), (1, 1)),
                lambda: aten.avg_pool2d_backward(pup, big, [3, 3], [2, 2], [1, 1], False, True,
                                                 None)))
    aup = _wide((16, 32, 7, 7), g)
    out.append(("adaptive_avg_pool2d backward, 56x56 -> 7x7",
                lambda: ops.adaptive_avg_pool_backward(aup, x.shape),
                lambda: aten._adaptive_avg_pool2d_backward(aup, x)))
    _, amax = F.adaptive_max_pool2d(x, 7, return_indices=True)
    out.append(("adaptive_max_pool2d backward, 56x56 -> 7x7",
                lambda: ops.max_pool_backward(aup, x.shape, amax),
                lambda: aten.adaptive_max_pool2d_backward(aup, x, amax)))
    vol = _wide((4, 16, 16, 56, 56), g)
    vout, vidx = F.max_pool3d(vol, 3, 2, 1, return_indices=True)
    vgrad = _wide(tuple(vout.shape), g)
    out.append(("max_pool3d backward, [4, 16, 16, 56, 56] 3 s2",
                lambda: ops.max_pool_backward(vgrad, vol.shape, vidx),
                lambda: aten.max_pool3d_with_indices_backward(vgrad, vol, [3] * 3, [2] * 3,
                                                              [1] * 3, [1] * 3, False, vidx)))
    pooled, pidx = F.max_pool2d(big, 2, return_indices=True)
    out.append(("max_unpool2d, [16, 32, 56, 56] -> 112",
                lambda: ops.max_unpool(pooled, pidx, (112, 112)),
                lambda: aten.max_unpool2d(pooled, pidx, [112, 112])))
    line = _wide((64, 64, 512), g)
    lup = _wide((64, 64, 1024), g)
    out.append(("linear backward, [64, 64, 512] x2 up",
                lambda: ops.upsample_backward(lup, [1024], line.shape, False),
                lambda: aten.upsample_linear1d_backward(lup, [1024], list(line.shape), False)))
    tri = _wide((2, 16, 16, 28, 28), g)
    tup = _wide((2, 16, 32, 56, 56), g)
    out.append(("trilinear backward, [2, 16, 16, 28, 28] x2 up",
                lambda: ops.upsample_backward(tup, [32, 56, 56], tri.shape, False),
                lambda: aten.upsample_trilinear3d_backward(tup, [32, 56, 56], list(tri.shape),
                                                           False)))
    small = _wide((16, 32, 28, 28), g)
    cup = _wide((16, 32, 56, 56), g)
    out.append(("bicubic backward, [16, 32, 28, 28] x2 up",
                lambda: ops.upsample_backward(cup, [56, 56], small.shape, False, mode="bicubic"),
                lambda: aten.upsample_bicubic2d_backward(cup, [56, 56], list(small.shape),
                                                         False)))
    grid = on(torch.rand(16, 56, 56, 2, generator=g) * 2.2 - 1.1)
    gup = _wide((16, 32, 56, 56), g)
    out.append(("grid_sample backward, [16, 32, 56, 56] bilinear",
                lambda: torch.cat([t.reshape(-1) for t in ops.grid_sampler_backward(
                    gup, x, grid, 0, 0, False)]),
                lambda: torch.cat([t.reshape(-1) for t in aten.grid_sampler_2d_backward(
                    gup, x, grid, 0, 0, False, [True, True])])))
    steps, batch, classes, length = 100, 16, 30, 30
    logp = on(torch.randn(steps, batch, classes, generator=g).log_softmax(2))
    targets = on(torch.randint(1, classes, (batch, length), generator=g))
    lengths = [steps] * batch
    tlen = [length - (b % 5) for b in range(batch)]
    nll, alpha = aten._ctc_loss(logp, targets, lengths, tlen, 0, False)
    ones = on(torch.ones(batch))
    out.append(("ctc_loss backward, T 100, batch 16, 30 classes",
                lambda: ops.ctc_loss_backward(ones, logp, targets, lengths, tlen, nll, alpha, 0),
                lambda: aten._ctc_loss_backward(ones, logp, targets, lengths, tlen, nll, alpha,
                                                0)))
    rows = _wide((200000, 64), g)
    picks = on(torch.randint(0, 1000, (200000,), generator=g))
    table = on(torch.zeros(1000, 64))
    out.append(("index_put_ accumulate, 2e+05 rows x 64 -> 1000",
                lambda: ops.index_put_(table.clone(), [picks], rows, True),
                lambda: aten.index_put_(table.clone(), [picks], rows, True)))
    flat = _wide((10**6,), g)
    spots = on(torch.randint(0, 10**5, (10**6,), generator=g))
    out.append(("put_ accumulate, 1e+06 -> 1e5",
                lambda: ops.put_(on(torch.zeros(10**5)), spots, flat, True),
                lambda: on(torch.zeros(10**5)).put_(spots, flat, accumulate=True)))
    out.append(("histc, 1e+06 values, 100 bins",
                lambda: ops.histc(flat, 100, -8, 8), lambda: torch.histc(flat, 100, -8, 8)))
    weight = _wide((30000, 64), g)
    ids = on(torch.randint(0, 30000, (16 * 10**4,), generator=g))
    offsets = on(torch.arange(0, ids.numel(), 16))
    _, offset2bag, bag_size, maxima = aten._embedding_bag(weight, ids, offsets, False, 2)
    bgrad = _wide((10**4, 64), g)
    out.append(("embedding_bag(max) backward, 1e+04 bags of 16",
                lambda: ops.embedding_bag_dense_backward(bgrad, ids, offset2bag, bag_size, maxima,
                                                         30000, False, 2),
                lambda: aten._embedding_bag_dense_backward(bgrad, ids, offset2bag, bag_size,
                                                           maxima, 30000, False, 2, None)))
    images = _wide((8, 64, 64, 16), g)
    boxes = on(torch.rand(256, 4, generator=g) * 0.8 + 0.1)
    boxes = torch.cat([boxes[:, :2].minimum(boxes[:, 2:]), boxes[:, :2].maximum(boxes[:, 2:])],
                      1)
    owners = on(torch.randint(0, 8, (256,), generator=g))
    k = on(torch.linspace(0, 1, 14))
    # The same points as a grid for F.grid_sample (align_corners: -1 .. 1 spans the pixels).
    ys = boxes[:, 0:1] + (boxes[:, 2:3] - boxes[:, 0:1]) * k
    xs = boxes[:, 1:2] + (boxes[:, 3:4] - boxes[:, 1:2]) * k
    sample_grid = torch.stack([(2 * xs - 1).unsqueeze(1).expand(-1, 14, -1),
                               (2 * ys - 1).unsqueeze(2).expand(-1, -1, 14)], 3)
    out.append(("crop_and_resize fwd+bwd, 256 boxes -> 14x14",
                _grads(lambda i, b: ops.crop_and_resize(i, b, owners, (14, 14)), images, boxes),
                _grads(lambda i, b: F.grid_sample(i.permute(0, 3, 1, 2)[owners], b,
                                                  align_corners=True), images, sample_grid)))
    nnz = 10**6
    coords = on(torch.stack([torch.randint(0, 10**4, (nnz,), generator=g),
                             torch.randint(0, 10**4, (nnz,), generator=g)], 1))
    values = _wide((nnz,), g)
    dense = _wide((10**4, 32), g)
    out.append(("sparse_dense_matmul fwd+bwd, 1e+06 nnz x 32",
                _grads(lambda d, v: ops.sparse_dense_matmul(coords, v, (10**4, 10**4), d),
                       dense, values),
                _grads(lambda d, v: torch.sparse.mm(
                    torch.sparse_coo_tensor(coords.t(), v, (10**4, 10**4)), d), dense, values)))
    return out
