"""python3 -m detcoll.debug diff RUN_A RUN_B (docs/design.md, "The debugger"): aligns two runs'
traces (trace.py's training records; DETCOLL_TRACE's collective records) by step, micro-batch and
key rather than by rank, and names where the runs part:

- the root cause: the first record, in the run's order, whose output differs while its inputs
  matched (an op whose inputs are the same tensors, a reduction whose inputs are the same
  gradients, or a source: a micro-batch's data, a random key), with its place (step,
  micro-batch or rank, module path, call site) and, where the values were kept, how many
  elements differ and the largest difference in ulps;
- the first differing record of each kind; then a one-line verdict.

The order: step by step; in a step, the rank-scope records made before the micro-batches, then
the micro-batches by global index (each in its own order), then the rank-scope records after
them (gradients to reduce, reductions, the step's ops, parameters, state). Exit status: 0 when
the runs agree, 1 when they differ, 2 when the traces cannot be compared (the reason printed).
"""

import glob
import json
import os
import re
import sys

import numpy as np

FORMAT = 1
_AFTER = {"grad": 0, "reduced": 1, "op": 2, "param": 3, "state": 4, "step": 5, "model": 6}
_SOURCES = ("input", "rng", "step")  # records made from outside the run's computation


class TraceError(Exception):
    """A trace that cannot be read or compared; the message says why."""


class Trace:
    """One run's traces: per rank, the header and the records of each source."""

    def __init__(self, directory):
        self.directory = directory
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
                return None
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


_ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "float16": 2, "bfloat16": 2,
             "int32": 4, "float32": 4, "int64": 8, "float64": 8, "complex64": 4,
             "complex128": 8}
_FLOATS = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


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


class _Aligned:
    """The records of both runs by key, with their place in the order."""

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.same_size = a.size == b.size
        self.common_ranks = min(a.size, b.size)

    @staticmethod
    def index(trace):
        """{key: (order, rank, record)} of the training records, keys independent of rank where
        the record's scope is a micro-batch."""
        shares = {}  # (step, rank) -> micro-batches
        for rank, t in enumerate(trace.training):
            for r in t["records"]:
                if r.get("scope") == "micro":
                    k = (r["step"], rank)
                    shares[k] = max(shares.get(k, 0), r["micro"] + 1)
                elif r["kind"] == "step":
                    shares[(r["step"], rank)] = max(shares.get((r["step"], rank), 0),
                                                    r["micro_batches"])
        out = {}
        for rank, t in enumerate(trace.training):
            seen_micro = set()
            for r in t["records"]:
                step = r["step"]
                if r.get("scope") == "micro":
                    g = r.get("micro_index")
                    if g is None:
                        g = sum(shares.get((step, q), 0) for q in range(rank)) + r["micro"]
                    seen_micro.add(step)
                    key = ("m", step, g, r["key"])
                    order = (step, 1, g, r["seq"], rank)
                else:
                    key = ("r", step, rank, r["key"])
                    after = step in seen_micro or r["kind"] in ("reduced", "param", "state", "step")
                    band = 2 if after and r["kind"] != "rng" else 0
                    sub = _AFTER.get(r["kind"], 2) if band == 2 else 0
                    order = (step, band, sub, r["seq"], rank)
                r["_rank"], r["_global"] = rank, key
                out[key] = (order, rank, r)
        return out


def _outputs(record):
    if record["kind"] == "step":
        return [o.get("fp") for o in record.get("torch_rng") or []]
    return [None if o is None else o.get("fp") for o in record.get("out", [])]


def _inputs(record):
    return ([None if i is None else i.get("fp") for i in record.get("in", [])],
            record.get("args"), record.get("op"))


def _where(record):
    parts = [f"step {record['step']}"]
    if record.get("scope") == "micro":
        parts.append(f"micro-batch {record['_global'][2]} (rank {record['_rank']})")
    else:
        parts.append(f"rank {record['_rank']}")
    return ", ".join(parts)


