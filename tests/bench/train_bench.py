#!/usr/bin/env python3
"""The training demo's step time: detcoll's DistributedOptimizer beside torch.distributed's
DistributedDataParallel over gloo, in one mpirun job, on the same data, model and schedule.

    mpirun -np 2 python3 tests/bench/train_bench.py [--hidden 64 512] [--steps 30] [--rounds 7]

Each configuration builds every side's trainer, warms each up, then runs rounds: in each round
every side runs --steps steps (the order rotates between rounds) between two barriers, and the
time per step is the slowest rank's. The table gives each side's median over the rounds and the
ratio to detcoll ordered (DDP / detcoll > 1: detcoll is faster).
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import detcoll
import detcoll.torch as hvd
from detcoll.torch import rng

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
import train_demo as demo  # noqa: E402


class DDPTrainer:
    """The demo's step with DistributedDataParallel: no_sync() for all but the last pass."""

    def __init__(self, micro_batches, batch, seed, hidden):
        self.rank, self.per_rank = dist.get_rank(), micro_batches // dist.get_world_size()
        root = rng.Key.from_seed(seed)
        self.data = demo.SyntheticData(root)
        self.schedule = demo.Schedule(self.data, micro_batches, batch)
        model = demo.make_model(hidden)
        demo.init_weights(model, root)
        self.model = torch.nn.parallel.DistributedDataParallel(model)
        self.optimizer = torch.optim.SGD(model.parameters(),
                                         lr=demo.LEARNING_RATE / micro_batches, momentum=0.9)

    def step(self, step):
        self.model.train()
        self.optimizer.zero_grad()
        for j in range(self.per_rank):
            m = self.rank * self.per_rank + j
            x, y, keys = self.data.batch(step, self.schedule.indices(step, m))
            last = j == self.per_rank - 1
            with (contextlib.nullcontext() if last else self.model.no_sync()), rng.samples(keys):
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
                loss.backward()
        self.optimizer.step()


def barrier():
    hvd.allreduce(torch.zeros(1), op=hvd.Sum, name="bench.barrier")
    dist.barrier()


def slowest(seconds):
    return hvd.allreduce(torch.tensor([seconds], dtype=torch.float64), op=hvd.Max,
                         name="bench.time").item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30, help="steps per side per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    port = hvd.broadcast_object(_free_port() if hvd.rank() == 0 else None, 0, name="bench.port")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=hvd.rank(),
                            world_size=hvd.size())
    rank0 = hvd.rank() == 0
    if rank0:
        print(f"# {hvd.size()} ranks, 1 torch thread each, {args.micro_batches} micro-batches of "
              f"{args.batch} per step, {args.rounds} rounds of {args.steps} steps per side; "
              "ms per step, median over rounds (slowest rank)")
        print(f"{'model':<22} {'params':>8} | {'detcoll ordered':>15} {'detcoll invariant':>17} | "
              f"{'torch DDP (gloo)':>16} | {'DDP / ordered':>13}")
    for hidden in args.hidden:
        sides = {}
        for mode in ("ordered", "invariant"):
            detcoll.set_mode(mode)
            sides[mode] = (mode, demo.Trainer(args.micro_batches, args.batch, 1, hidden=hidden))
        sides["ddp"] = (None, DDPTrainer(args.micro_batches, args.batch, 1, hidden))
        times = {name: [] for name in sides}
        step = 0
        for name, (mode, trainer) in sides.items():
            if mode is not None:
                detcoll.set_mode(mode)
            for _ in range(args.warmup):
                trainer.step(step)
                step += 1
        names = list(sides)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                mode, trainer = sides[name]
                if mode is not None:
                    detcoll.set_mode(mode)
                barrier()
                start = time.perf_counter()
                for _ in range(args.steps):
                    trainer.step(step)
                    step += 1
                times[name].append(slowest((time.perf_counter() - start) / args.steps))
        detcoll.set_mode("ordered")
        median = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        params = sum(p.numel() for p in sides["ddp"][1].model.parameters())
        if rank0:
            label = f"MLP 32-{hidden}-{hidden}-8"
            print(f"{label:<22} {params:>8} | {median['ordered']:>15.3f} "
                  f"{median['invariant']:>17.3f} | {median['ddp']:>16.3f} | "
                  f"{median['ddp'] / median['ordered']:>13.2f}")
    dist.destroy_process_group()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
