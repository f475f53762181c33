"""python3 -m detcoll.debug audit: planted settings are reported with the right status and fix,
in process (detcoll.debug.audit.audit) and from the command line (--json, --strict), and under
mpirun a setting that differs between ranks is a risk naming the ranks that hold each value.

Single process; the mpirun jobs are launched here (DETCOLL_MPIEXEC, default mpirun), some
running debug_audit_driver.py."""

import json
import os
import subprocess
import sys

import pytest
import torch

from detcoll.debug import audit as audit_module
from detcoll.debug.audit import audit, compare

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "debug_audit_driver.py")
KEYS = {"source", "setting", "value", "status", "why", "fix"}
# Variables the audit inspects that the planted cases set; cleared before each test.
PLANTED = ("DETCOLL_DETERMINISM", "DETCOLL_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD",
           "HOROVOD_CYCLE_TIME", "DETCOLL_CYCLE_TIME", "PYTHONHASHSEED", "NCCL_ALGO",
           "TF_XLA_FLAGS", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "DETCOLL_FAST_PATH",
           "HOROVOD_CACHE_CAPACITY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in PLANTED:
        monkeypatch.delenv(name, raising=False)


def one(findings, setting, source=None):
    found = [f for f in findings if f["setting"] == setting
             and (source is None or f["source"] == source)]
    assert len(found) == 1, f"{setting}: {found}"
    return found[0]


def local():
    return audit(compare_ranks=False)


# ---- in process ----

def test_every_finding_has_the_keys_and_a_status():
    findings = local()
    assert len(findings) > 30
    for f in findings:
        assert set(f) == KEYS, f
        assert f["status"] in ("ok", "risk", "info"), f
        assert f["value"] is None or isinstance(f["value"], str), f
        assert f["why"] and f["fix"], f


def test_cudnn_benchmark_on_is_a_risk():
    saved = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        on = one(local(), "torch.backends.cudnn.benchmark")
        torch.backends.cudnn.benchmark = False
        off = one(local(), "torch.backends.cudnn.benchmark")
    finally:
        torch.backends.cudnn.benchmark = saved
    assert (on["status"], on["value"]) == ("risk", "True")
    assert on["fix"] == "torch.backends.cudnn.benchmark = False"
    assert (off["status"], off["value"]) == ("ok", "False")


def test_the_patch_state_is_reported():
    import detcoll.torch as dt
    dt.unpatch()
    before = one(local(), "detcoll.torch.patch_state()")
    with dt.patched(devices=("cpu",), ops=["bincount", "index_add_"]):
        during = one(local(), "detcoll.torch.patch_state()")
    assert before["value"] == "not patched"
    assert before["status"] == ("risk" if torch.cuda.is_available() else "info")
    assert "index_add_" in before["why"] and "patch()" in before["fix"]
    assert during["value"] == "aten::bincount on cpu, aten::index_add_ on cpu"
    # Patched for the CPU alone leaves the CUDA kernels torch's.
    assert during["status"] == before["status"]
    with dt.patched(ops=["bincount"]):  # CUDA, one op of them
        one_op = one(local(), "detcoll.torch.patch_state()")
    with dt.patched():  # CUDA, every op (registering for CUDA needs no device)
        every_op = one(local(), "detcoll.torch.patch_state()")
    assert one_op["status"] == before["status"]
    assert "bincount" not in one_op["why"] and "index_add_" in one_op["why"]
    assert every_op["status"] == "ok"


def test_horovod_fusion_threshold_zero_in_native_mode_is_the_workaround_that_drifts(monkeypatch):
    monkeypatch.setenv("DETCOLL_DETERMINISM", "native")
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "0")
    findings = local()
    fusion = one(findings, "HOROVOD_FUSION_THRESHOLD", "fusion")
    assert (fusion["status"], fusion["value"]) == ("risk", "0")
    assert "Horovod's workaround" in fusion["why"]
    assert fusion["fix"].startswith("DETCOLL_DETERMINISM=ordered (or invariant")
    assert "keeps fusion" in fusion["fix"]
    assert one(findings, "DETCOLL_DETERMINISM")["status"] == "risk"


