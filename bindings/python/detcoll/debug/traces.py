"""Reading the debugger's traces (docs/design.md, "The debugger"): a run's directory, its files
per rank and source (training.rank<R>.jsonl from the recorder, collectives.rank<R>.jsonl from
DETCOLL_TRACE), the recorded values (values.rank<R>.bin) and how two of them differ, and the log of
rng derivations. Files that are truncated, corrupt or incomplete raise TraceError, naming the
file and why; diff.py compares what this reads."""

import glob
import json
import os
import re
import struct

import numpy as np

FORMAT = 1


class TraceError(Exception):
    """A trace that cannot be read or compared; the message says why."""


class Trace:
    """One run's traces: per rank, the header and the records of each source."""

    def __init__(self, directory):
        self.directory = directory
        if not os.path.isdir(directory):
            raise TraceError(f"{directory}: " + ("not a directory" if os.path.exists(directory)
                                                 else "no such directory"))
        self.training = self._load(directory, "training")
        self.collectives = self._load(directory, "collectives")
        if not self.training and not self.collectives:
            raise TraceError(
                f"{directory}: no trace here (training.rank<R>.jsonl from detcoll.debug.record "
                "or DETCOLL_DEBUG_RECORD, collectives.rank<R>.jsonl from DETCOLL_TRACE)")
        first = (self.training or self.collectives)[0]["header"]
        self.size = first["size"]
        self.header = first
        self.values = {}

    @staticmethod
    def _load(directory, source):
        paths = glob.glob(os.path.join(directory, f"{source}.rank*.jsonl"))
        ranks = {}
        for path in paths:
            m = re.fullmatch(rf"{source}\.rank(\d+)\.jsonl", os.path.basename(path))
            if m:
                ranks[int(m.group(1))] = path
        if not ranks:
            return []
        loaded = [_read(ranks[r], source, r) for r in sorted(ranks)]
        size = loaded[0]["header"]["size"]
        missing = sorted(set(range(size)) - set(ranks))
        if missing or any(t["header"]["size"] != size for t in loaded):
            raise TraceError(
                f"{directory}: the {source} trace is incomplete: a run of {size} ranks, but files "
                f"for ranks {sorted(ranks)}" + (f" (missing {missing})" if missing else ""))
        return loaded

    def value(self, rank, info):
        """The recorded values of a tensor (its bytes, as uint8), or None."""
        if info is None or info.get("at") is None:
            return None
        path = os.path.join(self.directory, f"values.rank{rank}.bin")
        if path not in self.values:
            if not os.path.exists(path):
                raise TraceError(f"{path} is missing: the trace records values kept there")
            self.values[path] = np.memmap(path, dtype=np.uint8, mode="r") \
                if os.path.getsize(path) else np.zeros(0, np.uint8)
        data = self.values[path]
        n = _nbytes(info)
        if info["at"] + n > data.size:
            raise TraceError(f"{path} is truncated: a record's values lie past its end")
        return np.asarray(data[info["at"]:info["at"] + n])


def _read(path, source, rank):
    records, header, end = [], None, None
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.endswith("\n"):
            raise TraceError(f"{path} is truncated: line {number} is cut short (the run stopped "
                             "while writing it)")
        try:
            item = json.loads(line)
        except ValueError:
            raise TraceError(f"{path}: line {number} is not a trace record (the file is "
                             "corrupt)") from None
        if not isinstance(item, dict):
            raise TraceError(f"{path}: line {number} is not a trace record (the file is corrupt)")
        if number == 1:
            if item.get("detcoll_trace") != FORMAT or item.get("source") != source:
                raise TraceError(f"{path}: not a detcoll {source} trace of format {FORMAT}")
            if item.get("rank") != rank or not isinstance(item.get("size"), int):
                raise TraceError(f"{path}: its header says rank {item.get('rank')}, its name "
                                 f"rank {rank}")
            header = item
        elif end is not None:
            raise TraceError(f"{path}: line {number} follows the end record (the file is "
                             "corrupt)")
        elif item.get("end"):
            end = item
        else:
            if "seq" not in item or "kind" not in item:
                raise TraceError(f"{path}: line {number} is not a trace record (no seq or kind)")
            records.append(item)
    if header is None:
        raise TraceError(f"{path} is empty")
    if end is None:
        raise TraceError(f"{path} is truncated: it has no end record (the run stopped before "
                         "its recorder closed: a crash, a kill, or a run still going)")
    if end.get("records") != len(records):
        raise TraceError(f"{path}: its end record counts {end.get('records')} records, the file "
                         f"holds {len(records)} (the file is corrupt)")
    return {"header": header, "records": records}


# Bytes of an element (of each of a complex element's two parts), by torch's dtype name.
_ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "uint32": 4, "int32": 4,
             "uint64": 8, "int64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
             "float8_e5m2fnuz": 1, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
             "complex32": 2, "complex64": 4, "complex128": 8}
_FLOATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float16",
           "bfloat16", "float32", "float64", "complex32", "complex64", "complex128")


def _nbytes(info):
    count = int(np.prod(info["shape"])) if info["shape"] else 1
    unit = _ITEMSIZE.get(info["dtype"], 1)
    return count * unit * (2 if info["dtype"].startswith("complex") else 1)


def compare_values(a, b, info):
    """(elements that differ, the largest difference in ulps) of two tensors' bytes; ulps count
    representable values between them (integers: the difference)."""
    unit = _ITEMSIZE.get(info["dtype"], 1)
    ints = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[unit]
    ua, ub = a.view(ints), b.view(ints)
    if info["dtype"].startswith("complex"):  # a complex element is two floats
        differ = (ua != ub).reshape(-1, 2).any(axis=1)
    else:
        differ = ua != ub
    count = int(np.count_nonzero(differ))
    if not count:
        return 0, 0
    changed = np.flatnonzero(ua != ub)  # Python ints from here: 64-bit differences overflow
    ua, ub = ua[changed].astype(object), ub[changed].astype(object)
    bits = unit * 8

    def ordered(u):
        if info["dtype"] in _FLOATS:
            sign = u >> (bits - 1)
            return np.where(sign == 1, -(u & ((1 << (bits - 1)) - 1)), u)
        if info["dtype"].startswith("int"):
            return np.where(u >= 1 << (bits - 1), u - (1 << bits), u)
        return u

    return count, int(max(abs(x - y) for x, y in zip(ordered(ua), ordered(ub))))


def decode_derivations(log):
    """A step's derivation log as [domain, path, parent words, child words] lists."""
    out, at = [], 0
    while at < len(log):
        words = struct.unpack_from("=8I2I", log, at)
        at += 40
        domain = log[at:at + words[8]].decode("utf-8", "replace")
        at += words[8]
        path = list(struct.unpack_from(f"={words[9]}Q", log, at))
        at += 8 * words[9]
        out.append([domain, path, list(words[0:4]), list(words[4:8])])
    return out
