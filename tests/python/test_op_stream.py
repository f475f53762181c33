"""The stream rule of an op on CUDA tensors (_handles._OpStream; docs/design.md, "Device tensors
in the engine"), on any machine: torch's CUDA stream calls are replaced by a fake that keeps each
device's current stream for the thread, so that the rule's decisions are seen without a GPU.

- An op runs every step, and waits, on the stream current on its device when it was called.
- A thread already on that stream and device enters no stream context; another one enters the
  op's stream (a torch.cuda.Stream made once: ExternalStream, or the default stream for handle 0).
- synchronize() makes the caller's current stream wait for the op's, and records the outputs on
  it, only where the two differ."""

import contextlib

import pytest
import torch

from detcoll.torch import _handles, _tensors


class FakeStream:
    def __init__(self, raw, device, made_as):
        self.raw, self.device, self.made_as = raw, device, made_as
        self.waited_for = []

    def wait_stream(self, other):
        self.waited_for.append(other)


class FakeCuda:
    """This thread's current device and each device's current raw stream, as torch keeps them."""

    def __init__(self):
        self.device = 0
        self.current = {0: 0, 1: 0}
        self.made = []  # every torch.cuda.Stream the code under test built
        self.entered = []  # streams entered through torch.cuda.stream

    def make(self, raw, device, made_as):
        stream = FakeStream(raw, device, made_as)
        self.made.append(stream)
        return stream

    @contextlib.contextmanager
    def stream(self, s):
        self.entered.append(s)
        before = (self.device, self.current[s.device])
        self.device, self.current[s.device] = s.device, s.raw
        try:
            yield
        finally:
            self.device, self.current[s.device] = before[0], before[1]


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(_tensors, "_raw_stream", lambda index: fake.current[index])
    monkeypatch.setattr(_tensors, "_get_device", lambda: fake.device)
    monkeypatch.setattr(torch.cuda, "ExternalStream",
                        lambda raw, device=None: fake.make(raw, device, "external"),
                        raising=False)
    monkeypatch.setattr(torch.cuda, "default_stream",
                        lambda index: fake.make(0, index, "default"))
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda index: fake.make(fake.current[index], index, "current"))
    monkeypatch.setattr(torch.cuda, "stream", fake.stream)
    return fake


class FakeRequest:
    def __init__(self, fake, seen):
        self._fake, self._seen = fake, seen

    def poll(self):
        return True

    def wait(self):
        self._seen.append(("wait", self._fake.device, self._fake.current[self._fake.device]))


def two_step_op(fake, seen, output):
    """An op of two exchanges that records the device and stream each step ran on."""

    def steps():
        seen.append(("step 1", fake.device, fake.current[fake.device]))
        yield [FakeRequest(fake, seen)]
        seen.append(("step 2", fake.device, fake.current[fake.device]))
        yield [FakeRequest(fake, seen)]
        return output

    return steps()


def test_the_callers_thread_on_the_ops_stream_enters_nothing(cuda):
    cuda.device, cuda.current[1] = 1, 0x55
    op_stream = _handles._OpStream(1)
    assert (op_stream.index, op_stream.raw) == (1, 0x55)
    assert op_stream.is_current()
    assert op_stream.context() is _handles._NO_CONTEXT
    assert cuda.made == [] and cuda.entered == []


def test_another_stream_or_device_enters_the_ops_stream_made_once(cuda):
    cuda.device, cuda.current[1] = 1, 0x55
    op_stream = _handles._OpStream(1)
    cuda.current[1] = 0x66  # the caller moved to another stream on the op's device
    assert not op_stream.is_current()
    with op_stream.context():
        assert (cuda.device, cuda.current[1]) == (1, 0x55)
    assert (cuda.device, cuda.current[1]) == (1, 0x66)
    cuda.current[1], cuda.device = 0x55, 0  # the op's stream, but another current device
    assert op_stream.is_current()
    with op_stream.context():
        assert cuda.device == 1
    assert cuda.device == 0
    assert [(s.raw, s.device, s.made_as) for s in cuda.made] == [(0x55, 1, "external")]
    assert cuda.entered == [cuda.made[0], cuda.made[0]]


def test_the_legacy_default_stream_is_torchs_default_stream(cuda):
    cuda.device = 1
    op_stream = _handles._OpStream(1)  # device 1's current stream is its default, handle 0
    cuda.current[1] = 0x66
    with op_stream.context():
        assert cuda.current[1] == 0
    assert [(s.raw, s.device, s.made_as) for s in cuda.made] == [(0, 1, "default")]


def test_every_step_and_wait_runs_on_the_ops_stream_and_the_caller_waits_for_it(
        cuda, monkeypatch):
    recorded = []
    monkeypatch.setattr(_handles, "_record_stream",
                        lambda output, stream: recorded.append((output, stream)))
    seen, output = [], object()
    cuda.current[0] = 0x77  # called on a side stream of device 0
    op = _handles._Op(two_step_op(cuda, seen, output), 2, ["stream.op"], None,
                      _handles._OpStream(0))
    cuda.current[0] = 0  # the caller synchronizes on the default stream
    assert op.synchronize() is output
    assert seen == [("step 1", 0, 0x77), ("wait", 0, 0x77), ("step 2", 0, 0x77),
                    ("wait", 0, 0x77)]
    assert cuda.current[0] == 0  # given back after each step and wait
    caller = [s for s in cuda.made if s.made_as == "current"]
    assert len(caller) == 1 and caller[0].raw == 0
    assert [(s.raw, s.made_as) for s in caller[0].waited_for] == [(0x77, "external")]
    assert recorded == [(output, caller[0])]


def test_a_caller_still_on_the_ops_stream_neither_waits_nor_records(cuda, monkeypatch):
    recorded = []
    monkeypatch.setattr(_handles, "_record_stream",
                        lambda output, stream: recorded.append((output, stream)))
    seen, output = [], object()
    cuda.current[0] = 0x77
    op = _handles._Op(two_step_op(cuda, seen, output), 2, ["stream.same"], None,
                      _handles._OpStream(0))
    assert op.synchronize() is output
    assert [s[2] for s in seen] == [0x77] * 4
    assert cuda.made == [] and cuda.entered == [] and recorded == []


def test_cpu_ops_have_no_stream():
    assert _handles._stream_of([torch.zeros(2), None, 3]) is None
