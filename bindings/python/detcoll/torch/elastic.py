"""detcoll.torch.elastic: Horovod's elastic API (horovod.torch.elastic) for jobs under mpirun.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for batch in loader:
                ...
                state.commit()
            state.sampler.set_epoch(state.epoch + 1)

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0)
    train(state)

What holds: TorchState and ObjectState keep the model, optimizer, LR scheduler, ElasticSampler
and plain attributes; commit() saves them, restore() goes back to the last commit, sync()
makes every rank root's (rank 0's) through broadcasts; run() syncs the state, then calls the
function. ElasticSampler partitions the unprocessed indices of an epoch over the ranks in a
fixed order (seed + epoch), so a resumed epoch sees the same samples as Horovod's would.

What does not: under mpirun the world is fixed. Hosts are never added, so check_host_updates()
never interrupts; and a rank that fails or stalls ends the job (README, "When a rank stalls,
stops or dies"), so the surviving ranks cannot re-form a world and go on as Horovod's elastic
driver does. run() then restores the last committed state and raises the failure, saying so;
save a checkpoint there and restart the job from it. A rank that dies makes mpirun end the job
before any of this runs.
"""

import copy
import math
import random

import torch

import detcoll

__all__ = ["ElasticSampler", "ObjectState", "TorchState", "run"]


def _hvd():
    import detcoll.torch as hvd  # late: detcoll.torch imports this module
    return hvd


class ObjectState:
    """Plain attributes (picklable) that commit(), restore() and sync() keep in step."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._bcast_object = bcast_object or (lambda obj: _hvd().broadcast_object(obj))
        self._get_rank = get_rank or (lambda: _hvd().rank())
        self._reset_callbacks = []
        self._saved_state = dict(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state; then checks for host updates (never any under mpirun)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Horovod raises HostsUpdatedInterrupt here when its driver added or removed hosts;
        mpirun's world never changes, so this returns."""

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attributes()

    def sync(self):
        """Rank 0's saved attributes on every rank (the values of its last save)."""
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attributes()

    def _set_attributes(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


class _Handler:
    def __init__(self, value, save, restore, sync):
        self.value, self._save, self._restore, self._sync = value, save, restore, sync
        self.save()

    def save(self):
        self._saved = self._save(self.value)

    def restore(self):
        self._restore(self.value, copy.deepcopy(self._saved))

    def sync(self):
        self._sync(self.value)

    def set_value(self, value):
        self.value = value
        self.save()


def _handler(value):
    hvd = _hvd()
    state_dict = lambda v: copy.deepcopy(v.state_dict())  # noqa: E731
    load = lambda v, s: v.load_state_dict(s)  # noqa: E731
    if isinstance(value, torch.nn.Module):
        return _Handler(value, state_dict, load,
                        lambda v: hvd.broadcast_parameters(v.state_dict(), root_rank=0))
    if isinstance(value, torch.optim.Optimizer):
        return _Handler(value, state_dict, load,
                        lambda v: hvd.broadcast_optimizer_state(v, root_rank=0))
    if isinstance(value, torch.optim.lr_scheduler._LRScheduler):
        return _Handler(value, state_dict, load,
                        lambda v: v.load_state_dict(hvd.broadcast_object(v.state_dict())))
    if isinstance(value, ElasticSampler):
        return _Handler(value, state_dict, load,
                        lambda v: v.load_state_dict(hvd.broadcast_object(v.state_dict())))
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training: a model, an optimizer, LR schedulers and ElasticSamplers
    (kept through their state_dict) and plain attributes, given as keyword arguments."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: each epoch's indices in a fixed order (shuffled by
    random.Random(seed + epoch) when shuffle), less the processed_num already trained on,
    padded to a multiple of the world size and dealt out to the ranks round-robin. Call
    record_batch(batch_idx, batch_size) after each batch and set_epoch(epoch + 1) at the end of
    an epoch."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        hvd = _hvd()
        self.num_replicas, self.rank = hvd.size(), hvd.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


# Failures of the job, as Horovod's HorovodInternalError: not a caller's bad argument or a
# mismatch between ranks, which pass through run() unchanged.
_JOB_FAILURES = (detcoll.TimeoutError, detcoll.BackendError, detcoll.NotInitializedError,
                 detcoll.InternalError)


def run(func):
    """Horovod's elastic.run decorator: syncs the state from rank 0, then calls
    func(state, *args, **kwargs). A failure of the job (a stall, a silent rank, another rank's
    shutdown) restores the last committed state and raises, since mpirun's world cannot be
    re-formed (see the module's documentation); other errors pass through unchanged."""

    def wrapper(state, *args, **kwargs):
        state.sync()
        try:
            return func(state, *args, **kwargs)
        except _JOB_FAILURES as e:
            state.restore()
            raise type(e)(
                f"{e} (detcoll.torch.elastic.run: the state was restored to its last commit(); "
                "under mpirun the job cannot go on with fewer ranks, so save a checkpoint "
                "and restart it)") from e

    return wrapper
