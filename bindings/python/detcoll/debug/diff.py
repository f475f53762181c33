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

import base64
import json
import os
import struct
import sys

import numpy as np

from detcoll.debug import report
from detcoll.debug.traces import Trace, TraceError, compare_values, decode_derivations

_AFTER = {"grad": 0, "reduced": 1, "op": 2, "param": 3, "state": 4, "step": 5, "model": 6}
_SOURCES = ("input", "rng", "step")  # records made from outside the run's computation


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
    return [None if o is None else o.get("fp") for o in record.get("out", [])]


def _inputs(record):
    return [None if i is None else i.get("fp") for i in record.get("in", [])]


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


def _derivations(record):
    """A step's rng record as [domain, path, parent, child] lists."""
    try:
        return decode_derivations(base64.b64decode(record["log"], validate=True))
    except (KeyError, TypeError, ValueError, struct.error) as e:
        raise TraceError(f"a corrupt rng record (step {record.get('step')}): {e}") from None


def _detail(a_trace, b_trace, ra, rb):
    """How the outputs differ: elements and ulps where the values were kept."""
    out = []
    for oa, ob in zip(ra.get("out", []), rb.get("out", [])):
        if oa is None or ob is None or oa.get("fp") == ob.get("fp"):
            continue
        if ra["kind"] == "rng":
            da, db = (_derivations(r) for r in (ra, rb))
            first = next((i for i, (x, y) in enumerate(zip(da, db)) if x != y),
                         min(len(da), len(db)))
            shown = da[first] if first < len(da) else None
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


def _check_comparable(a, b, any_script=False):
    """The reason two runs' traces cannot be compared, or None."""
    ha, hb = a.header, b.header
    if bool(a.training) != bool(b.training):
        return "one run has a training trace and the other has none"
    if a.training:
        fields = (("every", "recording interval (every)"),) if any_script else (
            ("script", "script"), ("script_fingerprint", "script's contents"),
            ("every", "recording interval (every)"))
        for field, what in fields:
            if ha.get(field) != hb.get(field):
                return (f"the runs differ in their {what}: {ha.get(field)!r} vs "
                        f"{hb.get(field)!r}" + ("" if field == "every" else
                                                " (--any-script compares them all the same)"))
    ma, mb = _mode(a), _mode(b)
    if ma != mb:
        return f"the runs differ in their determinism mode: {ma} vs {mb}"
    sa, sb = (_settings(t) for t in (a, b))
    for name in sorted(set(sa) | set(sb)):
        if sa.get(name) != sb.get(name):
            return (f"the runs differ in their settings: {name} is {sa.get(name)!r} in A and "
                    f"{sb.get(name)!r} in B")
    models = [[r["params"] for r in t["records"] if r["kind"] == "model"]
              for t in (a.training[:1] + b.training[:1])]
    if len(models) == 2 and models[0] != models[1]:
        return "the runs train different models (their parameter lists differ)"
    return None


def _environment_differs(a, b):
    """The variables of the recorded environment (trace.py's ENVIRONMENT) whose values differ,
    as [name, value in A, value in B]: not a reason to refuse, often the reason runs part."""
    ea, eb = a.header.get("environment") or {}, b.header.get("environment") or {}
    return [[k, ea.get(k), eb.get(k)] for k in sorted(set(ea) | set(eb)) if ea.get(k) != eb.get(k)]


def _settings(trace):
    """The run's DETCOLL_*/HOROVOD_* settings but for those that only say where to write what is
    observed (a trace's own directory)."""
    from detcoll.debug import OBSERVERS

    return {k: v for k, v in trace.header.get("settings", {}).items()
            if not k.startswith(OBSERVERS)}


def _mode(trace):
    for t in trace.training:
        for r in t["records"]:
            if r["kind"] == "step":
                return r["mode"]
    return trace.header.get("mode")


