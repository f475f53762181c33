#!/usr/bin/env python3
"""detcoll.torch.ops on the CPU beside the PyTorch CPU op it replaces, same inputs, same run.

    scripts/ops_bench.sh [--threads 1] [--repeats 5]     (tests/bench/ops_bench.py)

Each op runs alternately with its PyTorch peer, best of --repeats; ratio = peer time / detcoll
time (above 1: detcoll is faster). #wrong counts elements of detcoll's result that differ from
the peer's by more than the float32 tolerance 1e-4 * (1 + |peer|) (the summation orders differ
where PyTorch's is not the sequential one).

A second table times PyTorch's own call (unchanged model code) with detcoll.torch.patch(devices=
("cpu",)) and without, alternately: detcoll's kernel reached through torch.library, beside
PyTorch's, so the dispatch through Python is counted too.
"""

import argparse
import time

import torch
import torch.nn.functional as F

import detcoll.torch as dt
from detcoll.torch import ops

import ops_bench_families


def wide(n, g, dtype=torch.float32):
    mantissa = torch.rand(n, generator=g, dtype=torch.float64) + 1.0
    exponent = torch.randint(-4, 5, (n,), generator=g).double()
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return (sign * mantissa * torch.pow(2.0, exponent)).to(dtype)


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def embedding_grad(fn, ids, weight, **kw):
    def run():
        w = weight.detach().requires_grad_()
        fn(ids, w, **kw).sum().backward()
        return w.grad
    return run


def input_grad(fn, x, *args, **kw):
    def run():
        xx = x.detach().requires_grad_()
        fn(xx, *args, **kw).sum().backward()
        return xx.grad
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--updates", type=int, default=10**7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ops.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(7)
    n = args.updates
    cases = []
    src = wide(n, g)
    index = torch.randint(0, 10**5, (n,), generator=g)
    base = torch.zeros(10**5)
    cases.append((f"scatter_add 1-D, {n:.0e} updates -> 1e5", lambda: ops.scatter_add(
        base, 0, index, src), lambda: torch.scatter_add(base, 0, index, src)))
    rows = wide(n // 64 * 64, g).reshape(-1, 64)
    rindex = torch.randint(0, 1000, (rows.shape[0],), generator=g)
    table = torch.zeros(1000, 64)
    cases.append((f"index_add dim 0, {rows.shape[0]:.0e} rows x 64 -> 1000",
                  lambda: ops.index_add(table, 0, rindex, rows),
                  lambda: torch.index_add(table, 0, rindex, rows)))
    weight = wide(30000 * 64, g).reshape(30000, 64)
    ids = torch.randint(0, 30000, (n // 64,), generator=g)
    cases.append((f"embedding backward, {ids.numel():.0e} lookups x 64",
                  embedding_grad(ops.embedding, ids, weight),
                  embedding_grad(F.embedding, ids, weight)))
    bags = ids[: ids.numel() // 16 * 16].reshape(-1, 16)
    cases.append((f"embedding_bag(mean) backward, {bags.shape[0]:.0e} bags of 16",
                  embedding_grad(ops.embedding_bag, bags, weight, mode="mean"),
                  embedding_grad(F.embedding_bag, bags, weight, mode="mean")))
    values = wide(n, g)
    bins = torch.randint(0, 1000, (n,), generator=g)
    cases.append((f"bincount with weights, {n:.0e} -> 1000", lambda: ops.bincount(bins, values),
                  lambda: torch.bincount(bins, values)))

    image = wide(16 * 32 * 56 * 56, g).reshape(16, 32, 56, 56)
    cases.append(("bilinear backward, [16, 32, 56, 56] x2 up",
                  input_grad(ops.interpolate, image, scale_factor=2, align_corners=False),
                  input_grad(F.interpolate, image, scale_factor=2, mode="bilinear",
                             align_corners=False)))
    pooled = wide(16 * 32 * 112 * 112, g).reshape(16, 32, 112, 112)
    cases.append(("max_pool2d fwd+bwd, [16, 32, 112, 112] 3x3 s2",
                  input_grad(ops.max_pool2d, pooled, 3, stride=2, padding=1),
                  input_grad(F.max_pool2d, pooled, 3, stride=2, padding=1)))

    logp = wide(n // 10 * 10, g).reshape(-1, 10)
    classes = torch.randint(0, 10, (logp.shape[0],), generator=g)
    class_weight = wide(10, g).abs()
    cases.append((f"nll_loss(mean, weights), {logp.shape[0]:.0e} x 10",
                  lambda: ops.nll_loss(logp, classes, class_weight),
                  lambda: F.nll_loss(logp, classes, class_weight)))

    near = wide(16 * 32 * 112 * 112, g).reshape(16, 32, 112, 112)
    cases.append(("nearest backward, [16, 32, 56, 56] x2 up",
                  lambda: ops.upsample_nearest_backward(near, [112, 112], [16, 32, 56, 56]),
                  lambda: torch.ops.aten.upsample_nearest2d_backward(near, [112, 112],
                                                                     [16, 32, 56, 56])))
    tied = torch.randint(0, 50, (n // 100, 100), generator=g).float()
    cases.append((f"kthvalue(k=30, dim=1), {tied.shape[0]:.0e} x 100, many ties",
                  lambda: ops.kthvalue(tied, 30, 1).values,
                  lambda: torch.kthvalue(tied, 30, 1).values))
    cases.append((f"median(dim=1), {tied.shape[0]:.0e} x 100, many ties",
                  lambda: ops.median(tied, 1).values, lambda: torch.median(tied, 1).values))
    cases += ops_bench_families.cases(g)

    print(f"# detcoll.torch.ops vs PyTorch {torch.__version__} CPU, {args.threads} thread(s), "
          f"best of {args.repeats}, float32")
    print(f"{'op':<48} {'detcoll (ms)':>12} {'torch (ms)':>11} {'ratio':>7} {'#wrong':>7}")
    for label, ours, theirs in cases:
        ours()
        theirs()  # warm up
        t_ours = t_theirs = float("inf")
        for _ in range(args.repeats):
            a, out = best(ours, 1)
            b, ref = best(theirs, 1)
            t_ours, t_theirs = min(t_ours, a), min(t_theirs, b)
        wrong = int(((out - ref).abs() > 1e-4 * (1 + ref.abs())).sum())
        print(f"{label:<48} {1e3 * t_ours:>12.2f} {1e3 * t_theirs:>11.2f} "
              f"{t_theirs / t_ours:>7.2f} {wrong:>7}")

    print()
    print("# the same PyTorch calls, detcoll.torch.patch(devices=('cpu',)) against unpatched")
    print(f"{'op':<48} {'patched (ms)':>12} {'torch (ms)':>11} {'ratio':>7} {'#wrong':>7}")
    for label, _, theirs in cases:
        if label.startswith(("embedding_bag(mean)",) + ops_bench_families.UNPATCHED):
            continue  # its PyTorch call reaches no patched operator
        t_ours = t_theirs = float("inf")
        for i in range(args.repeats + 1):
            with dt.patched(devices=("cpu",)):
                a, out = best(theirs, 1)
            b, ref = best(theirs, 1)
            if i > 0:  # the first round warms up
                t_ours, t_theirs = min(t_ours, a), min(t_theirs, b)
        wrong = int(((out - ref).abs() > 1e-4 * (1 + ref.abs())).sum())
        print(f"{label:<48} {1e3 * t_ours:>12.2f} {1e3 * t_theirs:>11.2f} "
              f"{t_theirs / t_ours:>7.2f} {wrong:>7}")


if __name__ == "__main__":
    main()
