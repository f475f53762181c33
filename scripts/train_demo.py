#!/usr/bin/env python3
"""Reproducible data-parallel training with detcoll: an MLP with dropout on synthetic data.

    mpirun -np P python3 scripts/train_demo.py [--mode ordered|invariant|native]
        [--steps 300] [--micro-batches V] [--batch 16] [--seed 2026] [--report FILE]

Every global step takes V micro-batches of --batch samples; rank r computes micro-batches
r*k .. r*k+k-1 (k = V / P, one backward pass each) and DistributedOptimizer(op=Sum,
backward_passes_per_step=k) sums their gradients over the ranks. All randomness comes from
detcoll.rng keys of the global sample index: the data set, each sample's augmentation noise and
dropout masks, and the data order of every epoch. So a micro-batch's gradient does not depend on
which rank computes it, and in invariant mode (the exact sum of the V leaves) the final weights
are the same bits for every P that divides V. In ordered mode they are the same bits run after
run at a given P. The script prints the loss curve, the accuracy and a SHA-256 of the final
weights, and checks that every rank holds the same weights.
"""

import argparse
import hashlib
import json
import math
import sys
import time

import torch

import detcoll
import detcoll.torch as hvd
from detcoll.torch import rng

FEATURES, HIDDEN, CLASSES = 32, 64, 8
DATASET = 4096  # distinct samples; epochs reshuffle them
LEARNING_RATE = 0.05  # SGD with momentum 0.9, on the sum of the V micro-batch mean losses / V


def make_model(hidden=HIDDEN):
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(), rng.Dropout(0.1, layer=0),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), rng.Dropout(0.1, layer=1),
        torch.nn.Linear(hidden, CLASSES))


def init_weights(model, root):
    """Weights N(0, 1/fan_in) from a key per parameter, biases zero: the same on every rank."""
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            if p.dim() > 1:
                rng.normal_(p, root.derive("init", i), std=1.0 / math.sqrt(p.shape[1]))
            else:
                p.zero_()


class SyntheticData:
    """Sample i: label y[i] and features centroid[y[i]] + N(0, 1), element i of their streams;
    at step s a sample is augmented with 0.1 N(0, 1) noise from its key (s, i)."""

    def __init__(self, root):
        self.root = root
        centroids = rng.normal_(torch.empty(CLASSES, FEATURES), root.derive("centroids"), std=0.5)
        self.labels = rng.randint_(torch.empty(DATASET, dtype=torch.int64),
                                   root.derive("labels"), CLASSES)
        noise = rng.normal_(torch.empty(DATASET, FEATURES), root.derive("features"))
        self.features = centroids[self.labels] + noise

    def order(self, epoch):
        return rng.permutation(self.root.derive("data-order", epoch), DATASET)

    def batch(self, step, indices):
        """Inputs, labels and the samples' keys (for dropout) of a micro-batch."""
        keys = rng.sample_keys(self.root, "sample", step, indices=indices)
        augment = rng.normal_rows_(torch.empty(len(keys), FEATURES),
                                   [k.derive("augment") for k in keys], std=0.1)
        return self.features[indices] + augment, self.labels[indices], keys


class Schedule:
    """Which samples micro-batch m of a step holds: the next `batch` samples of the epochs'
    shuffled orders, micro-batch after micro-batch. It does not depend on the world size."""

    def __init__(self, data, micro_batches, batch):
        self.data, self.micro_batches, self.batch = data, micro_batches, batch
        self._order = (-1, None)  # (epoch, its order)

    def indices(self, step, m):
        start = (step * self.micro_batches + m) * self.batch
        parts = []
        for position in range(start, start + self.batch):
            epoch, i = divmod(position, DATASET)
            if self._order[0] != epoch:
                self._order = (epoch, self.data.order(epoch))
            parts.append(self._order[1][i])
        return torch.stack(parts)


def weights_sha256(model):
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


