"""The training trace (docs/design.md, "The debugger"): per rank and step, what a run computed,
as fingerprints (and, by default, the values) of the tensors where bits are made, in files that
`python3 -m detcoll.debug diff` aligns across runs and world sizes.

    with detcoll.debug.record("runs/a", ops=True):
        train()

or DETCOLL_DEBUG_RECORD=DIR (with DETCOLL_DEBUG_RECORD_OPS=1, DETCOLL_DEBUG_RECORD_EVERY=N) for a
script unchanged: detcoll.torch.init() starts the recorder and it closes at exit.

Files, per rank R: DIR/training.rank<R>.jsonl (a header line, one line per record, an end line)
and DIR/values.rank<R>.bin (the bytes of each recorded tensor once, by fingerprint). A record
names its step (optimizer steps so far), its scope and a key unique in that scope:

- micro scope (a micro-batch: from the call of a top-level module with parameters, under
  gradients, to the next one), aligned by the micro-batch's global index: the rank's share
  offset (the micro-batches of the ranks below it in the step) plus its index on the rank, or
  the index given to micro_batch(). Inputs of the top-level call ("input.K"), every aten op of
  forward, loss and backward ("op#N", with ops=True), each gradient leaf of DistributedOptimizer's
  invariant mode ("leaf:NAME#K").
- rank scope, aligned by rank: ops before the first micro-batch and in step() ("op@pre#N",
  "op@step#N"), the keys derived from detcoll.rng ("rng#N"), each gradient as it goes to the
  reduction ("grad:NAME"), as it comes back ("reduced:NAME"), each parameter and optimizer-state
  tensor after step() ("param:NAME", "state:NAME.KEY"). Replicated records (the same on every
  rank by design: reduced gradients, parameters, state, step() ops) compare between runs of
  different world sizes on the ranks both have.

Recording does not change the run's bits: it reads tensors (hashes, copies) and never writes
them, and the dispatch mode calls each op as it was called.
"""

import json
import os
import sys
import threading
import time

import torch

import detcoll
from detcoll import _detcoll
from detcoll.debug import fingerprint, hash_bytes, host_bytes

FORMAT = 1
_active = None  # the recorder in effect in this process, or None
_FLUSH_SECONDS = 1.0  # a crashed run leaves its records up to about this long before the crash
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DETCOLL_DIR = os.path.dirname(detcoll.__file__) + os.sep
# Environment variables that describe a run's bits (compared by diff) are DETCOLL_* and
# HOROVOD_*, but for these, which only say where to write what is observed.
_OBSERVERS = ("DETCOLL_DEBUG_RECORD", "DETCOLL_TRACE", "DETCOLL_TIMELINE", "DETCOLL_LOG",
              "HOROVOD_TIMELINE", "HOROVOD_LOG")


def active():
    return _active


def run_settings():
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("DETCOLL_", "HOROVOD_")) and not k.startswith(_OBSERVERS)}


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


class _Values:
    """The bytes of each recorded tensor, once per content, appended to one file."""

    def __init__(self, path):
        self.file = open(path, "wb")
        self.offsets = {}
        self.size = 0

    def put(self, fp, data):
        key = (fp, data.numel())
        at = self.offsets.get(key)
        if at is None:
            at = self.offsets[key] = self.size
            if data.numel():
                self.file.write(memoryview(data.numpy()))
            self.size += data.numel()
        return at

    def close(self):
        self.file.close()


