"""The training that test_debug.py records and compares: a small MLP with a scatter layer, V
micro-batches per step over the ranks (contiguous shares), DistributedOptimizer with op=Sum.

    debug_train.py --record DIR [--ops] [--steps 3] [--micro-batches 6] [--dump FILE]
                   [--plant] [--delay] [--nudge] [--check-replicas N] [--no-record]

--plant: the scatter layer adds its sources through a custom op (planted::racy_index_add) that
  takes the duplicates of each index in an order drawn from PLANT_SEED: a run-dependent result
  from the same inputs, as an atomicAdd kernel gives.
--delay: rank 1 sleeps in backward between the layers' gradients (other fusion batches in
  native mode, same values).
--nudge: rank 1 moves one weight by one ulp after the first step.
--dump FILE: this rank's own reference, independent of the recorder: per step, each parameter's
  gradient before the reduction (torch.autograd.grad) and after it, as a torch.save'd dict.
"""

import argparse
import os
import time

import torch

import detcoll
import detcoll.debug as dbg
import detcoll.torch as hvd

_LIB = None


def _planted_op():
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("planted", "DEF")
        _LIB.define("racy_index_add(Tensor self, Tensor index, Tensor source) -> Tensor")

        def racy(self, index, source):
            seed = int(os.environ.get("PLANT_SEED", "0"))
            order = torch.randperm(index.numel(), generator=torch.Generator().manual_seed(seed))
            return self.clone().index_add_(0, index[order], source[order])

        _LIB.impl("racy_index_add", racy, "CPU")
    return torch.ops.planted.racy_index_add


class Scatter(torch.nn.Module):
    """Adds 512 fixed wide-range values into 32 slots of a mixing vector (duplicates
    everywhere), then scales the features by it."""

    def __init__(self, plant):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.register_buffer("index", torch.randint(0, 32, (512,), generator=g))
        self.register_buffer("source", torch.randn(512, generator=g) *
                             torch.pow(10.0, torch.randint(-3, 4, (512,), generator=g)))
        self.plant = plant

    def forward(self, x):
        zeros = torch.zeros(32)
        if self.plant:
            mix = _planted_op()(zeros, self.index, self.source)
        else:
            mix = zeros.index_add(0, self.index, self.source)
        return x * (mix * 1e-3)


class Delay(torch.nn.Module):
    """Identity; in backward, sleeps on rank 1 when asked (between the layers' gradients)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        if self.seconds and x.requires_grad:
            x.register_hook(lambda g: time.sleep(self.seconds) if hvd.rank() == 1 else None)
        return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--ops", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, default=6)
    parser.add_argument("--dump")
    parser.add_argument("--plant", action="store_true")
    parser.add_argument("--delay", action="store_true")
    parser.add_argument("--nudge", action="store_true")
    parser.add_argument("--check-replicas", type=int, default=0)
    parser.add_argument("--width", type=int, default=32)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(3)
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), Scatter(args.plant), torch.nn.Tanh(),
                                Delay(0.3 if args.delay else 0), torch.nn.Linear(32, w),
                                torch.nn.Tanh(), torch.nn.Linear(w, 4))
    per_rank = args.micro_batches // hvd.size()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters(), op=hvd.Sum,
                                   backward_passes_per_step=per_rank,
                                   check_replicas_every=args.check_replicas)
    g = torch.Generator().manual_seed(11)
    data = torch.randn(args.steps, args.micro_batches, 5, 8, generator=g) * 4
    dump = []
    recording = dbg.record(args.record, ops=args.ops) if args.record else None
    if recording is not None:
        recording.__enter__()
    try:
        for step in range(args.steps):
            pre = None
            for j in range(per_rank):
                m = hvd.rank() * per_rank + j
                loss = model(data[step, m]).pow(2).mean()
                if args.dump:
                    grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
                    pre = grads if pre is None else [a + b for a, b in zip(pre, grads)]
                loss.backward()
            opt.synchronize()
            if args.dump:
                dump.append({"pre": {n: t.clone() for (n, _), t in
                                     zip(model.named_parameters(), pre)},
                             "reduced": {n: p.grad.clone() for n, p in model.named_parameters()}})
            with opt.skip_synchronize():
                opt.step()
            opt.zero_grad()
            if args.nudge and step == 0 and hvd.rank() == 1:
                with torch.no_grad():
                    flat = model[4].weight.view(-1)
                    flat[5] = torch.nextafter(flat[5], torch.tensor(float("inf")))
    finally:
        if recording is not None:
            recording.__exit__(None, None, None)
    if args.dump:
        torch.save(dump, f"{args.dump}.rank{hvd.rank()}")
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    print(f"rank {hvd.rank()} done weights {dbg.fingerprint(weights):016x}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except detcoll.Error as e:
        print(f"rank {hvd.rank()} error: {e}", flush=True)
        raise SystemExit(3)
