"""The debugger's costs, measured side by side in one process (README, "Finding why two runs
differ"):

1. fingerprint (XXH3-64) against a plain copy of the same bytes (torch's copy_, a memcpy), GB/s;
2. a training step's time with record() (gradients, reductions, parameters, state, with their
   values), with record(values=False) (fingerprints only) and with record(ops=True) against the
   step unrecorded, on the demo's MLP and on a CNN of about 4M parameters.

Each pair alternates its sides, several rounds, medians. Single process (np 1), so the step is
all compute: the overhead is at its largest relative share.

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/debug_bench.py [--rounds 5]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

import detcoll.debug as dbg
import detcoll.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))


def hashing(rounds):
    print("| bytes | fingerprint GB/s | copy GB/s | ratio |")
    print("|---|---|---|---|")
    for mib in (1, 16, 256):
        src = torch.randn(mib * (1 << 20) // 4)
        dst = torch.empty_like(src)
        fp, cp = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(3):
                dbg.fingerprint(src)
            fp.append((time.perf_counter() - t) / 3)
            t = time.perf_counter()
            for _ in range(3):
                dst.copy_(src)
            cp.append((time.perf_counter() - t) / 3)
        gb = mib * (1 << 20) / 1e9
        f, c = gb / statistics.median(fp), gb / statistics.median(cp)
        print(f"| {mib} MiB | {f:.2f} | {c:.2f} | {f / c:.2f} |")


def mlp():
    import train_demo

    return train_demo.make_model(), (64, train_demo.FEATURES), train_demo.CLASSES


def cnn():
    layers = [torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
              torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(128, 256, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(256, 256, 3, padding=1), torch.nn.ReLU(),
              torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(4096, 768),
              torch.nn.ReLU(), torch.nn.Linear(768, 10)]
    return torch.nn.Sequential(*layers), (16, 3, 32, 32), 10


def steps(make, rounds, steps_per_round):
    model, shape, classes = make()
    params = sum(p.numel() for p in model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9),
                                   named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g)

    from detcoll import rng as keys_of
    from detcoll.torch import rng

    keys = rng.sample_keys(keys_of.Key.from_seed(1), "sample", 0, indices=range(shape[0]))

    def run(n):
        """Per step: wall time, and the CPU time of this (the training) thread."""
        t, c = time.perf_counter(), time.thread_time()
        for _ in range(n):
            with rng.samples(keys):  # the demo's dropout draws from the samples' keys
                out = model(x)
            torch.nn.functional.cross_entropy(out, y).backward()
            opt.step()
            opt.zero_grad()
        return (time.perf_counter() - t) / n, (time.thread_time() - c) / n

    run(2)  # warm up
    sides = ("plain", "record", "record(values=False)", "record(ops=True)")
    wall, cpu = ({k: [] for k in sides} for _ in range(2))
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for side in sides:
                if side == "plain":
                    w, c = run(steps_per_round)
                else:
                    with dbg.record(os.path.join(tmp, f"{side}{r}"), ops="ops" in side,
                                    values="values=False" not in side):
                        w, c = run(steps_per_round)
                wall[side].append(w)
                cpu[side].append(c)
    base, base_cpu = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    return params, base, {k: (statistics.median(wall[k]) / base,
                              statistics.median(cpu[k]) / base_cpu) for k in sides}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    hvd.init()
    print(f"torch threads {torch.get_num_threads()}, {args.rounds} rounds, medians\n")
    hashing(args.rounds)
    print("\nStep time with recording over the step without it; in brackets, the same for the "
          "training thread's CPU time\n(what the recorder itself costs: the wall time of a small "
          "model's step also moves with the fusion\nengine's cycle, which a gradient enqueued a "
          "little later can miss).\n")
    print("| model | parameters | step (plain) | record | record(values=False) | "
          "record(ops=True) |")
    print("|---|---|---|---|---|---|")
    for name, make, n in (("demo MLP", mlp, 30), ("CNN", cnn, 3)):
        params, base, ratio = steps(make, args.rounds, n)
        cells = " | ".join(f"{ratio[k][0]:.2f}x ({ratio[k][1]:.2f}x)" for k in
                           ("record", "record(values=False)", "record(ops=True)"))
        print(f"| {name} | {params / 1e6:.2f}M | {base * 1e3:.1f} ms | {cells} |")

if __name__ == "__main__":
    main()
