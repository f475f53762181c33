"""The online replica check (docs/design.md, "The debugger"): every rank's fingerprint of each
parameter (and optimizer-state tensor) in one small allgather, compared on every rank, so that
ranks whose weights parted raise the same error everywhere, naming the first tensor that
differs and which ranks hold which version. No copy of the weights travels."""

import itertools

import torch

import detcoll
from detcoll.debug import fingerprint

_calls = itertools.count()  # the same sequence on every rank that calls, for the names


def _signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def named_tensors(model, optimizer=None, names=None):
    """[(name, tensor)]: the model's parameters in named_parameters() order (or the items of a
    dict of tensors), then, with an optimizer, each parameter's state tensors as NAME.KEY."""
    if isinstance(model, torch.nn.Module):
        named = list(model.named_parameters())
    elif isinstance(model, dict):
        named = list(model.items())
    else:
        raise detcoll.InvalidArgumentError(
            f"check_replicas: expected a torch.nn.Module or a dict of tensors, got "
            f"{type(model).__name__}")
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise detcoll.InvalidArgumentError(
                f"check_replicas: {name!r} is a {type(t).__name__}, not a tensor")
    if optimizer is not None:
        of = names or {id(t): n for n, t in named}
        for group in optimizer.param_groups:
            for p in group["params"]:
                for key, value in sorted(optimizer.state.get(p, {}).items()):
                    if isinstance(value, torch.Tensor):
                        named.append((f"{of.get(id(p), 'parameter')}.{key}", value))
    return named


def _describe(named):
    """The list's own fingerprint: names, dtypes and shapes, so that ranks with other lists are
    told apart from ranks with other values."""
    text = "\n".join(f"{n}|{t.dtype}|{tuple(t.shape)}" for n, t in named).encode()
    return fingerprint(text)


def check_named(named, process_set=None, what="check_replicas"):
    import detcoll.torch as hvd

    hvd._require_init(what)
    for name, t in named:
        if t.device.type != "cpu":
            raise detcoll.InvalidArgumentError(
                f"{what}: {name!r} is on {t.device}; the replica check reads CPU tensors")
    mine = [_describe(named), len(named)] + [fingerprint(t) for _, t in named]
    block = torch.tensor([_signed(v) for v in mine], dtype=torch.int64)
    gathered = hvd.allgather(block, name=f"detcoll.check_replicas.{next(_calls)}",
                             process_set=process_set).tolist()
    set_ = process_set if process_set is not None else hvd.global_process_set
    ranks = set_.ranks if set_.ranks is not None else list(range(hvd.size()))
    blocks, at = [], 0
    for _ in ranks:
        count = gathered[at + 1]
        blocks.append(gathered[at:at + 2 + count])
        at += 2 + count
    if any(b[:2] != blocks[0][:2] for b in blocks):
        shown = "; ".join(f"rank {r}: {b[1]} tensors (list {b[0] & (2**64 - 1):016x})"
                          for r, b in zip(ranks, blocks))
        raise detcoll.MismatchError(
            f"{what}: the ranks hold different lists of tensors (names, dtypes or shapes): "
            f"{shown}")
    differing = [i for i in range(len(named)) if any(b[2 + i] != blocks[0][2 + i] for b in blocks)]
    if differing:
        i = differing[0]
        versions = {}
        for r, b in zip(ranks, blocks):
            versions.setdefault(b[2 + i] & (2**64 - 1), []).append(r)
        def holders(rs):
            return f"rank {rs[0]} holds" if len(rs) == 1 else \
                f"ranks {', '.join(map(str, rs))} hold"

        held = "; ".join(f"{holders(rs)} {fp:016x}" for fp, rs in
                         sorted(versions.items(), key=lambda kv: (-len(kv[1]), kv[1])))
        others = f" ({len(differing) - 1} more tensors differ after it)" if len(differing) > 1 \
            else ""
        raise detcoll.MismatchError(
            f"{what}: the replicas differ at {named[i][0]!r} (tensor {i + 1} of the "
            f"{len(named)} checked, the first that differs){others}: {held}")


def check_replicas(model, optimizer=None, process_set=None):
    """Raises detcoll.MismatchError on every rank of process_set (every rank by default) when
    the ranks' parameters (and, with an optimizer, its state tensors) are not bit-identical,
    naming the first tensor that differs and the ranks that hold each version. Collective: every
    rank calls it, with the same model structure."""
    check_named(named_tensors(model, optimizer), process_set)
