"""Bad schedules at np 3 (docs/design.md, "Failures"): a rank that stalls and comes back, one that
never comes back, one wedged in its own code, one stopped, one killed, and two threads of a rank
calling collectives; and at np 5, a blocking call whose agreement forwards records past the
rank that stopped. Each run is bounded in time; what every rank reports
(tests/mpi/failure_check.cc) is judged here: no rank ever gets a wrong result as success, every
waiting rank fails within the stall limit + 5 s naming the rank that stopped, and the job ends.
The agreements travel on the record board (every rank is on this node) unless a test passes
DETCOLL_AGREEMENT_TRANSPORT=messages.
"""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

CHECK = os.environ.get("DETCOLL_FAILURE_CHECK")
MPIEXEC = os.environ.get("DETCOLL_MPIEXEC") or shutil.which("mpirun")
LIMIT = 4.0  # DETCOLL_STALL_SHUTDOWN_SECONDS of every run
SLACK = 5.0  # the promise: every waiting rank fails within LIMIT + SLACK
LATE = 2  # the rank that goes away (the last of 3)

pytestmark = pytest.mark.skipif(not CHECK or not MPIEXEC,
                                reason="needs DETCOLL_FAILURE_CHECK and mpirun (run through ctest)")

EVENT = re.compile(r'@@ rank=(\d+) event=(\S+) t=([\d.]+)((?: (?!msg=|event=|rank=|t=)\w+=[^ "@\n]*)*)(?: msg="([^"]*)")?')


def run(scenario, *args, mpirun_flags=(), timeout=90, program=CHECK, np=3, agreement="auto"):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               DETCOLL_DETERMINISM="ordered", DETCOLL_STALL_SHUTDOWN_SECONDS=str(LIMIT),
               DETCOLL_STALL_CHECK_SECONDS="1", DETCOLL_AGREEMENT_TRANSPORT=agreement)
    cmd = [MPIEXEC, "-np", str(np), "--oversubscribe", *mpirun_flags]
    for name in ("DETCOLL_DETERMINISM", "DETCOLL_STALL_SHUTDOWN_SECONDS",
                 "DETCOLL_STALL_CHECK_SECONDS", "DETCOLL_AGREEMENT_TRANSPORT"):
        cmd += ["-x", name]
    cmd += ["-x", "PYTHONPATH"] if "PYTHONPATH" in env else []
    cmd += ([program] if program else []) + [scenario, *map(str, args)]
    begin = time.time()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{scenario}: the job did not end within {timeout} s (a hang)\n"
                    f"{e.stdout}\n{e.stderr}")
    end = time.time()
    output = done.stdout + done.stderr
    events = []
    for m in EVENT.finditer(output):
        fields = dict(f.split("=", 1) for f in m.group(4).split())
        events.append(dict(rank=int(m.group(1)), event=m.group(2), t=float(m.group(3)),
                           msg=m.group(5) or "", **fields))
    return events, begin, end, output


def calls(events, rank=None, **match):
    return [e for e in events if e["event"] == "call" and (rank is None or e["rank"] == rank)
            and all(e.get(k) == v for k, v in match.items())]


def expect_nothing_wrong(events, output):
    wrong = [e for e in events if e["event"] == "WRONG"]
    assert not wrong, f"wrong results returned as success: {wrong}\n{output}"
    for e in calls(events):
        assert e["status"] in ("SUCCESS", "TIMEOUT"), f"unexpected status: {e}\n{output}"


def expect_failed_naming_late(e, output):
    assert e["status"] == "TIMEOUT", f"{e}\n{output}"
    assert f"rank {LATE}" in e["msg"], f"the message does not name rank {LATE}: {e}"
    assert float(e["elapsed"]) <= LIMIT + SLACK, f"failed after {e['elapsed']} s: {e}"


def test_stall_then_resume_never_pairs_steps():
    events, _, _, output = run("stall_resume", 10)
    expect_nothing_wrong(events, output)
    for rank in range(3):
        steps = {int(e["step"]): e for e in calls(events, rank) if e["step"] != "end"}
        assert set(range(5)) <= set(steps), f"rank {rank} did not report steps 0-4\n{output}"
        for s in range(5):
            assert steps[s]["status"] == "SUCCESS", f"rank {rank} step {s}: {steps[s]}"
        # The stall stops every engine for good: no step after it succeeds anywhere, the late
        # rank's included, so its step 5 cannot meet the others' step 6.
        later = [e for s, e in steps.items() if s >= 5]
        assert later, f"rank {rank} reported nothing after the stall\n{output}"
        for e in later:
            assert e["status"] == "TIMEOUT", f"rank {rank}: success after the stall: {e}"
            assert "'grad'" in e["msg"] and f"rank {LATE}" in e["msg"], e
        if rank != LATE:
            expect_failed_naming_late(steps[5], output)
    # Blocking calls still work among ranks that all answer.
    ends = calls(events, step="end")
    assert sorted(e["rank"] for e in ends) == [0, 1, 2], output
    assert all(e["status"] == "SUCCESS" for e in ends), ends


def test_exit_after_a_stall_timeout_ends_the_job():
    events, _, end, output = run("stall_exit")
    expect_nothing_wrong(events, output)
    for rank in (0, 1):
        [step5] = calls(events, rank, step="5")
        expect_failed_naming_late(step5, output)
    stall_began = min(float(e["t"]) - float(e["elapsed"]) for e in calls(events, step="5"))
    # The late rank sleeps an hour: the job ends only because the others exit.
    assert end - stall_began <= LIMIT + SLACK, (
        f"the job ended {end - stall_began:.1f} s after the stall began\n{output}")


