"""The handles of detcoll.torch's asynchronous ops (mpi_ops.py): an op is a generator of its
requests, resumed as they complete; a dropped handle's remaining steps run on a background
thread, so that the other ranks are never left waiting for them."""

import queue
import threading

import detcoll


class _Handle:
    """An asynchronous op: a generator that enqueues its requests and yields them (a Request or
    a list), is resumed once they have completed, and returns the op's output."""

    def __init__(self, steps):
        self._steps = steps
        self._requests = []
        self._done = False
        self._output = None
        self._error = None
        self._advance(first=True)

    def _advance(self, first=False):
        try:
            pending = next(self._steps) if first else self._steps.send(None)
        except StopIteration as stop:
            self._done, self._output, self._requests = True, stop.value, []
            return
        except detcoll.Error as e:
            if first:
                raise
            self._done, self._error, self._requests = True, e, []
            return
        self._requests = pending if isinstance(pending, list) else [pending]

    def _wait_step(self):
        error = None
        for r in self._requests:
            try:
                r.wait()
            except detcoll.Error as e:
                error = error or e
        if error is not None:
            self._done, self._error, self._requests = True, error, []
            self._steps.close()
        else:
            self._advance()

    def poll(self):
        while not self._done and all(r.poll() for r in self._requests):
            self._wait_step()  # completed: returns at once, and enqueues the next step if any
        return self._done

    def synchronize(self):
        while not self._done:
            self._wait_step()
        if self._error is not None:
            raise self._error
        return self._output

    def __del__(self):
        # Dropped unwaited: its remaining steps still run (the other ranks may wait for them).
        try:
            if not self._done:
                _Drainer.take(self)
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


class _Drainer:
    """The thread that completes dropped handles' remaining steps, swallowing their errors."""

    _queue = None
    _lock = threading.Lock()

    @classmethod
    def take(cls, handle):
        state = _Handle.__new__(_Handle)  # the dropped handle's state, kept alive here
        state.__dict__.update(handle.__dict__)
        handle._done = True
        with cls._lock:
            if cls._queue is None:
                cls._queue = queue.Queue()
                threading.Thread(target=cls._run, name="detcoll.torch.drainer",
                                 daemon=True).start()
        cls._queue.put(state)

    @classmethod
    def _run(cls):
        while True:
            state = cls._queue.get()
            try:
                while not state._done:
                    state._wait_step()
            except Exception:  # noqa: BLE001 (nobody waits for a dropped handle's outcome)
                pass
            state._done = True  # its __del__ must not hand it back
            del state


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
    """A handle whose output is the only tensor of `handle`'s."""
    def one():
        outputs = yield from _relay(handle)
        return outputs[0]
    return _Handle(one())


def _relay(handle):
    """Yields a handle's remaining requests and returns its output."""
    while not handle._done:
        yield handle._requests  # the caller waits for them
        handle._advance()
    if handle._error is not None:
        raise handle._error
    return handle._output
