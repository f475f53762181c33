"""A small CNN with SyncBatchNorm, trained under mpirun through detcoll.torch's
DistributedOptimizer; run by test_sync_bn_cnn.py at several world sizes.

    mpirun -np P python3 sync_bn_cnn_train.py --mode invariant [--no-sample-leaves]
        [--steps 4] [--report FILE]

Every step takes a global batch of 16 images (3x8x8, wide-range non-integer values, regenerated
from the step number on every rank); rank r trains on its contiguous share. The loss is the sum
of the per-sample cross-entropies divided by the global batch size, and the optimizer sums the
ranks' gradients (op=Sum), so the step's gradient is that of the global batch at every world
size. With sample leaves in invariant mode the weights after training must have the same bits
at every world size that divides the batch (README, "SyncBatchNorm and sample leaves").
Writes a JSON report: the SHA-256 of the weights and running statistics, the loss curve, and
every rank's hash (the replicas must agree).
"""

import argparse
import hashlib
import json
import zlib

import torch
import torch.nn.functional as F

import detcoll
import detcoll.torch as hvd
from detcoll.torch.sync_batch_norm import SyncBatchNorm

BATCH = 16
CLASSES = 4


def model():
    torch.manual_seed(11)  # the same initial weights on every rank and world size
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding=1), SyncBatchNorm(6), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 8, 3, padding=1), SyncBatchNorm(8), torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, CLASSES))


def batch(step):
    """The global batch of a step: images whose channels have offsets and scales 10^u, u in
    [-2, 2], per sample; labels in [0, CLASSES)."""
    g = torch.Generator().manual_seed(zlib.crc32(f"cnn/{step}".encode()))
    scale = torch.pow(10.0, torch.rand(BATCH, 3, 1, 1, generator=g) * 4 - 2)
    offset = torch.randn(BATCH, 3, 1, 1, generator=g)
    x = (torch.randn(BATCH, 3, 8, 8, generator=g) + offset) * scale
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return x, y


def share(t):
    n = BATCH // hvd.size()
    return t[hvd.rank() * n:(hvd.rank() + 1) * n]


def digest(net):
    h = hashlib.sha256()
    for t in list(net.parameters()) + list(net.buffers()):
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="invariant")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--no-sample-leaves", action="store_true")
    parser.add_argument("--report")
    args = parser.parse_args()

    torch.set_num_threads(1)
    hvd.init()
    detcoll.set_mode(args.mode)
    assert BATCH % hvd.size() == 0
    net = model()
    if not args.no_sample_leaves:
        net = hvd.sample_leaves(net)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=net.named_parameters(), op=hvd.Sum)
    curve = []
    for step in range(args.steps):
        x, y = batch(step)
        opt.zero_grad()
        losses = F.cross_entropy(net(share(x)), share(y), reduction="none")
        (losses.sum() / BATCH).backward()
        opt.step()
        # The step's loss from every sample's, gathered in sample order and summed in that
        # order: the curve too is the same at every world size.
        every = hvd.allgather(losses.detach(), name=f"cnn.loss.{step}")
        total = torch.zeros((), dtype=every.dtype)
        for v in every:
            total = total + v
        curve.append(float(total) / BATCH)
    mine = digest(net)
    replicas = hvd.allgather_object(mine)
    if hvd.rank() == 0 and args.report:
        with open(args.report, "w") as f:
            json.dump({"world_size": hvd.size(), "mode": args.mode,
                       "sample_leaves": not args.no_sample_leaves, "sha256": mine,
                       "replicas": replicas, "curve": curve}, f)


if __name__ == "__main__":
    main()
