"""detcoll.debug: fingerprints against xxHash's own tool, and the diff of recorded runs with
planted faults (debug_train.py), each checked against a reference the test computes itself:
the line of the planted op in the script, the reductions that differ in the script's own dumps,
the weights printed by each rank. Runs launch their own mpirun jobs (bounded in time)."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import detcoll
import detcoll.debug as dbg

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "debug_train.py")
MPIRUN = shutil.which("mpirun")


def xxhsum(data):
    """XXH3-64 by xxHash's command-line tool (Debian's xxhash package), the reference."""
    out = subprocess.run(["xxhsum", "-H3", "-"], input=bytes(data), capture_output=True,
                         check=True, timeout=30).stdout.decode()
    return int(re.search(r"([0-9a-f]{16})", out).group(1), 16)


@pytest.mark.skipif(shutil.which("xxhsum") is None, reason="xxhsum (package xxhash) missing")
def test_fingerprint_is_xxh3_of_the_bytes():
    rng = np.random.default_rng(5)
    for size in (0, 1, 3, 16, 17, 128, 129, 240, 241, 1000, 65537):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert dbg.fingerprint(data) == xxhsum(data), size
    x = torch.randn(33, 7, dtype=torch.float64) * 1e3
    assert dbg.fingerprint(x) == xxhsum(x.numpy().tobytes())
    assert dbg.fingerprint(x.t()) == xxhsum(x.t().contiguous().numpy().tobytes())
    assert dbg.fingerprint(x[1:, 2:5]) == xxhsum(x[1:, 2:5].contiguous().numpy().tobytes())
    h = torch.randn(10).to(torch.bfloat16)
    assert dbg.fingerprint(h) == xxhsum(h.view(torch.int16).numpy().tobytes())
    y = x.clone()
    y.view(-1)[100] = torch.nextafter(y.view(-1)[100], torch.tensor(np.inf, dtype=torch.float64))
    assert dbg.fingerprint(y) != dbg.fingerprint(x)


def test_hash_refuses_a_null_buffer_naming_it():
    from detcoll import _detcoll

    with pytest.raises(detcoll.InvalidArgumentError, match="detcoll_hash: data is null"):
        _detcoll.hash(0, 5)
    with pytest.raises(detcoll.InvalidArgumentError, match="cuda tensor|copy it to the CPU"):
        dbg.fingerprint(torch.empty(0, device="meta"))


def run(np_, directory, *args, env=None, check=True):
    """debug_train.py at np_ ranks, recording into directory; {rank: printed line}."""
    environ = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
    environ.pop("DETCOLL_DEBUG_RECORD", None)
    environ.update(env or {})
    command = [MPIRUN, "-np", str(np_), "--oversubscribe"]
    for name in sorted(environ):
        if name.startswith(("DETCOLL_", "HOROVOD_", "PLANT_", "PYTHONPATH", "OMPI_MCA_coll")):
            command += ["-x", name]
    command += [sys.executable, DRIVER] + (["--record", str(directory)] if directory else []) + \
        list(args)
    done = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=240)
    # Ranks' lines can share a line of mpirun's output: each ends where the next begins.
    line = r"rank (\d+) (done weights [0-9a-f]{16}|error: [^\n]*?)(?=rank \d+ (?:done|error)|\n|$)"
    lines = {int(m.group(1)): m.group(0) for m in re.finditer(line, done.stdout)}
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(lines) == list(range(np_)), done.stdout
    return lines, done


def diff(a, b):
    done = subprocess.run([sys.executable, "-m", "detcoll.debug", "diff", str(a), str(b),
                           "--json"], capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout), done.stderr


needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun missing")


@needs_mpi
def test_a_run_dependent_op_is_named_with_its_call_site_not_the_layers_after_it(tmp_path):
    for seed in ("1", "2"):
        run(3, tmp_path / seed, "--ops", "--plant",
            env={"PLANT_SEED": seed, "DETCOLL_DETERMINISM": "ordered"})
    rc, result, _ = diff(tmp_path / "1", tmp_path / "2")
    assert rc == 1, result
    root = result["root_cause"]
    with open(DRIVER) as f:
        line = next(i for i, text in enumerate(f, 1) if "_planted_op()(zeros" in text)
    assert root["op"] == "planted.racy_index_add.default", root
    assert root["site"] == f"{os.path.relpath(DRIVER)}:{line} (forward)", root
    assert (root["step"], root["micro_batch"], root["module"]) == (0, 0, "1"), root
    assert root["outputs"][0]["elements"] > 0 and root["outputs"][0]["ulps"] > 0
    # What it contaminates differs too, later: the tool names the op all the same.
    assert result["differ"] > 1 and "reduced" in result["first_of_each_kind"], result


def _first_differing_reduction(dumps_a, dumps_b, names):
    """From the runs' own dumps: the first (step, parameter) whose reduced gradient differs on
    some rank, in step order and then parameter order."""
    for step in range(len(dumps_a[0])):
        for name in names:
            if any(not torch.equal(a[step]["reduced"][name], b[step]["reduced"][name])
                   for a, b in zip(dumps_a, dumps_b)):
                return step, name
    return None


@needs_mpi
def test_ordered_runs_at_two_and_three_ranks_part_at_the_first_reduction(tmp_path):
    env = {"DETCOLL_DETERMINISM": "ordered"}
    for np_ in (2, 3):
        run(np_, tmp_path / str(np_), "--dump", str(tmp_path / f"d{np_}"), env=env)
    dumps = {np_: [torch.load(tmp_path / f"d{np_}.rank{r}") for r in range(np_)] for np_ in (2, 3)}
    names = list(dumps[2][0][0]["reduced"])
    # Replicated results: rank 0 of each run stands for the run.
    expected = _first_differing_reduction(dumps[2][:1], dumps[3][:1], names)
    assert expected is not None, "the planted difference did not occur"
    rc, result, _ = diff(tmp_path / "2", tmp_path / "3")
    assert rc == 1
    root = result["root_cause"]
    assert (root["kind"], root["step"], root["name"]) == ("reduced",) + expected, root
    assert expected[0] == 0  # the first step's reduction already parts


def _first_root_reduction(dumps_a, dumps_b, names):
    """From the runs' own dumps: the first (step, parameter), in step and parameter order, whose
    reduced gradient differs on some rank while every rank's gradient before it matched."""
    for step in range(len(dumps_a[0])):
        for name in names:
            inputs = all(torch.equal(a[step]["pre"][name], b[step]["pre"][name])
                         for a, b in zip(dumps_a, dumps_b))
            outputs = all(torch.equal(a[step]["reduced"][name], b[step]["reduced"][name])
                          for a, b in zip(dumps_a, dumps_b))
            if inputs and not outputs:
                return step, name
    return None


