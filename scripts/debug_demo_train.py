"""The training of the debugger's demo (scripts/debug_demo.sh): an MLP whose middle layer mixes
its features through a scatter-add, trained through detcoll.torch's DistributedOptimizer in
ordered mode, so that everything in it is reproducible but one op.

That op, demo::atomic_index_add, emulates CUDA's index_add_ (an atomicAdd per source element):
it adds the duplicates of each index in an order that changes from run to run (drawn from
os.urandom), so its output differs in the last bits between runs whose inputs are equal. Every
layer after it, the loss, the gradients, the reductions and the weights then differ too; the
recorder and `python3 -m detcoll.debug diff` name the op itself, with its call site.

    mpirun -np 3 python3 scripts/debug_demo_train.py [--steps 3] [--fixed]

--fixed uses torch's own (deterministic on CPU) index_add instead. Prints the final weights'
fingerprint on each rank.
"""

import argparse
import os

import torch

import detcoll.debug as dbg
import detcoll.torch as hvd

_LIBRARY = None


def atomic_index_add():
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("demo", "DEF")
        _LIBRARY.define("atomic_index_add(Tensor self, Tensor index, Tensor source) -> Tensor")

        def arrival_order(self, index, source):
            seed = int.from_bytes(os.urandom(8), "little")
            order = torch.randperm(index.numel(), generator=torch.Generator().manual_seed(seed))
            return self.clone().index_add_(0, index[order], source[order])

        _LIBRARY.impl("atomic_index_add", arrival_order, "CPU")
    return torch.ops.demo.atomic_index_add


class Mix(torch.nn.Module):
    """Scales the features by a mixing vector: 256 wide-range values added into 16 slots."""

    def __init__(self, fixed):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.register_buffer("index", torch.randint(0, 16, (256,), generator=g))
        self.register_buffer("source", torch.randn(256, generator=g) *
                             torch.pow(10.0, torch.randint(-3, 4, (256,), generator=g)))
        self.fixed = fixed

    def forward(self, x):
        slots = torch.zeros(16)
        if self.fixed:
            mix = slots.index_add(0, self.index, self.source)
        else:
            mix = atomic_index_add()(slots, self.index, self.source)
        return x * (mix * 1e-3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), Mix(args.fixed), torch.nn.Tanh(),
                                torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    data = torch.randn(args.steps, hvd.size(), 8, 12, generator=torch.Generator().manual_seed(2))
    for step in range(args.steps):
        loss = model(data[step, hvd.rank()]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    print(f"rank {hvd.rank()} final weights {dbg.fingerprint(weights):016x}", flush=True)


if __name__ == "__main__":
    main()