def test_horovod_fusion_threshold_zero_without_a_mode_only_costs_bandwidth(monkeypatch):
    # detcoll's default mode is ordered, in which fusion never changes a bit: turning it off is
    # no fix, so it is reported as such rather than as a drift.
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "0")
    findings = local()
    fusion = one(findings, "HOROVOD_FUSION_THRESHOLD", "fusion")
    assert (fusion["status"], fusion["value"]) == ("info", "0")
    assert fusion["fix"] == "unset HOROVOD_FUSION_THRESHOLD"
    mode = one(findings, "DETCOLL_DETERMINISM")
    assert (mode["status"], mode["value"]) == ("ok", None)


def test_detcoll_threshold_takes_precedence_over_horovods(monkeypatch):
    monkeypatch.setenv("DETCOLL_FUSION_THRESHOLD", "1048576")
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "0")
    findings = local()
    fusion = [f for f in findings if f["source"] == "fusion"]
    assert [(f["setting"], f["value"], f["status"]) for f in fusion] == [
        ("DETCOLL_FUSION_THRESHOLD", "1048576", "ok")]
    ignored = one(findings, "HOROVOD_FUSION_THRESHOLD", "horovod-env")
    assert "ignored" in ignored["why"] and ignored["status"] == "info"


def test_horovods_cache_capacity_is_read_as_the_fast_path_unless_ours_is_set(monkeypatch):
    monkeypatch.setenv("HOROVOD_CACHE_CAPACITY", "0")
    read = one(local(), "HOROVOD_CACHE_CAPACITY", "horovod-env")
    assert read["status"] == "info" and "read as DETCOLL_FAST_PATH" in read["why"], read
    monkeypatch.setenv("DETCOLL_FAST_PATH", "1")
    findings = local()
    ignored = one(findings, "HOROVOD_CACHE_CAPACITY", "horovod-env")
    assert "ignored" in ignored["why"], ignored
    ours = one(findings, "DETCOLL_FAST_PATH", "detcoll-env")
    assert (ours["status"], ours["value"]) == ("info", "1") and "no effect on bits" in ours["why"]


def test_python_hash_seed_unset_is_a_risk_and_set_is_ok(monkeypatch):
    unset = one(local(), "PYTHONHASHSEED")
    assert (unset["status"], unset["value"]) == ("risk", None)
    assert "PYTHONHASHSEED=0" in unset["fix"]
    monkeypatch.setenv("PYTHONHASHSEED", "random")
    assert one(local(), "PYTHONHASHSEED")["status"] == "risk"
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    fixed = one(local(), "PYTHONHASHSEED")
    assert (fixed["status"], fixed["value"]) == ("ok", "0")


@pytest.mark.parametrize("mode,mode_status,world_status", [
    ("invariant", "ok", "ok"), ("ordered", "ok", "info"), ("native", "risk", "info"),
    ("Invariant", "risk", "info")])
def test_modes(monkeypatch, mode, mode_status, world_status):
    monkeypatch.setenv("DETCOLL_DETERMINISM", mode)
    findings = local()
    found = one(findings, "DETCOLL_DETERMINISM")
    assert (found["status"], found["value"]) == (mode_status, mode)
    assert one(findings, "world-size invariance")["status"] == world_status


@pytest.mark.parametrize("mode,status", [("native", "risk"), ("invariant", "ok")])
def test_nccl_tuning_matters_in_native_mode_only(monkeypatch, mode, status):
    monkeypatch.setenv("DETCOLL_DETERMINISM", mode)
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    found = one(local(), "NCCL_ALGO")
    assert (found["status"], found["value"]) == (status, "Ring")


def test_misspelled_detcoll_variable_names_the_real_one(monkeypatch):
    monkeypatch.setenv("DETCOLL_DETERMINSM", "invariant")
    found = one(local(), "DETCOLL_DETERMINSM")
    assert found["status"] == "risk" and found["fix"] == "rename it DETCOLL_DETERMINISM"