def compare(dir_a, dir_b, any_script=False):
    """The comparison as a dict (see main for its fields). Raises TraceError. any_script:
    compare traces of scripts that differ (an edited script: a print added), with a note."""
    a, b = Trace(dir_a), Trace(dir_b)
    reason = _check_comparable(a, b, any_script)
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
        if kind == "op":  # its tensors: its arguments from Python are classified apart
            return ra.get("op") == rb.get("op") and _inputs(ra) == _inputs(rb)
        if kind == "reduced" and (same_size or invariant):
            return reduction_inputs(ia, ra) == reduction_inputs(ib, rb)
        return not earlier_differs  # its inputs are all the records before it

    # Allocations (ops marked unwritten): per run, (rank, seq) -> record.
    def allocations(index):
        return {(r["_rank"], r["seq"]): r for _, _, r in index.values() if r.get("unwritten")}

    alloc_a, alloc_b = allocations(ia), allocations(ib)

    def reads_unwritten(ra, rb):
        """The allocation whose memory an op read before anything wrote it: every input that
        differs is, in each run, marked as the output of that allocation (the same record in
        both). None otherwise."""
        if ra["kind"] != "op" or ra.get("op") != rb.get("op"):
            return None
        found = None
        for x, y in zip(ra.get("in", []), rb.get("in", [])):
            x, y = x or {}, y or {}
            if x.get("fp") == y.get("fp"):
                continue
            ax = alloc_a.get((ra["_rank"], x.get("unwritten")))
            ay = alloc_b.get((rb["_rank"], y.get("unwritten")))
            if ax is None or ay is None or ax["_global"] != ay["_global"]:
                return None
            found = ax
        return found

    differing, root, root_alloc, firsts = 0, None, None, {}
    for order, ra, rb in pairs:
        if ra.get("unwritten"):
            continue  # memory not yet written: its bits mean nothing
        if _outputs(ra) == _outputs(rb) and (ra["kind"] != "op" or ra.get("op") == rb.get("op")):
            continue
        if root is None:
            if inputs_match(ra, rb, differing > 0):
                root = (ra, rb)
            else:
                root_alloc = reads_unwritten(ra, rb)
                if root_alloc is not None:
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

    def cause(ra, rb):
        """Why the root cause's output differs: "data" (a source: a micro-batch's input, keys,
        torch's generator), "arguments" (an op given other values from Python: a time, a hash
        order, the environment), "unwritten" (it read memory nothing wrote), else "op" (the same
        inputs and arguments, other bits: the op itself)."""
        if root_alloc is not None:
            return "unwritten"
        if ra["kind"] in _SOURCES:
            return "data"
        if ra["kind"] == "op" and ra.get("args") != rb.get("args"):
            return "arguments"
        return "op"

    result = {"run_a": dir_a, "run_b": dir_b, "size_a": a.size, "size_b": b.size,
              "argv_a": a.header.get("argv"), "argv_b": b.header.get("argv"),
              "mode": _mode(a), "compared": len(pairs), "differ": differing,
              "only_a": only_a, "only_b": only_b,
              "root_cause": dict(shown(root), cause=cause(*root), args_a=root[0].get("args"),
                                 args_b=root[1].get("args"),
                                 reads_unwritten=None if root_alloc is None else {
                                     "op": root_alloc.get("op"), "site": root_alloc.get("site"),
                                     "where": _where(root_alloc)}) if root else None,
              "environment": _environment_differs(a, b), "ops": bool(a.header.get("ops")),
              "scripts_differ": [a.header.get(k) for k in ("script", "script_fingerprint")] !=
              [b.header.get(k) for k in ("script", "script_fingerprint")],
              "first_of_each_kind": {k: shown(p) for k, p in firsts.items()},
              "collectives": collectives}
    if collectives and collectives.get("root_cause") and result["root_cause"] is None and \
            not pairs:
        result["differ"] = collectives["differ"]
    return result


def _compare_collectives(a, b):
    """The collective traces (same world size only), aligned per rank by kind, name and the
    name's occurrence: the order of a native run's fused batches depends on timing, so sequence
    numbers need not pair the same calls. A differing record whose inputs matched is a root
    cause; its fused batch, in each run, shows why."""
    if a.size != b.size:
        return {"compared": 0, "differ": 0, "note": "not compared across world sizes",
                "root_cause": None}

    def keyed(records):
        # A fused batch lists its members on its first record (seq == batch) only.
        batches = {r["seq"]: r.get("members") or [r.get("name")]
                   for r in records if r.get("batch") == r.get("seq")}
        seen, out = {}, {}
        for r in records:
            if "batch" in r:
                r = dict(r, members=batches.get(r["batch"]))
            base = (r["kind"], r.get("name"), r.get("set"))
            n = seen[base] = seen.get(base, -1) + 1
            out[base + (n,)] = r
        return out

    pairs = [(keyed(a.collectives[rank]["records"]), keyed(b.collectives[rank]["records"]))
             for rank in range(a.size)]
    # A call's result depends on every rank's inputs: its inputs matched only where they matched
    # on every rank that made it.
    inputs_differ = {key for ka, kb in pairs for key, ra in ka.items()
                     if key in kb and ra.get("inputs") != kb[key].get("inputs")}
    compared = differ = unmatched = 0
    root = first = None
    for rank, (ka, kb) in enumerate(pairs):
        unmatched += len(ka.keys() ^ kb.keys())
        for key, ra in ka.items():
            rb = kb.get(key)
            if rb is None:
                continue
            compared += 1
            if ra.get("output") == rb.get("output"):
                continue
            differ += 1
            item = {"rank": rank, "seq": ra["seq"], "seq_b": rb["seq"], "kind": ra["kind"],
                    "name": ra.get("name"), "members": ra.get("members"),
                    "members_b": rb.get("members"), "inputs_match": key not in inputs_differ}
            if first is None or (ra["seq"], rank) < (first["seq"], first["rank"]):
                first = item
            if item["inputs_match"] and (root is None or
                                         (ra["seq"], rank) < (root["seq"], root["rank"])):
                root = item
    return {"compared": compared, "differ": differ, "only_one_run": unmatched, "first": first,
            "root_cause": root}


USAGE = "usage: python3 -m detcoll.debug diff RUN_A RUN_B [--json] [--any-script]"


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    options = [a for a in argv if a.startswith("--")]
    unknown = [o for o in options if o not in ("--json", "--any-script")]
    if len(args) != 2 or unknown:
        print((f"unknown option {unknown[0]}\n" if unknown else "") + USAGE, file=sys.stderr)
        return 2
    as_json = "--json" in options
    try:
        result = compare(args[0], args[1], any_script="--any-script" in options)
    except TraceError as e:
        if as_json:
            print(json.dumps({"error": str(e)}))
        print(f"detcoll.debug diff: {e}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(result, indent=1) if as_json else report.text(result), flush=True)
    except BrokenPipeError:  # a reader that stopped early (| head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    differs = result["differ"] or (result.get("collectives") or {}).get("differ")
    return 1 if differs else 0
