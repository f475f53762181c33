"""The text `python3 -m detcoll.debug diff` prints (README, "Finding why two runs differ"):
counts, notes on what differs between the runs' setups, the root cause with a line on what kind
of difference it is, the first differing record of each kind, the collective trace's part and
a one-line verdict. diff.py computes the result this reads."""


_RANDOM = ("bernoulli", "normal", "uniform", "random", "randperm", "rand", "multinomial",
           "dropout", "exponential", "geometric", "cauchy", "log_normal", "poisson")


def _because(root):
    """What the root cause's kind of difference means, in a line."""
    u = root.get("reads_unwritten")
    if u:
        return (f"it reads memory that {u['op']} allocated at {u['site']} ({u['where']}) and "
                "nothing wrote: its contents differ between runs")
    if root["cause"] == "arguments":
        return (f"its tensors match but it was given other arguments: {root['args_a']} in A, "
                f"{root['args_b']} in B (a value made in Python: a time, a seed, an iteration "
                "order of a set or dict, the environment)")
    if root["cause"] == "data":
        if root["kind"] == "step":
            return ("torch's default generator ended the step in another state: an op drew from "
                    "it after other seeding (torch.manual_seed per run or per rank), or a "
                    "different number of times")
        if root["kind"] == "rng":
            return "detcoll.rng derived other keys: other seeds, steps or sample indices"
        return ("the data differ at their source: the micro-batch's contents or order came "
                "out of the data pipeline differently (shuffling, augmentation, workers)")
    op = (root.get("op") or "").lower()
    if any(r in op for r in _RANDOM):
        return ("the same inputs and arguments, other bits: a random op drawing from torch's "
                "default generator, seeded differently (give it a detcoll.rng key or seed it "
                "the same on every run)")
    return "the same inputs and arguments, other bits: the op itself depends on the run"


def text(result):
    coll = result.get("collectives") or {}
    head = (f"detcoll.debug diff: {result['run_a']} (np {result['size_a']}) vs "
            f"{result['run_b']} (np {result['size_b']}), {result['mode']} mode: ")
    parts = []
    if result["compared"] or not coll:
        parts.append(f"{result['compared']} records compared, {result['differ']} differ")
    if coll:
        parts.append(f"{coll.get('compared', 0)} collective records compared, "
                     f"{coll.get('differ', 0)} differ")
    lines = [head + "; ".join(parts)]
    if result["only_a"] or result["only_b"]:
        lines.append(f"  {result['only_a']} records only in A, {result['only_b']} only in B "
                     "(not compared)")
    if result["argv_a"] != result["argv_b"]:
        lines.append(f"  the scripts ran with other arguments: {result['argv_a']} vs "
                     f"{result['argv_b']}")
    if result.get("scripts_differ"):
        lines.append("  the scripts differ (compared all the same: --any-script); records after "
                     "an edit may not align")
    for name, va, vb in result.get("environment") or []:
        lines.append(f"  the environments differ: {name} is {va!r} in A and {vb!r} in B")
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
        lines.append("root cause (the first record that differs while the tensors it was made "
                     "from matched):")
        lines.append("  " + describe(root))
        lines.append("  " + _because(root))
    elif result["differ"]:
        lines.append("root cause: none among the records: every differing record has inputs "
                     "that differ, made outside what was recorded (numpy, a custom kernel, an "
                     "in-place write outside torch ops)" +
                     ("" if result.get("ops") else "; record with ops=True to see more"))
    if result["first_of_each_kind"]:
        lines.append("first differing record of each kind:")
        for kind, item in sorted(result["first_of_each_kind"].items(),
                                 key=lambda kv: kv[1]["step"]):
            lines.append(f"  {kind:8} {describe(item)}")
    if coll.get("differ"):
        c = coll["root_cause"] or coll["first"]
        label = ("collective root cause (output differs, every rank's inputs matched)"
                 if coll["root_cause"] else "first differing collective (its inputs differ too)")
        lines.append(f"{label}: rank {c['rank']} seq {c['seq']} {c['kind']} {c['name']!r}")
        if c.get("members") != c.get("members_b"):
            lines.append(f"  its fused batch was {c.get('members')} in A and "
                         f"{c.get('members_b')} in B" +
                         (": in native mode the backend's sum order can depend on the fusion "
                          "layout" if result["mode"] == "native" and coll["root_cause"] else ""))
    if not result["differ"] and not coll.get("differ"):
        total = result["compared"] + coll.get("compared", 0)
        lines.append(f"verdict: the runs agree ({total} records compared).")
    elif root:
        lines.append(f"verdict: the runs part at {root['where']}: {root['what']}.")
    elif coll.get("root_cause"):
        c = coll["root_cause"]
        lines.append(f"verdict: the runs part at collective {c['kind']} {c['name']!r} (rank "
                     f"{c['rank']} seq {c['seq']}): other bits from the same inputs.")
    elif result["differ"]:
        lines.append("verdict: the runs differ, from inputs made outside the recorded ops.")
    else:
        lines.append("verdict: the runs' collectives differ, from inputs the collective trace "
                     "does not explain (record the training too: DETCOLL_DEBUG_RECORD).")
    return "\n".join(lines)