def _what(record):
    kind = record["kind"]
    if kind == "op":
        text = f"op {record['op']} ({record['key']}, {record['phase']})"
        if record.get("module"):
            text += f" in module {record['module']!r}"
        if record.get("site"):
            text += f" at {record['site']}"
        return text
    if kind == "rng":
        return f"the {record['count']} detcoll.rng keys derived in the step"
    names = {"input": "micro-batch input", "leaf": "gradient leaf", "grad": "gradient to reduce",
             "reduced": "reduced gradient", "param": "parameter after step()",
             "state": "optimizer state after step()", "step": "torch's default generator state"}
    return f"{names.get(kind, kind)} {record.get('name', record['key'])!r}".rstrip()


def _detail(a_trace, b_trace, ra, rb):
    """How the outputs differ: elements and ulps where the values were kept."""
    out = []
    for oa, ob in zip(ra.get("out", []), rb.get("out", [])):
        if oa is None or ob is None or oa.get("fp") == ob.get("fp"):
            continue
        if ra["kind"] == "rng":
            first = next((i for i, (x, y) in enumerate(zip(ra["derivations"], rb["derivations"]))
                          if x != y), min(ra["count"], rb["count"]))
            shown = ra["derivations"][first] if first < ra["count"] else None
            out.append({"elements": None, "note": f"derivation {first} differs"
                        + (f" ({shown[0]!r}, path {shown[1]})" if shown else "")})
            continue
        if oa["dtype"] != ob["dtype"] or oa["shape"] != ob["shape"]:
            out.append({"elements": None, "note": f"{oa['dtype']}{oa['shape']} vs "
                        f"{ob['dtype']}{ob['shape']}"})
            continue
        va, vb = a_trace.value(ra["_rank"], oa), b_trace.value(rb["_rank"], ob)
        total = int(np.prod(oa["shape"])) if oa["shape"] else 1
        if va is None or vb is None:
            out.append({"elements": None, "total": total, "note": "values not recorded"})
            continue
        count, ulps = compare_values(va, vb, oa)
        out.append({"elements": count, "total": total, "ulps": ulps})
    return out


def _check_comparable(a, b):
    """The reason two runs' traces cannot be compared, or None."""
    ha, hb = a.header, b.header
    if bool(a.training) != bool(b.training):
        return "one run has a training trace and the other has none"
    if a.training:
        for field, what in (("script", "script"), ("script_fingerprint", "script's contents"),
                            ("every", "recording interval (every)")):
            if ha.get(field) != hb.get(field):
                return f"the runs differ in their {what}: {ha.get(field)!r} vs {hb.get(field)!r}"
    ma, mb = _mode(a), _mode(b)
    if ma != mb:
        return f"the runs differ in their determinism mode: {ma} vs {mb}"
    sa, sb = ha.get("settings", {}), hb.get("settings", {})
    for name in sorted(set(sa) | set(sb)):
        if sa.get(name) != sb.get(name):
            return (f"the runs differ in their settings: {name} is {sa.get(name)!r} in A and "
                    f"{sb.get(name)!r} in B")
    models = [[r["params"] for r in t["records"] if r["kind"] == "model"]
              for t in (a.training[:1] + b.training[:1])]
    if len(models) == 2 and models[0] != models[1]:
        return "the runs train different models (their parameter lists differ)"
    return None


def _mode(trace):
    for t in trace.training:
        for r in t["records"]:
            if r["kind"] == "step":
                return r["mode"]
    return trace.header.get("mode")


