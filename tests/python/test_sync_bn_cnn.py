"""A small CNN with SyncBatchNorm (sync_bn_cnn_train.py) trained under mpirun: in invariant mode
with sample leaves the weights and running statistics have the same bits at np 1, 2 and 4, and
the replicas agree; without sample leaves, or in ordered mode, they differ between world sizes
(so the comparison can fail); ordered mode is reproducible run to run. The parts are checked
against independent references in test_sync_batch_norm.py (statistics, input gradients and the
sample leaves' sums) and in the allreduce suites (the exact sum)."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "sync_bn_cnn_train.py")


def train(tmp_path, np_, mode="invariant", leaves=True, tag=""):
    report = tmp_path / f"{mode}-{np_}-{leaves}{tag}.json"
    command = [os.environ.get("DETCOLL_MPIEXEC", "mpirun"), "-np", str(np_), "--oversubscribe",
               sys.executable, SCRIPT, "--mode", mode, "--report", str(report)]
    if not leaves:
        command.append("--no-sample-leaves")
    env = dict(os.environ)
    env.pop("DETCOLL_DETERMINISM", None)
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    with open(report) as f:
        out = json.load(f)
    assert out["world_size"] == np_ and out["mode"] == mode and out["sample_leaves"] == leaves
    assert out["replicas"] == [out["sha256"]] * np_, f"replicas differ: {out['replicas']}"
    return out


@pytest.fixture(scope="module")
def invariant_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("invariant")
    return {np_: train(tmp, np_) for np_ in (1, 2, 4)}


def test_invariant_weights_are_the_same_at_every_world_size(invariant_runs):
    hashes = {np_: run["sha256"] for np_, run in invariant_runs.items()}
    assert len(set(hashes.values())) == 1, hashes
    curves = [run["curve"] for run in invariant_runs.values()]
    assert all(c == curves[0] for c in curves), curves


def test_without_sample_leaves_the_world_size_shows_in_the_weights(tmp_path, invariant_runs):
    one, four = train(tmp_path, 1, leaves=False), train(tmp_path, 4, leaves=False)
    assert one["sha256"] != four["sha256"]


def test_ordered_mode_is_reproducible_but_depends_on_the_world_size(tmp_path):
    first, second = train(tmp_path, 2, "ordered"), train(tmp_path, 2, "ordered", tag="again")
    assert first["sha256"] == second["sha256"] and first["curve"] == second["curve"]
    assert train(tmp_path, 4, "ordered")["sha256"] != first["sha256"]