class Recorder:
    def __init__(self, directory, ops=False, every=1, values=True):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise detcoll.InvalidArgumentError(
                f"record: every must be a positive int, got {every!r}")
        directory = os.fspath(directory)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise detcoll.InvalidArgumentError(
                f"record: cannot create the trace directory {directory!r}: {e.strerror}") from None
        initialized = _detcoll.rank() >= 0
        self.rank = _detcoll.rank() if initialized else 0
        self.size = _detcoll.size() if initialized else 1
        self.ops, self.every, self.keep_values = bool(ops), every, bool(values)
        base = os.path.join(directory, f"training.rank{self.rank}")
        try:
            self.file = open(base + ".jsonl", "w")
            self.values = _Values(os.path.join(directory, f"values.rank{self.rank}.bin")) \
                if self.keep_values else None
        except OSError as e:
            raise detcoll.InvalidArgumentError(
                f"record: cannot write the trace in {directory!r}: {e.strerror}") from None
        self.lock = threading.RLock()
        self.count = 0
        self.flushed = time.monotonic()
        self.step = 0
        self.micro = -1  # the micro-batch of this step on this rank, -1 before the first
        self.micro_index = None  # a global index given by micro_batch()
        self.counters = {}
        self.module_stack = []
        self.module_names = {}
        self.root_params = []  # of the last top-level module called
        self.in_step = False
        self.registered = []  # optimizers whose parameters were listed
        self.hooks = []
        self.derivations = []  # detcoll.rng keys derived in this step
        self.mode = None
        script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        header = {"detcoll_trace": FORMAT, "source": "training", "rank": self.rank,
                  "size": self.size, "script": os.path.basename(script),
                  "script_fingerprint": _file_fingerprint(script), "argv": sys.argv[1:],
                  "settings": run_settings(), "ops": self.ops, "every": every,
                  "values": self.keep_values, "torch": torch.__version__,
                  "mode": detcoll.get_mode()}
        self._write(header)

    # Writing.
    def _write(self, record):
        with self.lock:
            self.file.write(json.dumps(record, separators=(",", ":")) + "\n")
            now = time.monotonic()
            if now - self.flushed > _FLUSH_SECONDS:
                self.flushed = now
                self.file.flush()
                if self.values:
                    self.values.file.flush()

    def recording(self):
        return self.step % self.every == 0

    def tensor(self, t):
        """A tensor's description: fingerprint, dtype, shape and where its values are."""
        if not isinstance(t, torch.Tensor):
            return None
        info = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape)}
        if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
            info["fp"] = None
            info["layout"] = str(t.layout) if t.layout != torch.strided else t.device.type
            return info
        data = host_bytes(t)
        info["fp"] = f"{hash_bytes(data):016x}"
        if self.values is not None:
            with self.lock:
                info["at"] = self.values.put(info["fp"], data)
        return info

    def _scope(self):
        if self.micro >= 0 and not self.in_step:
            return {"scope": "micro", "micro": self.micro,
                    "micro_index": self.micro_index}
        return {"scope": "rank"}

    def _next(self, counter):
        n = self.counters.get(counter, 0)
        self.counters[counter] = n + 1
        return n

    def add(self, kind, key, scope=None, **fields):
        with self.lock:
            record = {"seq": self.count, "step": self.step, "kind": kind, "key": key}
            record.update(scope if scope is not None else self._scope())
            record.update(fields)
            self.count += 1
            self._write(record)

    # What the hooks report.
    def start_micro_batch(self, index=None):
        with self.lock:
            self.micro += 1
            self.micro_index = index
            self.counters = {k: v for k, v in self.counters.items() if not k.startswith("m:")}

    def inputs(self, args, kwargs):
        if not self.recording():
            return
        tensors = [("input.%d" % i, a) for i, a in enumerate(args)] + \
            [("input." + k, v) for k, v in sorted(kwargs.items())]
        for key, value in tensors:
            if isinstance(value, torch.Tensor):
                self.add("input", key, out=[self.tensor(value)])

    def op(self, name, module, site, phase, inputs, args, outputs):
        # Keyed by phase, module and op, counted apart: an op that runs in some micro-batches
        # only (autograd's accumulation into .grad after a rank's first micro-batch) leaves the
        # keys of the others in place.
        scope = {"scope": "rank"} if phase == "accumulate" else self._scope()
        base = f"op:{phase}:{module}:{name}"
        key = f"{base}#{self._next(('m:' if scope['scope'] == 'micro' else '') + base)}"
        self.add("op", key, scope, op=name, module=module, site=site, phase=phase,
                 replicated=phase == "step", args=args, **{"in": inputs}, out=outputs)

    def rng(self, parent, domain, path, key):
        if self.recording():
            with self.lock:
                self.derivations.append([str(domain), list(path), list(parent), list(key)])

    def _flush_rng(self):
        """The step's key derivations as one record (a record per key costs more than the
        step of a small model), its fingerprint that of their list."""
        if self.derivations:
            text = json.dumps(self.derivations, separators=(",", ":")).encode()
            self.add("rng", "rng", {"scope": "rank"}, count=len(self.derivations),
                     derivations=self.derivations, out=[{"fp": f"{fingerprint(text):016x}",
                                                         "dtype": "keys", "shape": []}])
            self.derivations = []

    def leaf(self, name, grad):
        if self.recording():
            scope = self._scope()
            k = self._next(f"m:leaf:{name}")
            self.add("leaf", f"leaf:{name}#{k}", scope, name=name, out=[self.tensor(grad)])

    def gradient(self, name, grad):
        if self.recording():
            self.add("grad", f"grad:{name}", {"scope": "rank"}, name=name,
                     out=[self.tensor(grad)])

    def reduced(self, named_grads, mode):
        if self.recording():
            for name, grad in named_grads:
                self.add("reduced", f"reduced:{name}", {"scope": "rank"}, name=name, mode=mode,
                         replicated=True, out=[self.tensor(grad)])

    def parameters(self, optimizer, names):
        """The model's parameter list once per optimizer (diff refuses traces of other models),
        then each step's parameters and state."""
        if id(optimizer) not in self.registered:
            self.registered.append(id(optimizer))
            listed = [[names(p), list(p.shape), _dtype_name(p.dtype)]
                      for group in optimizer.param_groups for p in group["params"]]
            self.add("model", "model#%d" % (len(self.registered) - 1), {"scope": "rank"},
                     replicated=True, params=listed)

    def stepped(self, optimizer, names, mode):
        with self.lock:
            self._flush_rng()
            if self.recording():
                self.parameters(optimizer, names)
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        name = names(p)
                        self.add("param", f"param:{name}", {"scope": "rank"}, name=name,
                                 replicated=True, out=[self.tensor(p)])
                        for k, v in sorted(optimizer.state.get(p, {}).items()):
                            if isinstance(v, torch.Tensor):
                                self.add("state", f"state:{name}.{k}", {"scope": "rank"},
                                         name=name, replicated=True, out=[self.tensor(v)])
                self.add("step", "step", {"scope": "rank"}, micro_batches=self.micro + 1,
                         mode=mode, replicated=True,
                         torch_rng=[self.tensor(torch.get_rng_state())])
            self.step += 1
            self.micro = -1
            self.micro_index = None
            self.counters = {}

    def close(self):
        with self.lock:
            if self.file.closed:
                return
            self._flush_rng()
            self._write({"end": True, "records": self.count, "steps": self.step})
            self.file.close()
            if self.values is not None:
                self.values.close()


def _file_fingerprint(path):
    try:
        with open(path, "rb") as f:
            return f"{fingerprint(f.read()):016x}"
    except OSError:
        return None
