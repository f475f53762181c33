"""Allreduce of a model's gradient set from CUDA tensors: detcoll.torch (ordered and invariant,
through the fusion engine's device buffers) beside torch.distributed's NCCL allreduce of the same
tensors, one call per tensor and one flat call of all their bytes; then the same requests on
16-element tensors, the per-request cost, with detcoll's enqueue and synchronize apart. At one
rank (what one GPU allows) this is a latency and launch-overhead figure, not a bandwidth one.

    PYTHONPATH=build/python python3 scripts/torch_gpu_bench.py [--model resnet50] [--steps 30]

Prints a table (median of the timed steps, each timed from the first enqueue to the stream's
completion) and checks that every detcoll result equals the same call on CPU tensors.
"""

import argparse
import os
import pathlib
import statistics
import time

import torch
import torch.distributed as dist

import detcoll
import detcoll.torch as hvd


def shapes(model):
    path = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "workloads"
    out = []
    for line in (path / f"{model}.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        _, dims = line.split()
        out.append(tuple(int(d) for d in dims.split(",")))
    return out


def timed(step, steps, warmup=3):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        begin = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - begin)
    return statistics.median(times) * 1e3


def same_bits(outs, refs):
    """"yes" when every CUDA result has the bits of the same call on CPU tensors, else "NO"."""
    same = all(torch.equal(o.cpu().view(torch.int32), r.view(torch.int32))
               for o, r in zip(outs, refs))
    return "yes" if same else "NO"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    hvd.init()
    torch.cuda.set_device(0)
    grads_cpu = []
    g = torch.Generator().manual_seed(11 + hvd.rank())
    for s in shapes(args.model):
        grads_cpu.append(((torch.rand(s, generator=g) - 0.5) * 1e-2).contiguous())
    grads = [t.cuda() for t in grads_cpu]
    total = sum(t.numel() for t in grads) * 4
    rows = []
    counter = [0]

    def detcoll_step(mode):
        def step():
            counter[0] += 1
            handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f"{mode}.{counter[0]}.{i}")
                       for i, t in enumerate(grads)]
            return [hvd.synchronize(h) for h in handles]
        return step

    for mode in ("ordered", "invariant"):
        detcoll.set_mode(mode)
        step = detcoll_step(mode)
        ms = timed(step, args.steps)
        outs = step()
        ref = [hvd.allreduce(t, op=hvd.Sum, name=f"cpu.{mode}.{i}")
               for i, t in enumerate(grads_cpu)]
        rows.append((f"detcoll {mode} (fusion engine)", ms, same_bits(outs, ref)))

    # The same requests on 16-element tensors: what a step costs apart from its bytes (the
    # Python layer, the engine's negotiation, the events), split into the enqueue and the wait.
    tiny = [t.reshape(-1)[:16].clone() for t in grads]
    detcoll.set_mode("ordered")
    split = []

    def tiny_step():
        counter[0] += 1
        begin = time.perf_counter()
        handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f"tiny.{counter[0]}.{i}")
                   for i, t in enumerate(tiny)]
        enqueued = time.perf_counter()
        outs = [hvd.synchronize(h) for h in handles]
        split.append((enqueued - begin, time.perf_counter() - enqueued))
        return outs

    ms = timed(tiny_step, args.steps)
    enqueue = statistics.median(e for e, _ in split[-args.steps:]) * 1e3
    wait = statistics.median(w for _, w in split[-args.steps:]) * 1e3
    outs = tiny_step()
    ref = [hvd.allreduce(t.cpu(), op=hvd.Sum, name=f"cpu.tiny.{i}") for i, t in enumerate(tiny)]
    rows.append((f"detcoll ordered, {len(tiny)} 16-element tensors (enqueue {enqueue:.3f}, "
                 f"synchronize {wait:.3f})", ms, same_bits(outs, ref)))

    if hvd.size() == 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        work = [t.clone() for t in grads]
        rows.append(("torch.distributed NCCL, one call per tensor",
                     timed(lambda: [dist.all_reduce(t) for t in work], args.steps), "-"))
        flat = torch.cat([t.reshape(-1) for t in grads])
        rows.append(("torch.distributed NCCL, one flat call",
                     timed(lambda: dist.all_reduce(flat), args.steps), "-"))
        work = [t.clone() for t in tiny]
        rows.append(("torch.distributed NCCL, one call per 16-element tensor",
                     timed(lambda: [dist.all_reduce(t) for t in work], args.steps), "-"))
        dist.destroy_process_group()

    if hvd.rank() == 0:
        print(f"device: {torch.cuda.get_device_name()}, {hvd.size()} rank(s), "
              f"{args.model}: {len(grads)} float32 tensors, {total / 2**20:.1f} MiB; "
              f"median of {args.steps} steps")
        print()
        print("| allreduce of the gradient set | ms per step | equals the CPU call |")
        print("|---|---:|---|")
        for name, ms, same in rows:
            print(f"| {name} | {ms:.3f} | {same} |")
    hvd.shutdown()


if __name__ == "__main__":
    main()