class Trainer:
    """One process's part of the training: V micro-batches per step over the ranks."""

    def __init__(self, micro_batches, batch, seed, lr=LEARNING_RATE, hidden=HIDDEN):
        self.size, self.rank = hvd.size(), hvd.rank()
        if micro_batches % self.size:
            raise detcoll.InvalidArgumentError(
                f"--micro-batches {micro_batches} is not a multiple of the world size "
                f"{self.size}: each rank takes micro_batches / size of them")
        self.micro_batches, self.batch = micro_batches, batch
        self.per_rank = micro_batches // self.size
        root = rng.Key.from_seed(seed)
        self.data = SyntheticData(root)
        self.model = make_model(hidden)
        init_weights(self.model, root)
        # The summed gradient of the V micro-batches; the learning rate is per sample-mean loss.
        optimizer = torch.optim.SGD(self.model.parameters(), lr=lr / micro_batches, momentum=0.9)
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        self.optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=self.model.named_parameters(), op=hvd.Sum,
            backward_passes_per_step=self.per_rank)
        self.schedule = Schedule(self.data, micro_batches, batch)

    def step(self, step):
        """One global step; returns this rank's micro-batch losses (float64)."""
        self.model.train()
        self.optimizer.zero_grad()
        losses = []
        for j in range(self.per_rank):
            m = self.rank * self.per_rank + j
            x, y, keys = self.data.batch(step, self.schedule.indices(step, m))
            with rng.samples(keys):
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
            loss.backward()
            losses.append(loss.detach().double())
        self.optimizer.step()
        return torch.stack(losses)

    def accuracy(self):
        self.model.eval()
        with torch.no_grad():
            predicted = self.model(self.data.features).argmax(dim=1)
        return (predicted == self.data.labels).double().mean().item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["native", "ordered", "invariant"],
                        help="determinism mode (default: DETCOLL_DETERMINISM, else ordered)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--micro-batches", type=int, default=None,
                        help="micro-batches per global step, a multiple of the world size "
                        "(default: 4 when it divides, else the world size)")
    parser.add_argument("--batch", type=int, default=16, help="samples per micro-batch")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--report", help="write a JSON report here (rank 0)")
    args = parser.parse_args(argv)

    hvd.init()
    torch.set_num_threads(1)  # one thread per rank; kernels' bits also depend on it
    if args.mode is not None:
        detcoll.set_mode(args.mode)
    rng.seed(args.seed)  # collective: every rank passes the same seed
    micro = args.micro_batches or (4 if 4 % hvd.size() == 0 else hvd.size())
    trainer = Trainer(micro, args.batch, args.seed)
    rank0 = hvd.rank() == 0
    if rank0:
        print(f"detcoll train_demo: mode {detcoll.get_mode()}, {hvd.size()} rank(s), {micro} "
              f"micro-batches of {args.batch} per step ({trainer.per_rank} per rank), "
              f"{args.steps} steps, seed {args.seed}")
        print(f"step   loss (mean over the step's samples, averaged over the last "
              f"{args.log_every} steps)")
    curve = []
    start = time.perf_counter()
    for step in range(args.steps):
        mine = trainer.step(step)
        # Rank r holds micro-batches r*k .. r*k+k-1: the gather lists all V in order, and the
        # sum below runs in that order at any world size.
        losses = hvd.allgather(mine, name="demo.loss").tolist()
        curve.append(math.fsum(losses) / micro)
        if rank0 and (step % args.log_every == 0 or step == args.steps - 1):
            window = curve[-args.log_every:] if step else curve
            print(f"{step:4d}   {math.fsum(window) / len(window):.6f}")
    elapsed = time.perf_counter() - start

    digest = weights_sha256(trainer.model)
    words = torch.frombuffer(bytearray(bytes.fromhex(digest)), dtype=torch.int32).reshape(1, -1)
    everyone = hvd.allgather(words, name="demo.sha256")
    hashes = [bytes(row.numpy().tobytes()).hex() for row in everyone]
    identical = len(set(hashes)) == 1
    accuracy = trainer.accuracy()
    if rank0:
        print(f"accuracy on the {DATASET} training samples: {accuracy:.4f}")
        print(f"time per step: {1e3 * elapsed / max(args.steps, 1):.2f} ms")
        print(f"final weights sha256: {digest}")
        print("replicas: " + (f"identical on {hvd.size()} rank(s)" if identical else
                              "DIFFER: " + ", ".join(hashes)))
        if args.report:
            with open(args.report, "w") as f:
                json.dump({"mode": detcoll.get_mode(), "world_size": hvd.size(),
                           "micro_batches": micro, "batch": args.batch, "steps": args.steps,
                           "seed": args.seed, "sha256": digest, "replica_sha256": hashes,
                           "loss": curve, "accuracy": accuracy}, f, indent=1)
    return 0 if identical else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except detcoll.Error as e:
        print(f"train_demo: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