@needs_mpi
def test_native_runs_with_other_fusion_layouts_part_at_the_first_reduction(tmp_path):
    """Native mode hands each fused batch to MPI's allreduce. Its ring sums an element in an
    order set by the element's place in the batch, so a run whose batches are cut elsewhere
    (rank 1 stalls in backward: --delay) gets other bits from the same gradients. Open MPI picks
    the ring for large buffers; at 3 ranks on one node its non-blocking allreduce picks a binomial
    tree, the same at every offset, so the test pins the ring. The 50 ms cycle makes the undelayed
    run fuse what the delayed one cannot."""
    env = {"DETCOLL_DETERMINISM": "native", "HOROVOD_CYCLE_TIME": "50",
           "OMPI_MCA_coll_libnbc_iallreduce_algorithm": "1"}
    for name, extra in (("a", ()), ("b", ("--delay",))):
        run(3, tmp_path / name, "--dump", str(tmp_path / f"d{name}"), *extra,
            env=dict(env, DETCOLL_TRACE=str(tmp_path / name)))
    dumps = {n: [torch.load(tmp_path / f"d{n}.rank{r}") for r in range(3)] for n in "ab"}
    names = list(dumps["a"][0][0]["reduced"])
    expected = _first_root_reduction(dumps["a"], dumps["b"], names)
    assert expected is not None, "the fusion layouts gave the same bits"
    rc, result, _ = diff(tmp_path / "a", tmp_path / "b")
    assert rc == 1, result
    root = result["root_cause"]
    assert (root["kind"], root["step"], root["name"]) == ("reduced",) + expected, root
    assert root["outputs"][0]["elements"] > 0 and root["outputs"][0]["ulps"] > 0
    # The collective trace: the first allreduce whose output differs while its inputs matched,
    # fused with other tensors in the two runs; its tensor's reduction differs in the dumps.
    coll = result["collectives"]["root_cause"]
    assert coll is not None and coll["inputs_match"], result["collectives"]
    assert coll["kind"] == "allreduce" and coll["members"] != coll["members_b"], coll
    tensor = coll["name"].removeprefix("allreduce.")
    step = next(i for i in range(len(dumps["a"][0]))
                if not torch.equal(dumps["a"][0][i]["reduced"][tensor],
                                   dumps["b"][0][i]["reduced"][tensor]))
    assert step == expected[0], (coll, expected)


