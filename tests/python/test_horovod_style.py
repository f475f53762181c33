"""A Horovod-style training script (horovod_style_train.py) run unchanged but for its import:
reproducible weights, identical replicas and rank-0 logging at np 3. Not run under mpirun: each
test launches mpirun itself (DETCOLL_MPIEXEC overrides the launcher)."""

import ast
import functools
import math
import os
import re
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "horovod_style_train.py")
IMPORT_LINE = "import detcoll.torch as hvd  # was: import horovod.torch as hvd"
NP = 3
# The script's parameters, passed explicitly so that the expected log can be computed from them.
PARAMS = {"epochs": 3, "batch-size": 32, "log-interval": 3, "train-samples": 1000,
          "test-samples": 300, "lr": 0.05, "momentum": 0.5, "seed": 42}
TIMEOUT_S = 120


@functools.lru_cache(maxsize=None)
def run(mode=None, fp16=False):
    """One np-3 run, cached: runs are deterministic, which two tests check with a fresh one."""
    return launch(mode, fp16)


def launch(mode=None, fp16=False):
    """An np-3 run of the script; mode None leaves DETCOLL_DETERMINISM unset (ordered)."""
    env = {k: v for k, v in os.environ.items() if k != "DETCOLL_DETERMINISM"}
    if mode is not None:
        env["DETCOLL_DETERMINISM"] = mode
    mpiexec = os.environ.get("DETCOLL_MPIEXEC", "mpirun")
    args = [f"--{k}={v}" for k, v in PARAMS.items()] + (["--fp16-allreduce"] if fp16 else [])
    cmd = [mpiexec, "-np", str(NP), "--oversubscribe", sys.executable, SCRIPT] + args
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} ran past {TIMEOUT_S} s\nstdout:\n{e.stdout}\n"
                    f"stderr:\n{e.stderr}")


def report(proc):
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def weights(proc):
    """The run's weight digest, after checking that it succeeded with identical replicas."""
    assert proc.returncode == 0, report(proc)
    assert proc.stdout.count("replicas identical: True") == 1, report(proc)
    digests = re.findall(r"^weights sha256: ([0-9a-f]{64})$", proc.stdout, re.M)
    assert len(digests) == 1, report(proc)
    return digests[0]


def test_only_the_import_line_mentions_detcoll():
    with open(SCRIPT) as f:
        text = f.read()
    assert [line for line in text.splitlines() if "detcoll" in line.lower()] == [IMPORT_LINE]
    imports = [(a.name, a.asname) for node in ast.walk(ast.parse(text))
               if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names]
    modules = [node.module for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.ImportFrom)]
    assert ("detcoll.torch", "hvd") in imports
    assert not [m for m in [n for n, _ in imports] + modules if m and "horovod" in m]
    # Swapping the import back gives a script with no trace of detcoll.
    assert "detcoll" not in text.replace(IMPORT_LINE, "import horovod.torch as hvd")


def test_ordered_runs_are_reproducible_with_identical_replicas():
    first = weights(run())
    second = weights(launch())
    assert first == second


def test_log_is_rank_0_only_and_the_loss_falls():
    proc = run()
    assert proc.returncode == 0, report(proc)
    per_rank = math.ceil(PARAMS["train-samples"] / NP)  # DistributedSampler pads to this
    batches = math.ceil(per_rank / PARAMS["batch-size"])
    logged = len(range(0, batches, PARAMS["log-interval"]))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("Train Epoch")]
    assert len(lines) == PARAMS["epochs"] * logged, report(proc)
    assert proc.stdout.count("Test set:") == PARAMS["epochs"], report(proc)
    losses = [float(re.search(r"Loss: ([0-9.]+)$", line).group(1)) for line in lines]
    assert losses[-1] < losses[0], losses


def test_fp16_allreduce_is_reproducible_and_differs_from_fp32():
    first = weights(run(fp16=True))
    second = weights(launch(fp16=True))
    assert first == second
    assert first != weights(run())


def test_invariant_mode_gives_identical_replicas():
    weights(run(mode="invariant"))
