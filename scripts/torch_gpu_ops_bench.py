#!/usr/bin/env python3
"""The deterministic ops of detcoll.torch.ops on CUDA beside torch's own CUDA kernels (the ones
that add with atomicAdd), the rows of the CPU ops benchmark (tests/bench/ops_bench_families.py)
with their tensors on the GPU.

    python3 scripts/torch_gpu_ops_bench.py [--repeats 20]

Each pair runs alternately, CUDA-synchronized, the median of --repeats after a warm-up; ratio =
torch's time / detcoll's. "ours repeats" and "torch repeats" say whether a second call gave the
same bits as the first (torch's atomicAdd kernels may not); "#wrong" counts elements of ours
that differ from torch's by more than 1e-4 · (1 + |torch's|).
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "bench"))
import ops_bench_families  # noqa: E402


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


def same_bits(a, b):
    if a.dtype.is_floating_point:
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
    return torch.equal(a, b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu_ops_bench: no CUDA device")
        return 1
    g = torch.Generator().manual_seed(7)
    rows = ops_bench_families.cases(g, "cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, median of "
          f"{args.repeats}")
    print()
    print("| op | detcoll (ms) | torch (ms) | ratio | ours repeats | torch repeats | #wrong |")
    print("|---|---:|---:|---:|---|---|---:|")
    for label, ours, theirs in rows:
        first_ours, first_theirs = ours(), theirs()
        ours_times, theirs_times = [], []
        for _ in range(args.repeats):
            a, out = timed(ours)
            b, ref = timed(theirs)
            ours_times.append(a)
            theirs_times.append(b)
        t_ours, t_theirs = statistics.median(ours_times), statistics.median(theirs_times)
        wrong = int(((out.double() - ref.double()).abs() >
                     1e-4 * (1 + ref.double().abs())).sum())
        print(f"| {label} | {1e3 * t_ours:.3f} | {1e3 * t_theirs:.3f} | "
              f"{t_theirs / t_ours:.2f} | {'yes' if same_bits(out, first_ours) else 'NO'} | "
              f"{'yes' if same_bits(ref, first_theirs) else 'no'} | {wrong} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