def compare(dir_a, dir_b):
    """The comparison as a dict (see main for its fields). Raises TraceError."""
    a, b = Trace(dir_a), Trace(dir_b)
    reason = _check_comparable(a, b)
    if reason:
        raise TraceError(f"cannot compare {dir_a} and {dir_b}: {reason}")
    ia, ib = _Aligned.index(a), _Aligned.index(b)
    same_size = a.size == b.size
    invariant = _mode(a) == "invariant"

    def comparable(key, record):
        if key[0] == "m" or same_size:
            return True
        return bool(record.get("replicated")) and key[2] < min(a.size, b.size)

    pairs = []
    for key, (order, _, ra) in ia.items():
        hit = ib.get(key)
        if hit is not None and comparable(key, ra):
            pairs.append((order, ra, hit[2]))
    pairs.sort(key=lambda p: p[0])
    only_a = sum(1 for k, (_, _, r) in ia.items() if k not in ib and comparable(k, r))
    only_b = sum(1 for k, (_, _, r) in ib.items() if k not in ia and comparable(k, r))

    # Inputs of a reduction: every rank's gradient (same world size) or every micro-batch's
    # leaves (invariant mode), as aligned records.
    def reduction_inputs(index, record):
        step, name = record["step"], record["name"]
        if invariant:
            return sorted((k, r["out"][0]["fp"]) for k, (_, _, r) in index.items()
                          if r["kind"] == "leaf" and r["step"] == step and r["name"] == name)
        return sorted((k, r["out"][0]["fp"]) for k, (_, _, r) in index.items()
                      if r["kind"] == "grad" and r["step"] == step and r["name"] == name)

    def inputs_match(ra, rb, earlier_differs):
        kind = ra["kind"]
        if kind in _SOURCES:
            return True
        if kind == "op":
            return ra.get("op") == rb.get("op") and _inputs(ra) == _inputs(rb)
        if kind == "reduced" and (same_size or invariant):
            return reduction_inputs(ia, ra) == reduction_inputs(ib, rb)
        return not earlier_differs  # its inputs are all the records before it

    differing, root, firsts = 0, None, {}
    for order, ra, rb in pairs:
        if _outputs(ra) == _outputs(rb) and (ra["kind"] != "op" or ra.get("op") == rb.get("op")):
            continue
        if root is None and inputs_match(ra, rb, differing > 0):
            root = (ra, rb)
        differing += 1
        firsts.setdefault(ra["kind"], (ra, rb))

    collectives = _compare_collectives(a, b) if a.collectives and b.collectives else None

    def shown(pair):
        ra, rb = pair
        item = {"kind": ra["kind"], "key": ra["key"], "step": ra["step"], "where": _where(ra),
                "what": _what(ra), "rank": ra["_rank"], "scope": ra.get("scope"),
                "micro_batch": ra["_global"][2] if ra.get("scope") == "micro" else None,
                "op": ra.get("op"), "module": ra.get("module"), "site": ra.get("site"),
                "name": ra.get("name"), "outputs": _detail(a, b, ra, rb)}
        if ra.get("op") != rb.get("op"):
            item["b_op"] = rb.get("op")
        return item

    result = {"run_a": dir_a, "run_b": dir_b, "size_a": a.size, "size_b": b.size,
              "argv_a": a.header.get("argv"), "argv_b": b.header.get("argv"),
              "mode": _mode(a), "compared": len(pairs), "differ": differing,
              "only_a": only_a, "only_b": only_b,
              "root_cause": shown(root) if root else None,
              "first_of_each_kind": {k: shown(p) for k, p in firsts.items()},
              "collectives": collectives}
    if collectives and collectives.get("root_cause") and result["root_cause"] is None and \
            not pairs:
        result["differ"] = collectives["differ"]
    return result


