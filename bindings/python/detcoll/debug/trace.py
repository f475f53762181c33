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

import base64
import json
import os
import re
import sys
import threading
import time

import torch

import detcoll
from detcoll import _detcoll
from detcoll.debug import OBSERVERS, fingerprint, host_bytes

FORMAT = 1
_active = None  # the recorder in effect in this process, or None
_FLUSH_SECONDS = 1.0  # a crashed run leaves its records up to about this long before the crash
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DETCOLL_DIR = os.path.dirname(detcoll.__file__) + os.sep


def active():
    return _active


def run_settings():
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("DETCOLL_", "HOROVOD_")) and not k.startswith(OBSERVERS)}


# Variables recorded in the header as the run's environment: diff reports those that differ
# between two runs (they are often why runs part) without refusing to compare them.
ENVIRONMENT = ("PYTHONHASHSEED", "OMP_", "MKL_", "OPENBLAS_", "CUBLAS_", "CUDA_", "NCCL_",
               "ATEN_", "TORCH_", "OMPI_MCA_", "TF_")


def run_environment():
    found = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENVIRONMENT)}
    found["torch threads"] = str(torch.get_num_threads())
    return found


_DTYPE_NAMES = {}
_encode = json.JSONEncoder(separators=(",", ":")).encode
_quote = json.encoder.encode_basestring_ascii  # a str as a JSON string
_RANK = '"scope":"rank"'


def _dtype_name(dtype):
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