def test_xla_auto_jit_is_a_risk(monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    assert one(local(), "TF_XLA_FLAGS")["status"] == "risk"
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    assert one(local(), "TF_XLA_FLAGS")["status"] == "info"


def test_thread_count_and_cpu_capability_are_this_process():
    findings = local()
    assert one(findings, "torch.get_num_threads()")["value"] == str(torch.get_num_threads())
    capability = one(findings, "torch CPU capability in use")["value"]
    assert capability in ("NO AVX", "DEFAULT", "AVX2", "AVX512"), capability


def test_data_loader_fix_names_functions_that_exist():
    import detcoll.rng
    import detcoll.torch.rng as trng
    fix = one(local(), "DataLoader workers (a static note)")["fix"]
    for name in ("sample_keys", "uniform_", "normal_", "bernoulli_", "permutation", "Dropout",
                 "samples"):
        assert f"detcoll.torch.rng.{name}" in fix or name in fix
        assert hasattr(trng, name), name
    assert "detcoll.rng.Key.root().derive(" in fix and hasattr(detcoll.rng.Key, "derive")


def test_compare_groups_ranks_by_value():
    def rank_findings(threads, seed):
        return [audit_module.finding("torch-threads", "torch.get_num_threads()", threads, "ok",
                                     "w", "f"),
                audit_module.finding("python-hash-seed", "PYTHONHASHSEED", seed, "ok", "w", "f")]
    differ, details = compare([rank_findings(1, "0"), rank_findings(2, "0"),
                               rank_findings(2, "0"), rank_findings(1, None)])
    assert details == [
        {"source": "torch-threads", "setting": "torch.get_num_threads()",
         "values": [{"value": "1", "ranks": [0, 3]}, {"value": "2", "ranks": [1, 2]}]},
        {"source": "python-hash-seed", "setting": "PYTHONHASHSEED",
         "values": [{"value": "0", "ranks": [0, 1, 2]}, {"value": None, "ranks": [3]}]}]
    by_source = {f["source"]: f for f in differ}
    assert set(by_source) == {"ranks-differ/torch-threads", "ranks-differ/python-hash-seed"}
    assert by_source["ranks-differ/torch-threads"]["value"] == "1 on ranks 0,3; 2 on ranks 1,2"
    seeds = by_source["ranks-differ/python-hash-seed"]["value"]
    assert seeds == "0 on ranks 0,1,2; unset on rank 3"
    assert all(f["status"] == "risk" for f in differ)
    assert compare([rank_findings(1, "0")] * 3) == ([], [])


# ---- the command line ----

def child_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DETCOLL_", "HOROVOD_", "OMPI_COMM_WORLD"))}
    env.pop("PYTHONHASHSEED", None)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **extra)
    return env


def cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "detcoll.debug", "audit", *args],
                          capture_output=True, text=True, timeout=120, env=child_env(**env))


def test_json_is_one_object_with_every_finding():
    result = cli("--json", PYTHONHASHSEED="0")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["rank"], out["size"], out["ranks_differ"]) == (0, 1, [])
    assert len(out["findings"]) > 30 and all(set(f) == KEYS for f in out["findings"])
    assert one(out["findings"], "PYTHONHASHSEED")["value"] == "0"


def test_strict_exit_codes():
    risky = cli("--strict")  # PYTHONHASHSEED unset
    assert risky.returncode == 1, risky.stderr
    assert "risk    python-hash-seed" in risky.stdout
    assert cli().returncode == 0
    if not torch.cuda.is_available():  # on a GPU, torch's CUDA flags are risks in a new process
        clean = cli("--strict", PYTHONHASHSEED="0")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "0 risk" in clean.stdout
    assert cli("--bogus").returncode == 2


# ---- under mpirun ----