def _compare_collectives(a, b):
    """The collective traces, aligned by rank and sequence number (same world size only)."""
    if a.size != b.size:
        return {"compared": 0, "differ": 0, "note": "not compared across world sizes",
                "root_cause": None}
    compared = differ = 0
    root = first = None
    for rank in range(a.size):
        ra_list, rb_list = a.collectives[rank]["records"], b.collectives[rank]["records"]
        for ra, rb in zip(ra_list, rb_list):
            compared += 1
            if ra.get("output") == rb.get("output") and ra.get("name") == rb.get("name"):
                continue
            differ += 1
            item = {"rank": rank, "seq": ra["seq"], "kind": ra["kind"], "name": ra.get("name"),
                    "members": ra.get("members"), "members_b": rb.get("members"),
                    "inputs_match": ra.get("inputs") == rb.get("inputs") and
                    ra.get("name") == rb.get("name")}
            if first is None or (ra["seq"], rank) < (first["seq"], first["rank"]):
                first = item
            if item["inputs_match"] and (root is None or
                                         (ra["seq"], rank) < (root["seq"], root["rank"])):
                root = item
    return {"compared": compared, "differ": differ, "first": first, "root_cause": root}


def _format(result):
    lines = [f"detcoll.debug diff: {result['run_a']} (np {result['size_a']}) vs "
             f"{result['run_b']} (np {result['size_b']}), {result['mode']} mode: "
             f"{result['compared']} records compared, {result['differ']} differ"]
    if result["only_a"] or result["only_b"]:
        lines.append(f"  {result['only_a']} records only in A, {result['only_b']} only in B "
                     "(not compared)")
    if result["argv_a"] != result["argv_b"]:
        lines.append(f"  the scripts ran with other arguments: {result['argv_a']} vs "
                     f"{result['argv_b']}")
    if result["size_a"] != result["size_b"]:
        lines.append("  world sizes differ: records of one rank's share (gradients before the "
                     "reduction, ops outside micro-batches) are not compared")

    def describe(item):
        text = f"{item['where']}: {item['what']}"
        if item.get("b_op"):
            text += f" (B ran {item['b_op']} here: the runs took different paths)"
        for o in item["outputs"]:
            if o.get("elements") is not None:
                text += (f"; {o['elements']} of {o['total']} elements differ, largest "
                         f"difference {o['ulps']} ulps")
            elif o.get("note"):
                text += f"; {o['note']}"
        return text

    root = result["root_cause"]
    if root:
        lines.append("root cause (the first record whose output differs while its inputs "
                     "matched):")
        lines.append("  " + describe(root))
    elif result["differ"]:
        lines.append("root cause: none among the records: every differing record has inputs "
                     "that differ, made outside what was recorded (numpy, a custom kernel, an "
                     "in-place write outside torch ops); record with ops=True to see more")
    if result["first_of_each_kind"]:
        lines.append("first differing record of each kind:")
        for kind, item in sorted(result["first_of_each_kind"].items(),
                                 key=lambda kv: kv[1]["step"]):
            lines.append(f"  {kind:8} {describe(item)}")
    coll = result.get("collectives")
    if coll and coll.get("first"):
        c = coll["first"]
        members = f" in a fused batch of {c['members']}" if c.get("members") else ""
        lines.append(f"first differing collective: rank {c['rank']} seq {c['seq']} {c['kind']} "
                     f"{c['name']!r}{members}" + ("" if c["inputs_match"] else
                                                  " (its inputs differ too)"))
    if not result["differ"] and not (coll and coll.get("differ")):
        lines.append(f"verdict: the runs agree ({result['compared']} records compared).")
    elif root:
        lines.append(f"verdict: the runs part at {root['where']}: {root['what']} gives other "
                     "bits from the same inputs.")
    else:
        lines.append("verdict: the runs differ, from inputs made outside the recorded ops.")
    return "\n".join(lines)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    as_json = "--json" in argv
    if len(args) != 2:
        print("usage: python3 -m detcoll.debug diff RUN_A RUN_B [--json]", file=sys.stderr)
        return 2
    try:
        result = compare(args[0], args[1])
    except TraceError as e:
        if as_json:
            print(json.dumps({"error": str(e)}))
        print(f"detcoll.debug diff: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if as_json else _format(result))
    differs = result["differ"] or (result.get("collectives") or {}).get("differ")
    return 1 if differs else 0