class Recorder:
    def __init__(self, directory, ops=False, every=1, values=True):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise detcoll.InvalidArgumentError(
                f"record: every must be a positive int, got {every!r}")
        for name, flag in (("ops", ops), ("values", values)):
            if not isinstance(flag, bool):
                raise detcoll.InvalidArgumentError(
                    f"record: {name} must be True or False, got {flag!r}")
        directory = os.fspath(directory)
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise detcoll.InvalidArgumentError(
                f"record: the trace directory {directory!r} exists and is not a directory")
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
            # Fingerprints, and with values the bytes of each content once (module_debug.cc).
            self.store = _detcoll.ValueStore(
                os.path.join(directory, f"values.rank{self.rank}.bin") if self.keep_values
                else os.devnull)
        except OSError as e:
            raise detcoll.InvalidArgumentError(
                f"record: cannot write the trace in {directory!r}: {e.strerror}") from None
        if self.rank == 0:
            _remove_stale(directory, self.size)
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
        self.mode = None
        script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        header = {"detcoll_trace": FORMAT, "source": "training", "rank": self.rank,
                  "size": self.size, "script": os.path.basename(script),
                  "script_fingerprint": _file_fingerprint(script), "argv": sys.argv[1:],
                  "settings": run_settings(), "ops": self.ops, "every": every,
                  "values": self.keep_values, "torch": torch.__version__,
                  "environment": run_environment(),
                  "mode": detcoll.get_mode()}
        self._write(header)

    # Writing. Records are assembled as text: a small model's step makes about 30 of them, and
    # a generic encoder's cost per record would be a visible share of the step.
    def _write(self, record):
        self._line(_encode(record) + "\n")

    def _line(self, text):
        with self.lock:
            self.file.write(text)
            now = time.monotonic()
            if now - self.flushed > _FLUSH_SECONDS:
                self.flushed = now
                self.file.flush()
                self.store.flush()

    def recording(self):
        return self.step % self.every == 0

    def tensor(self, t, describe_only=False):
        """A tensor's description as JSON text: dtype, shape, fingerprint ("fp") and where its
        values are in the values file ("at", with values kept); "fp" null for tensors not in host
        memory and, with describe_only, for memory not to be read."""
        if not isinstance(t, torch.Tensor):
            return "null"
        head = f'{{"dtype":"{_dtype_name(t.dtype)}","shape":{list(t.shape)}'
        if describe_only:
            return f'{head},"fp":null}}'
        if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
            where = str(t.layout) if t.layout != torch.strided else t.device.type
            return f'{head},"fp":null,"layout":{_quote(where)}}}'
        if t.is_contiguous() and not t.is_complex() and not t.is_neg():
            data, size = t, t.numel() * t.element_size()
        else:  # its bytes in row-major order (conjugate and negative views resolved)
            data = host_bytes(t)
            size = data.numel()
        fp, at = self.store.put(data.data_ptr(), size, self.keep_values)
        return f'{head},"fp":"{fp:016x}","at":{at}}}' if at >= 0 else f'{head},"fp":"{fp:016x}"}}'

    def _scope(self):
        if self.micro >= 0 and not self.in_step:
            index = "null" if self.micro_index is None else int(self.micro_index)
            return f'"scope":"micro","micro":{self.micro},"micro_index":{index}'
        return _RANK

    def _next(self, counter):
        n = self.counters.get(counter, 0)
        self.counters[counter] = n + 1
        return n

    def add(self, kind, key, scope=None, out=(), inputs=None, text="", **fields):
        """One record: `scope` and the tensor descriptions in `out` and `inputs` as JSON text
        (_scope(), tensor()), `text` more fields as JSON text (",\"name\":...") and the other
        fields as values. Returns its seq."""
        if fields:
            text += "," + _encode(fields)[1:-1]
        ins = ',"in":[' + ",".join(inputs) + "]" if inputs is not None else ""
        with self.lock:
            seq = self.count
            self._line(f'{{"seq":{seq},"step":{self.step},"kind":"{kind}",'
                       f'"key":{_quote(key)},{scope if scope is not None else self._scope()}'
                       f'{text}{ins},"out":[{",".join(out)}]}}\n')
            self.count += 1
        return seq

    def _named(self, kind, name, t, text=""):
        """The record of a tensor of the rank scope keyed by kind and name: gradients, reduced
        gradients, parameters (the hot path: a few per parameter and step). Names are shown as
        str (DistributedOptimizer takes any)."""
        name = str(name)
        self.add(kind, f"{kind}:{name}", _RANK, [self.tensor(t)], None,
                 f',"name":{_quote(name)}{text}')

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

    def op(self, name, module, site, phase, inputs, args, outputs, unwritten=False):
        # Keyed by phase, module and op, counted apart: an op that runs in some micro-batches
        # only (autograd's accumulation into .grad after a rank's first micro-batch) leaves the
        # keys of the others in place.
        scope = _RANK if phase == "accumulate" else self._scope()
        base = f"op:{phase}:{module}:{name}"
        key = f"{base}#{self._next(('m:' if scope is not _RANK else '') + base)}"
        return self.add("op", key, scope, op=name, module=module, site=site, phase=phase,
                        replicated=phase == "step", args=args, inputs=inputs, out=outputs,
                        text=',"unwritten":true' if unwritten else "")

    def rng_log(self):
        """Turns the log of detcoll.rng derivations (module_debug.cc) on for a recorded step."""
        _detcoll.rng_log(self.recording())

    def _flush_rng(self):
        """The step's key derivations as one record: their log (parent, child, domain, path of
        each; traces.decode_derivations reads it), base64 in the record, its fingerprint that of the
        log."""
        count, log = _detcoll.rng_log_take()
        if count:
            self.add("rng", "rng", _RANK, count=count, log=base64.b64encode(log).decode(),
                     out=[f'{{"fp":"{fingerprint(log):016x}","dtype":"keys","shape":[]}}'])

    def leaf(self, name, grad):
        if self.recording():
            name = str(name)
            scope = self._scope()
            k = self._next(f"m:leaf:{name}")
            self.add("leaf", f"leaf:{name}#{k}", scope, name=name, out=[self.tensor(grad)])

    def gradient(self, name, grad):
        if self.recording():
            self._named("grad", name, grad)

    def reduced(self, named_grads, mode):
        if self.recording():
            text = f',"mode":{_quote(mode)},"replicated":true'
            for name, grad in named_grads:
                self._named("reduced", name, grad, text)

    def parameters(self, optimizer, names):
        """The model's parameter list once per optimizer (diff refuses traces of other models),
        then each step's parameters and state."""
        if id(optimizer) not in self.registered:
            self.registered.append(id(optimizer))
            listed = [[names(p), list(p.shape), _dtype_name(p.dtype)]
                      for group in optimizer.param_groups for p in group["params"]]
            self.add("model", "model#%d" % (len(self.registered) - 1), _RANK,
                     replicated=True, params=listed)

    def stepped(self, optimizer, names, mode):
        with self.lock:
            self._flush_rng()
            if self.recording():
                self.parameters(optimizer, names)
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        name = names(p)
                        self._named("param", name, p, ',"replicated":true')
                        for k, v in sorted(optimizer.state.get(p, {}).items()):
                            if isinstance(v, torch.Tensor):
                                self.add("state", f"state:{name}.{k}", _RANK,
                                         [self.tensor(v)], None,
                                         f',"name":{_quote(str(name))},"replicated":true')
                self.add("step", "step", _RANK, micro_batches=self.micro + 1, mode=mode,
                         replicated=True, out=[self.tensor(torch.get_rng_state())])
            self.step += 1
            self.rng_log()
            self.micro = -1
            self.micro_index = None
            self.counters = {}

    def close(self):
        with self.lock:
            if self.file.closed:
                return
            self._flush_rng()
            _detcoll.rng_log(False)
            self._write({"end": True, "records": self.count, "steps": self.step})
            self.file.close()
            self.store.close()


def _remove_stale(directory, size):
    """Removes the files of ranks this run does not have, left by an earlier run of more ranks
    in the same directory (diff would take them for this run's)."""
    for name in os.listdir(directory):
        m = re.fullmatch(r"(?:training|values)\.rank(\d+)\.(?:jsonl|bin)", name)
        if m and int(m.group(1)) >= size:
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass


def _file_fingerprint(path):
    try:
        with open(path, "rb") as f:
            return f"{fingerprint(f.read()):016x}"
    except OSError:
        return None