@needs_mpi
def test_invariant_runs_at_one_two_and_four_ranks_agree(tmp_path):
    env = {"DETCOLL_DETERMINISM": "invariant"}
    weights = {}
    for np_ in (1, 2, 4):
        lines, _ = run(np_, tmp_path / str(np_), "--micro-batches", "4", env=env)
        weights[np_] = {line.split()[-1] for line in lines.values()}
    assert len(weights[1]) == 1 and weights[1] == weights[2] == weights[4]
    for np_ in (2, 4):
        rc, result, _ = diff(tmp_path / "1", tmp_path / str(np_))
        assert rc == 0 and result["differ"] == 0 and result["root_cause"] is None, result
        assert result["compared"] > 20  # reduced gradients, parameters, state, leaves


@needs_mpi
def test_recording_does_not_change_the_bits(tmp_path):
    env = {"DETCOLL_DETERMINISM": "ordered"}
    plain, _ = run(3, None, env=env)
    recorded, _ = run(3, tmp_path / "r", "--ops", env=env)
    assert plain == recorded


@needs_mpi
def test_a_nudged_replica_fails_every_rank_naming_the_tensor_and_rank(tmp_path):
    lines, done = run(3, None, "--nudge", "--check-replicas", "1",
                      env={"DETCOLL_DETERMINISM": "ordered"}, check=False)
    assert done.returncode != 0
    assert sorted(lines) == [0, 1, 2], done.stdout
    for rank, line in lines.items():
        assert "replicas differ at '4.weight'" in line, (rank, line)
        assert re.search(r"rank 1 holds [0-9a-f]{16}", line) and \
            re.search(r"ranks 0, 2 hold [0-9a-f]{16}", line), line