@pytest.mark.parametrize("names", ["equal", "missing"])
def test_two_threads_never_cross_data(names):
    calls_per_thread = 5000
    events, _, _, output = run("threads", calls_per_thread, names)
    expect_nothing_wrong(events, output)
    summary = {(e["rank"], int(e["thread"])): e for e in events if e["event"] == "threads"}
    assert len(summary) == 6, output
    for rank in range(3):
        first, second = summary[(rank, 0)], summary[(rank, 1)]
        assert int(first["wrong"]) == 0 and int(second["wrong"]) == 0
        # The init thread's blocking calls all run and are right; the other thread's are refused,
        # and its named asynchronous requests all run and are right.
        assert int(first["ok"]) == calls_per_thread, first
        assert int(second["refused"]) == calls_per_thread, second
        assert int(second["async_ok"]) == calls_per_thread, second
    refusals = [e for e in events if e["event"] == "refused"]
    assert sorted(e["rank"] for e in refusals) == [0, 1, 2], output
    for e in refusals:
        assert e["status"] == "INVALID_ARGUMENT", e
        assert "thread other than the one that called detcoll_init" in e["msg"], e


@pytest.mark.parametrize("how,expected,agreement", [
    ("wedged_blocking", ["blocking"], "auto"),
    ("wedged_engine", ["async"], "auto"),
    ("stopped", ["async", "blocking"], "auto"),
    ("stopped", ["async", "blocking"], "messages"),
    ("killed", ["async", "blocking"], "auto"),
])
def test_survivors_fail_naming_the_rank_that_stopped(how, expected, agreement):
    # A killed rank would end the job at once; --enable-recovery keeps mpirun (Open MPI 4) and the
    # survivors alive, as after a failure the MPI survives.
    flags = ("--enable-recovery",) if how == "killed" else ()
    events, begin, end, output = run(how, mpirun_flags=flags, agreement=agreement)
    expect_nothing_wrong(events, output)
    for rank in (0, 1):
        got = {e["call"]: e for e in calls(events, rank) if e["call"] != "before"}
        assert sorted(got) == sorted(expected), f"rank {rank}: {sorted(got)}\n{output}"
        for e in got.values():
            expect_failed_naming_late(e, output)
        if "async" in got and "blocking" in got:
            # The engine found the rank silent first: the blocking call fails at once instead of
            # waiting the limit again.
            assert float(got["blocking"]["elapsed"]) < 1.0, got["blocking"]
    # Each call waits at most the limit, and the survivors then exit: the job ends.
    assert end - begin <= len(expected) * (LIMIT + SLACK) + 20, output


@pytest.mark.parametrize("agreement", ["messages", "auto"])
def test_a_forwarding_agreement_names_the_rank_that_stopped(agreement):
    # From four ranks on, the call agreement as messages forwards records (docs/design.md,
    # "Agreement"): rank 1 waits for rank 3's message, which rank 3 sends once it has rank 4's.
    # Every survivor must still name rank 4, not a neighbour that was waiting for it; on the record
    # board (auto, one node) every rank waits for rank 4's record itself.
    np = 5
    events, _, _, output = run("wedged_blocking", np=np, agreement=agreement)
    expect_nothing_wrong(events, output)
    for rank in range(np - 1):
        [e] = calls(events, rank, call="blocking")
        assert e["status"] == "TIMEOUT", f"{e}\n{output}"
        assert f"rank {np - 1} stopped answering" in e["msg"], f"rank {rank}: {e}"
        assert float(e["elapsed"]) <= LIMIT + SLACK, f"failed after {e['elapsed']} s: {e}"


PYTHON_STALL = """
import sys, time, torch
import detcoll, detcoll.torch as hvd
hvd.init()
r = hvd.rank()
t = torch.arange(1000, dtype=torch.float32) * 0.37 + r
hvd.allreduce(t, name="warm")
if r == 2:
    time.sleep(3600)  # never comes back
began = time.time()
try:
    hvd.allreduce(t, name="grad")
    print(f"@@ rank={r} event=call t={time.time()} call=python status=SUCCESS elapsed={time.time() - began}")
except detcoll.TimeoutError as e:
    msg = str(e).replace('"', "'")
    print(f'@@ rank={r} event=call t={time.time()} call=python status=TIMEOUT elapsed={time.time() - began} msg="{msg}"')
sys.stdout.flush()
print(f"@@ rank={r} event=finalizing t={time.time()}", flush=True)
# The interpreter exits here: detcoll.torch's exit hook finalizes.
"""


def test_python_exit_hook_does_not_wait_for_a_stalled_rank(tmp_path):
    package = os.path.join(os.environ.get("PYTHONPATH", ""), "detcoll", "torch")
    if not os.path.isdir(package):
        pytest.skip("this build has no Python package (a sanitizer build)")
    script = tmp_path / "stall.py"
    script.write_text(PYTHON_STALL)
    events, _, end, output = run(sys.executable, str(script), program=None)
    for rank in (0, 1):
        [e] = calls(events, rank, call="python")
        expect_failed_naming_late(e, output)
    starts = [e for e in events if e["event"] == "finalizing"]
    assert sorted(e["rank"] for e in starts) == [0, 1], output
    waited = end - min(e["t"] for e in starts)
    assert waited <= SLACK, f"the job ended {waited:.1f} s after the scripts ended\n{output}"


def test_finalize_does_not_wait_for_a_stopped_rank():
    # The engine's last negotiation gives up on the stopped rank; MPI_Finalize, which would wait
    # for it, is skipped.
    events, _, end, output = run("stopped_finalize")
    expect_nothing_wrong(events, output)
    starts = [e for e in events if e["event"] == "finalizing"]
    assert sorted(e["rank"] for e in starts) == [0, 1], output
    waited = end - min(e["t"] for e in starts)
    assert waited <= LIMIT + SLACK, f"the job ended {waited:.1f} s after finalize began\n{output}"
