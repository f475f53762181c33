"""The handles of detcoll.torch's asynchronous ops (mpi_ops.py, _exchanges.py).

An op is a generator of its exchanges: it enqueues a step's requests and yields them, is
resumed once they have completed, and returns the op's output. Allgather and alltoall take two
exchanges (the row counts or splits, then the data), and the second must be enqueued as soon as
the first completes, whatever the caller does meanwhile: if it waited for the caller's
synchronize(), two ranks that synchronize two such ops in opposite orders would each wait for
the other's second exchange (docs/design.md, "Asynchronous ops in Python"). So a handle with
exchanges still to enqueue is watched by one progress thread, which polls their requests and
enqueues the next step when they complete; a caller's synchronize() advances its own handle at
once, without waiting for that thread. A dropped handle stays watched until it completes, so the
other ranks are never left waiting for its exchanges."""

import contextlib
import threading
import time

import torch

import detcoll
from detcoll import _detcoll
from detcoll.torch._tensors import current_device, current_raw_stream, device_index

# The context of an op on CPU tensors, or on the stream and device current already (reusable).
_NO_CONTEXT = contextlib.nullcontext()


class _OpStream:
    """The stream an op on CUDA tensors runs every step on, and waits on: torch's current stream on
    the tensors' device when the op was called, whichever thread advances it (docs/design.md,
    "Device tensors in the engine"). Kept as its raw handle and device index, read without
    building a torch.cuda.Stream: a thread on that stream already (the caller's, as a rule) enters
    no stream context, which costs more than the request itself (docs/gpu-results.md)."""

    __slots__ = ("index", "raw", "_stream")

    def __init__(self, index):
        self.index = index
        self.raw = current_raw_stream(index)
        self._stream = None

    def is_current(self):
        """Whether it is this thread's current stream on its device."""
        return current_raw_stream(self.index) == self.raw

    def stream(self):
        """The torch.cuda.Stream, made the first time another thread or stream needs it."""
        if self._stream is None:
            self._stream = (torch.cuda.ExternalStream(self.raw, device=self.index) if self.raw
                            else torch.cuda.default_stream(self.index))
        return self._stream

    def context(self):
        """A context in which it is torch's current stream and its device the current device."""
        if self.is_current() and current_device() == self.index:
            return _NO_CONTEXT
        return torch.cuda.stream(self.stream())


def _stream_of(tensors):
    """The _OpStream of the first CUDA tensor's device, or None for CPU tensors."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            return _OpStream(device_index(t.device))
    return None


class _Names:
    """The ops in flight on this rank, by process set and name, as Horovod keeps them: a second
    op of a name in flight is refused at once on its rank. (The engine refuses a request whose
    name is in flight, but an op of two exchanges has finished its first while its second runs,
    so a duplicate's first exchange would pass and pair with the other ranks' next op.)"""

    _lock = threading.Lock()
    _in_flight = {}  # (process set, name) -> the op

    @classmethod
    def take(cls, place_id, names, op):
        keys = [(place_id, n) for n in names]
        with cls._lock:
            for key in keys:
                other = cls._in_flight.get(key)
                if other is not None and not other._completed():
                    where = f" in process set {key[0]}" if key[0] else ""
                    raise detcoll.InvalidArgumentError(
                        f"{key[1]!r} is already in flight{where} on rank {_detcoll.rank()}; names "
                        "must be unique among the operations in flight (as in Horovod)")
            for key in keys:
                cls._in_flight[key] = op
        return keys

    @classmethod
    def give_back(cls, keys, op):
        with cls._lock:
            for key in keys:
                if cls._in_flight.get(key) is op:
                    del cls._in_flight[key]


def _record_stream(output, stream):
    """t.record_stream(stream) for every CUDA tensor of an op's output (nested tuples, lists)."""
    if isinstance(output, torch.Tensor):
        if output.is_cuda:
            output.record_stream(stream)
    elif isinstance(output, (tuple, list)):
        for item in output:
            _record_stream(item, stream)