@needs_mpi
def test_truncated_corrupt_and_foreign_traces_are_refused(tmp_path):
    env = {"DETCOLL_DETERMINISM": "ordered"}
    run(2, tmp_path / "a", env=env)
    run(2, tmp_path / "other", env=dict(env, DETCOLL_FUSION_THRESHOLD="0"))
    rc, result, _ = diff(tmp_path / "a", tmp_path / "other")
    assert rc == 2 and "DETCOLL_FUSION_THRESHOLD" in result["error"], result
    run(2, tmp_path / "invariant", env={"DETCOLL_DETERMINISM": "invariant"})
    rc, result, _ = diff(tmp_path / "a", tmp_path / "invariant")
    assert rc == 2 and "determinism mode" in result["error"], result

    def damaged(name, change):
        target = tmp_path / name
        shutil.copytree(tmp_path / "a", target)
        path = target / "training.rank1.jsonl"
        path.write_text(change(path.read_text()))
        return target

    lines_cut = damaged("cut", lambda text: "".join(text.splitlines(True)[:-3]))
    rc, result, _ = diff(tmp_path / "a", lines_cut)
    assert rc == 2 and "training.rank1.jsonl is truncated" in result["error"], result
    mid_line = damaged("mid", lambda text: text[:len(text) // 2])
    rc, result, _ = diff(mid_line, tmp_path / "a")
    assert rc == 2 and "truncated" in result["error"], result
    corrupt = damaged("corrupt", lambda text: text.replace('"kind"', '"ki\x00nd', 1)
                      .replace("\x00", "{"))
    rc, result, _ = diff(tmp_path / "a", corrupt)
    assert rc == 2 and "is not a trace record" in result["error"], result
    os.remove(tmp_path / "a" / "training.rank1.jsonl")
    rc, result, _ = diff(tmp_path / "a", tmp_path / "invariant")
    assert rc == 2 and "missing [1]" in result["error"], result


def _grow_and_read(directory, value):
    """A recorded run that reads memory nothing wrote: x grows back with resize_, and its last
    elements still hold what was there before the recording (value, other in each run)."""
    x = torch.full((8,), value)
    with dbg.record(directory, ops=True):
        x.resize_(4)
        torch.ones(4).mul_(3)
        x.resize_(8)  # GROWN
        y = x * 2  # READS
        y.sum()
    with open(__file__) as f:
        text = f.read().splitlines()
    return [next(i for i, t in enumerate(text, 1) if t.strip().endswith(m))
            for m in ("# GROWN", "# READS")]


def test_an_op_that_reads_memory_nothing_wrote_is_named_with_the_allocation(tmp_path):
    grown, reads = _grow_and_read(tmp_path / "a", 1.25)
    _grow_and_read(tmp_path / "b", 2.75)
    rc, result, _ = diff(tmp_path / "a", tmp_path / "b")
    assert rc == 1, result
    root = result["root_cause"]
    site = os.path.relpath(__file__)
    assert root["op"] == "aten.mul.Tensor" and root["site"].startswith(f"{site}:{reads} "), root
    assert root["reads_unwritten"]["op"] == "aten.resize_.default", root
    assert root["reads_unwritten"]["site"].startswith(f"{site}:{grown} "), root
    # The allocations themselves are never the cause, nor counted as differing records.
    assert "aten.resize_" not in json.dumps(result["first_of_each_kind"]), result


def test_recorded_tensors_read_back_as_recorded(tmp_path):
    """The values file holds each recorded tensor's bytes at its offset, through the fast path
    (contiguous) and the copy (negative and conjugate views, strided), and across the writer's
    blocks (small and large tensors, repeats)."""
    from detcoll.debug import trace as recorder, traces

    g = torch.Generator().manual_seed(3)
    wide = torch.randn(300, 70, generator=g, dtype=torch.float64) * 1e5
    tensors = [torch.randn(5, generator=g), wide, wide.t(), torch._neg_view(wide[:3, :4]),
               torch._neg_view(torch.randn(6, generator=g)),
               torch.randn(4, dtype=torch.complex64, generator=g).conj(),
               torch.randn(7, generator=g).to(torch.bfloat16), torch.zeros(0),
               torch.randn(600_000, generator=g), torch.randn(5, generator=g)]
    tensors.append(tensors[0].clone())  # a repeat: stored once
    rec = recorder.Recorder(tmp_path, values=True)
    infos = [json.loads(rec.tensor(t)) for t in tensors]
    rec.close()
    run = traces.Trace.__new__(traces.Trace)
    run.directory, run.values = str(tmp_path), {}
    for t, info in zip(tensors, infos):
        expected = t.resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
        assert info["fp"] == f"{dbg.fingerprint(t):016x}", info
        assert bytes(run.value(0, info)) == expected.numpy().tobytes(), info
    assert infos[-1]["at"] == infos[0]["at"]


def test_records_of_parameters_named_by_other_than_str_are_valid_json(tmp_path):
    """DistributedOptimizer takes names of any type (named_parameters=enumerate(...)); the
    records show them as str, and every line of the trace parses."""
    from detcoll.debug import trace as recorder

    rec = recorder.Recorder(tmp_path)
    t = torch.randn(3)
    rec.gradient(7, t)
    rec.reduced([(7, t)], "ordered")
    rec.leaf(("w", 1), t)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.randn(2))], lr=0.1, momentum=0.9)
    opt.param_groups[0]["params"][0].grad = torch.ones(2)
    opt.step()
    rec.stepped(opt, lambda p: 11, "ordered")
    rec.close()
    with open(tmp_path / "training.rank0.jsonl") as f:
        records = [json.loads(line) for line in f]
    names = [(r["kind"], r["name"]) for r in records if "name" in r]
    assert names == [("grad", "7"), ("reduced", "7"), ("leaf", "('w', 1)"), ("param", "11"),
                     ("state", "11")], names


def test_the_values_file_under_threads_a_slow_writer_and_after_close(tmp_path):
    """put() from four threads at once while every put waits for the writer (max_queued=1):
    each offset holds its tensor's bytes. A closed store refuses more; a write that fails is an
    error of the store, not a silent gap."""
    import threading

    from detcoll import _detcoll

    path = tmp_path / "values.bin"
    store = _detcoll.ValueStore(str(path), max_queued=1)
    g = torch.Generator().manual_seed(9)
    sizes = torch.randint(1, 400_000, (4, 12), generator=g)
    work = [[torch.randn(int(n), generator=g) for n in row] for row in sizes]
    placed = [[] for _ in work]

    def put(i):
        for t in work[i]:
            placed[i].append((t, store.put(t.data_ptr(), t.numel() * 4, True)))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    store.close()
    data = path.read_bytes()
    assert len(data) == sum(t.numel() * 4 for w in work for t in w)
    for t, (fp, at) in (p for ps in placed for p in ps):
        assert fp == dbg.fingerprint(t) and data[at:at + t.numel() * 4] == t.numpy().tobytes()
    with pytest.raises(OSError, match="closed values file"):
        store.put(work[0][0].data_ptr(), 4, True)
    full = _detcoll.ValueStore("/dev/full", max_queued=1)
    a, b = torch.randn(1 << 19), torch.randn(1 << 19)
    full.put(a.data_ptr(), a.numel() * 4, True)  # queued; the writer's write fails
    with pytest.raises(OSError, match="No space left on device"):
        full.put(b.data_ptr(), b.numel() * 4, True)  # waits for the writer: its error
    with pytest.raises(OSError, match="No space left on device"):
        full.put(a.data_ptr(), a.numel() * 4, True)  # not an offset of bytes never written
    with pytest.raises(OSError, match="No space left on device"):
        full.close()