def mpirun(*contexts, **env):
    """contexts: (np, {VAR: value}) app contexts of one job, each running the audit with args."""
    command = [os.environ.get("DETCOLL_MPIEXEC", "mpirun"), "--oversubscribe"]
    command += ["-x", "PYTHONPATH"] if "PYTHONPATH" in os.environ else []
    for i, (np_, variables, args) in enumerate(contexts):
        command += ([":"] if i else []) + ["-np", str(np_), "env"]
        command += [f"{k}={v}" for k, v in variables.items()]
        command += [sys.executable, "-m", "detcoll.debug", "audit", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180,
                          env=child_env(**env))


def test_thread_counts_that_differ_between_ranks_are_a_risk_naming_the_ranks():
    result = mpirun((1, {"OMP_NUM_THREADS": 1}, ["--json"]),
                    (2, {"OMP_NUM_THREADS": 2}, ["--json"]), PYTHONHASHSEED="0")
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)  # rank 0 alone prints: one JSON object
    assert (out["rank"], out["size"]) == (0, 3)
    threads = one(out["findings"], "torch.get_num_threads()", "ranks-differ/torch-threads")
    assert threads["status"] == "risk"
    assert threads["value"] == "1 on rank 0; 2 on ranks 1,2"
    assert "the same value on every rank" in threads["fix"]
    details = {d["setting"]: d["values"] for d in out["ranks_differ"]}
    assert details == {
        "torch.get_num_threads()": [{"value": "1", "ranks": [0]}, {"value": "2", "ranks": [1, 2]}],
        "OMP_NUM_THREADS": [{"value": "1", "ranks": [0]}, {"value": "2", "ranks": [1, 2]}]}
    # Rank 0's own findings are there too, with its own value.
    assert one(out["findings"], "torch.get_num_threads()", "torch-threads")["value"] == "1"


def test_under_mpirun_strict_fails_on_a_difference_and_only_rank_0_prints():
    result = mpirun((1, {"OMP_NUM_THREADS": 1}, ["--strict"]),
                    (2, {"OMP_NUM_THREADS": 2}, ["--strict"]), PYTHONHASHSEED="0")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("STATUS  SOURCE") == 1
    assert "risk    ranks-differ/torch-threads" in result.stdout


def test_an_init_that_fails_is_reported_and_the_job_still_ends_cleanly():
    # detcoll refuses modes that differ between ranks at init: no comparison, but a finding.
    result = mpirun((1, {"DETCOLL_DETERMINISM": "native"}, ["--json"]),
                    (1, {"DETCOLL_DETERMINISM": "invariant"}, ["--json"]), PYTHONHASHSEED="0")
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    failed = one(out["findings"], "detcoll.torch.init()", "detcoll-init")
    assert failed["status"] == "risk"
    assert "native on rank 0" in failed["value"] and "invariant on rank 1" in failed["value"]


def test_ranks_that_agree_differ_in_nothing():
    result = mpirun((2, {"OMP_NUM_THREADS": 1}, ["--json"]), PYTHONHASHSEED="0")
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert out["size"] == 2 and out["ranks_differ"] == []
    assert not [f for f in out["findings"] if f["source"].startswith("ranks-differ/")]


def test_audit_from_python_after_the_scripts_own_init_reports_on_every_rank(tmp_path):
    command = [os.environ.get("DETCOLL_MPIEXEC", "mpirun"), "--oversubscribe", "-np", "3",
               sys.executable, DRIVER, str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180,
                            env=child_env(PYTHONHASHSEED="0", OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(3):
        with open(tmp_path / f"rank{rank}.json") as f:
            findings = json.load(f)
        own = one(findings, "torch.get_num_threads()", "torch-threads")
        assert own["value"] == ("2" if rank == 1 else "1")
        differ = [f for f in findings if f["source"].startswith("ranks-differ/")]
        assert [(f["source"], f["value"], f["status"]) for f in differ] == [
            ("ranks-differ/torch-threads", "1 on ranks 0,2; 2 on rank 1", "risk")]