class _Op:
    """An asynchronous op's state: its generator of exchanges, the requests of its current step,
    its outcome. `exchanges` is the number of steps the generator yields; the progress thread
    watches the op until the last one is enqueued, or until it completes once dropped."""

    def __init__(self, steps, exchanges, names, place, stream=None):
        self._stream = stream  # CUDA ops: the caller's stream (_stream_of)
        self._steps = steps
        self._exchanges = exchanges
        self._enqueued = 0
        self._lock = threading.Lock()  # one thread advances the op at a time
        self._requests = []
        self._done = False
        self._output = None
        self._error = None
        self._dropped = False  # its handle is gone: nobody will synchronize it
        self._watching = False  # in the progress thread's list (under _Progress._cond)
        self._names = _Names.take(place.id if place is not None else 0, names, self)
        try:
            self._advance(first=True)
        except BaseException:
            _Names.give_back(self._names, self)
            raise

    def _finish(self, output=None, error=None):
        self._done, self._output, self._error, self._requests = True, output, error, []
        _Names.give_back(self._names, self)

    def _completed(self):
        """Done, or its last exchange has completed (as Horovod, which frees a name when its op
        completes, not when it is synchronized). Never waits."""
        if self._done:
            return True
        requests = self._requests
        return self._enqueued == self._exchanges and all(r.poll() for r in requests)

    def _watched(self):
        return not self._done and (self._dropped or self._enqueued < self._exchanges)

    def _on_stream(self):
        return self._stream.context() if self._stream is not None else _NO_CONTEXT

    def _advance(self, first=False):
        try:
            with self._on_stream():
                pending = next(self._steps) if first else self._steps.send(None)
        except StopIteration as stop:
            self._finish(output=stop.value)
            return
        except Exception as e:  # noqa: BLE001 (any failure of a step is the op's, e.g. memory)
            if first:
                raise
            self._finish(error=e)
            return
        # The requests first: _completed() reads both without the lock, and must never see the
        # last exchange counted beside the previous step's completed requests.
        self._requests = pending if isinstance(pending, list) else [pending]
        self._enqueued += 1

    def _wait_step(self):
        """Waits for the current step's requests and enqueues the next step. Lock held."""
        error = None
        with self._on_stream():
            for r in self._requests:
                try:
                    r.wait()
                except Exception as e:  # noqa: BLE001 (every request is waited for, then raised)
                    error = error or e
        if error is not None:
            self._finish(error=error)
            self._steps.close()
        else:
            self._advance()

    def _step_if_ready(self):
        """For the progress thread: advances the op if its step has completed and no other thread
        is advancing it. Never waits. True if it advanced."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._done or not all(r.poll() for r in self._requests):
                return False
            self._wait_step()  # completed: returns at once
        except Exception as e:  # noqa: BLE001 (the op's failure, for its synchronize())
            self._finish(error=e)
        finally:
            self._lock.release()
        return True

    def poll(self):
        # Never waits: while another thread advances the op (synchronize), it is not done yet.
        if not self._lock.acquire(blocking=False):
            return False
        try:
            while not self._done and all(r.poll() for r in self._requests):
                self._wait_step()  # completed: returns at once, and enqueues the next step
            return self._done
        finally:
            self._lock.release()

    def synchronize(self):
        with self._lock:
            while not self._done:
                self._wait_step()
        if self._stream is not None and not self._stream.is_current():
            # The op's results are ordered on its stream; the caller's is another, which then
            # waits for it, and the outputs' memory is not reused before it is done.
            current = torch.cuda.current_stream(self._stream.index)
            current.wait_stream(self._stream.stream())
            _record_stream(self._output, current)
        if self._error is not None:
            raise self._error
        return self._output


class _Handle:
    """What an asynchronous call returns: its op, watched by the progress thread while it has
    exchanges to enqueue. Dropping the handle leaves the op to that thread until it completes;
    the thread never holds a handle, so a handle is freed where the caller drops it."""

    def __init__(self, steps, exchanges=1, names=(), place=None, tensors=()):
        self._op = _Op(steps, exchanges, names, place, _stream_of(tensors))
        self._first_only = False  # the output is the first tensor of the op's tuple
        if self._op._watched():
            _Progress.watch(self._op)

    def poll(self):
        return self._op.poll()

    def synchronize(self):
        output = self._op.synchronize()
        return output[0] if self._first_only else output

    def __del__(self):
        # Dropped unwaited: its remaining steps still run (the other ranks may wait for them).
        try:
            op = self._op
            if not op._done:
                op._dropped = True
                _Progress.watch(op)
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


class _Progress:
    """The thread that enqueues watched ops' next exchanges as their steps complete, and finishes
    dropped ops. It polls with a backoff of 50 us to 1 ms while some op is watched, and rests at
    least four times as long as a pass over the watched ops took (so that with thousands of ops
    in flight it takes at most a fifth of a core from the training); it sleeps while none is
    watched. Errors of dropped ops are nobody's and are dropped with them."""

    _cond = threading.Condition()
    _watched = []
    _thread = None
    _SHORTEST, _LONGEST, _REST = 50e-6, 1e-3, 4.0

    @classmethod
    def watch(cls, op):
        with cls._cond:
            if op._watching:
                return
            op._watching = True
            cls._watched.append(op)
            if cls._thread is None:
                cls._thread = threading.Thread(target=cls._run, name="detcoll.torch.progress",
                                               daemon=True)
                cls._thread.start()
            cls._cond.notify()

    @classmethod
    def _run(cls):
        pause = cls._SHORTEST
        while True:
            with cls._cond:
                while not cls._watched:
                    cls._cond.wait()
                    pause = cls._SHORTEST
                watched = list(cls._watched)
            start = time.monotonic()
            progressed = False
            for op in watched:
                progressed |= op._step_if_ready()  # keeps the op's failures for its handle
            spent = time.monotonic() - start
            watched = op = None  # hold no op's tensors while resting
            with cls._cond:
                kept = []
                for o in cls._watched:
                    o._watching = o._watched()
                    if o._watching:
                        kept.append(o)
                cls._watched = kept
                o = kept = None
                if not cls._watched:
                    continue
            pause = cls._SHORTEST if progressed else min(2 * pause, cls._LONGEST)
            time.sleep(max(pause, cls._REST * spent))


def synchronize(handle):
    """Waits for an asynchronous op and returns its output (a tuple for grouped ops,
    (output, received_splits) for alltoall). Raises the op's error, on every rank."""
    if callable(handle) and not isinstance(handle, _Handle):
        return None  # Horovod's sparse_allreduce_async returns a callable
    if not isinstance(handle, _Handle):
        raise detcoll.InvalidArgumentError("synchronize: not a handle of detcoll.torch")
    return handle.synchronize()


def poll(handle):
    """True once the op has completed (never waits; may enqueue an op's next exchange)."""
    if not isinstance(handle, _Handle):
        raise detcoll.InvalidArgumentError("poll: not a handle of detcoll.torch")
    return handle.poll()


def _single(handle):
    """`handle`, whose output becomes the only tensor of its op's tuple."""
    handle._first_only = True
    return handle