def _diff_text(a, b):
    done = subprocess.run([sys.executable, "-m", "detcoll.debug", "diff", str(a), str(b)],
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout


def _site(marker):
    with open(__file__) as f:
        line = next(i for i, t in enumerate(f, 1) if t.rstrip().endswith(marker))
    return f"{os.path.relpath(__file__)}:{line} "


def _seeded_permutation(directory, seed):
    with dbg.record(directory, ops=True):
        x = torch.linspace(-3.7, 9.1, 16)
        perm = torch.randperm(16, generator=torch.Generator().manual_seed(seed))  # PERM
        (x[perm] * 1.5).cumsum(0)


def _default_generator_dropout(directory, seed):
    torch.manual_seed(seed)
    with dbg.record(directory, ops=True):
        x = torch.linspace(-3.7, 9.1, 64)
        torch.nn.functional.dropout(x, 0.5).sum()  # DROPOUT


def test_the_cause_is_told_apart_arguments_from_python_and_a_random_op(tmp_path):
    """A permutation from a generator seeded per run: the op that took the seed is named, with
    the arguments that differ. Dropout from torch's default generator seeded per run: the random
    op is named (its output buffer, allocated and overwritten, is not an input)."""
    _seeded_permutation(tmp_path / "p1", 11)
    _seeded_permutation(tmp_path / "p2", 12)
    rc, result, _ = diff(tmp_path / "p1", tmp_path / "p2")
    root = result["root_cause"]
    assert rc == 1 and root["op"] == "aten.randperm.generator", root
    assert root["cause"] == "arguments" and root["site"].startswith(_site("# PERM")), root
    assert "initial_seed=11" in root["args_a"] and "initial_seed=12" in root["args_b"], root
    rc, text = _diff_text(tmp_path / "p1", tmp_path / "p2")
    assert "it was given other arguments" in text, text

    _default_generator_dropout(tmp_path / "d1", 5)
    _default_generator_dropout(tmp_path / "d2", 6)
    rc, result, _ = diff(tmp_path / "d1", tmp_path / "d2")
    root = result["root_cause"]
    assert rc == 1 and root["op"].startswith("aten.bernoulli_"), root
    assert root["cause"] == "op" and root["site"].startswith(_site("# DROPOUT")), root
    rc, text = _diff_text(tmp_path / "d1", tmp_path / "d2")
    assert "a random op drawing from torch's default generator" in text, text


def test_an_order_from_python_hashing_is_named_and_the_environments_compared(tmp_path):
    """A value from a set's iteration order (PYTHONHASHSEED differs between the runs) reaches an
    op as an argument: that op is named, and diff reports the variable that differs."""
    script = tmp_path / "hashing.py"
    script.write_text(
        "import sys\nimport torch\nimport detcoll.debug as dbg\n"
        "with dbg.record(sys.argv[1], ops=True):\n"
        "    x = torch.linspace(-3.7, 9.1, 16)\n"
        "    first = list({'alpha', 'beta', 'gamma', 'delta', 'epsilon'})[0]\n"
        "    print(first)\n"
        "    (x * len(first)).sum()  # SCALED\n")
    firsts = []
    for seed in ("1", "4"):
        done = subprocess.run([sys.executable, str(script), str(tmp_path / seed)],
                              env=dict(os.environ, PYTHONHASHSEED=seed), capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        firsts.append(done.stdout.strip())
    assert len(firsts[0]) != len(firsts[1]), firsts  # the seeds give other orders
    rc, result, _ = diff(tmp_path / "1", tmp_path / "4")
    root = result["root_cause"]
    assert rc == 1 and root["op"] == "aten.mul.Tensor" and root["cause"] == "arguments", root
    assert root["site"].startswith("hashing.py:8 "), root
    assert ["PYTHONHASHSEED", "1", "4"] in result["environment"], result["environment"]
