"""python3 -m detcoll.debug audit [--json] [--strict]: every known source of nondeterminism, its
state in this process and machine, and the fix. A finding is a dict: source (a short id),
setting (what was inspected), value (a string, None when unset), status, why and fix. "risk":
the bits can change between two runs of this job as it stands, or between its ranks; "info":
only when the job moves (machine, CPU, library, world size), or an explanation; "ok": nothing to
do. Under mpirun (OMPI_COMM_WORLD_SIZE > 1) the ranks' findings are gathered and each setting
whose value differs between ranks adds a risk, "ranks-differ/<source>", naming the ranks.
From Python: [f for f in detcoll.debug.audit.audit() if f["status"] == "risk"]."""

import argparse
import contextlib
import ctypes
import difflib
import hashlib
import json
import os
import pathlib
import platform
import re
import sys
import textwrap

import numpy
import torch

import detcoll
import detcoll.torch as hvd
from detcoll.torch._patch import PATCHABLE
from detcoll import _detcoll

OK, RISK, INFO = "ok", "risk", "info"
MODES = ("native", "ordered", "invariant")
SAME_MODE = "DETCOLL_DETERMINISM=ordered (or invariant, for world-size invariance)"
NONE = "none needed"
# The library's other variables (README, "Environment") and their effect on bits.
DETCOLL_VARS = dict.fromkeys(
    ("DETCOLL_STALL_CHECK_SECONDS", "DETCOLL_STALL_SHUTDOWN_SECONDS", "DETCOLL_LOG_LEVEL",
     "DETCOLL_TIMELINE", "DETCOLL_TRACE"), "a limit or an output; no effect on bits")
DETCOLL_VARS["DETCOLL_CYCLE_TIME"] = "which tensors share a fusion buffer: bits in native mode only"
DETCOLL_VARS["DETCOLL_GPU_TRANSPORT"] = "how device buffers travel: bits in native mode only"
DETCOLL_VARS["DETCOLL_INVARIANT_TRANSPORT"] = "how invariant sums travel: no effect on bits"
DETCOLL_VARS["DETCOLL_FAST_PATH"] = ("whether a repeated step skips the negotiation (it keeps the "
                                     "batches of the run it learned from): no effect on bits")
KNOWN_DETCOLL = sorted({*DETCOLL_VARS, "DETCOLL_DETERMINISM", "DETCOLL_FUSION_THRESHOLD",
                        "DETCOLL_SEED"})
NCCL_TUNING = ("NCCL_ALGO NCCL_PROTO NCCL_MIN_NCHANNELS NCCL_MAX_NCHANNELS NCCL_NTHREADS "
               "NCCL_BUFFSIZE NCCL_LL_THRESHOLD NCCL_TREE_THRESHOLD NCCL_LL128_THRESHOLD").split()
ISA_WHY = ("torch dispatches CPU kernels by the CPU's best ISA; its AVX2 and AVX-512 kernels "
           "contract multiply-adds into FMAs and split reductions unlike the baseline ones")
ISA_FIX = "ATEN_CPU_CAPABILITY=avx2 (or default) on every machine: a level all of them have"


def finding(source, setting, value, status, why, fix):
    return {"source": source, "setting": setting, "value": None if value is None else str(value),
            "status": status, "why": why, "fix": fix}


def env(name):
    """The variable's value; None when unset or empty (detcoll counts empty as unset)."""
    return os.environ.get(name) or None


def env_names(prefix):
    return sorted(n for n, v in os.environ.items() if n.startswith(prefix) and v)


class Context:
    """CUDA's presence, and the mode: before init get_mode() is set_mode's or "ordered"."""

    def __init__(self):
        self.cuda = torch.cuda.is_available()
        mode, api = env("DETCOLL_DETERMINISM"), detcoll.get_mode()
        self.mode_invalid = mode is not None and mode not in MODES
        known = hvd.is_initialized() or api != "ordered" or self.mode_invalid
        self.mode = api if known else mode or "ordered"


# ---- detcoll and the collective backends ----

def check_mode(ctx):
    name, value = "DETCOLL_DETERMINISM", env("DETCOLL_DETERMINISM")
    if not ctx.mode_invalid and ctx.mode != (value or "ordered"):
        value = f"{ctx.mode} (detcoll.set_mode; the variable: {value or 'unset'})"
    default = " (the default)" if value is None else ""
    yield finding("detcoll-mode", name, value, *(
        (RISK, "an unknown mode fails init on every rank", SAME_MODE) if ctx.mode_invalid else
        (RISK, "native is MPI's (or NCCL's) allreduce, whose summation order follows fusion "
         "layout, message size and world size, so runs drift", SAME_MODE)
        if ctx.mode == "native" else (OK, f"{ctx.mode} mode{default}: the same bits run after "
                                      "run and on every rank", NONE)))
    inv = ctx.mode == "invariant"
    yield finding("detcoll-world-size", "world-size invariance", ctx.mode, OK if inv else INFO,
                  "invariant mode rounds the exact sum once, at any world size" if inv else "the "
                  "rank-order fold (or MPI's order) changes with the number of ranks", NONE if
                  inv else "DETCOLL_DETERMINISM=invariant, if runs must match across world sizes")


def check_fusion(ctx):
    det, hor = env("DETCOLL_FUSION_THRESHOLD"), env("HOROVOD_FUSION_THRESHOLD")
    name = "HOROVOD_FUSION_THRESHOLD" if det is None and hor else "DETCOLL_FUSION_THRESHOLD"
    value, off = det or hor, (det or hor or "").strip() == "0"
    native = ctx.mode == "native"
    yield finding("fusion", name, value, *(
        (RISK, "Horovod's workaround: with fusion off the layout no longer follows timing, but "
         "MPI still orders each sum by message size and world size",
         f"{SAME_MODE}, which keeps fusion; then unset {name}") if native and off else
        (RISK, "native fusion packs tensors as they become ready: the layout, and each "
         "element's summation order, follows timing", SAME_MODE) if native else
        (INFO, f"fusion off costs bandwidth and buys nothing: in {ctx.mode} mode fusion never "
         "changes a bit", f"unset {name}") if off else
        (OK, f"in {ctx.mode} mode the fusion layout never changes a bit", NONE)))


def check_detcoll_env(ctx):
    seed = env("DETCOLL_SEED")
    yield finding("detcoll-seed", "DETCOLL_SEED", seed, OK if seed else INFO, "the root seed of "
                  "detcoll.rng's keys; unset, rank 0 draws one per run (detcoll.rng.seed(s) "
                  "fixes it from the script)", NONE if seed else "DETCOLL_SEED=<integer>")
    for name in env_names("DETCOLL_"):
        if name in DETCOLL_VARS or name.startswith("DETCOLL_DEBUG_"):
            yield finding("detcoll-env", name, env(name), INFO, DETCOLL_VARS.get(
                name, "the debugger's recorder; no effect on bits"), NONE)
        elif name not in KNOWN_DETCOLL:
            near = difflib.get_close_matches(name, KNOWN_DETCOLL, n=1, cutoff=0.8)
            yield finding("detcoll-env", name, env(name), RISK if near else INFO, "the library "
                          "does not read it" + (f": a misspelling of {near[0]}?" if near else ""),
                          f"rename it {near[0]}" if near else NONE)


def check_horovod_env(ctx):
    for name in env_names("HOROVOD_"):
        ours = "DETCOLL_" + name[len("HOROVOD_"):].replace("_TIME_SECONDS", "_SECONDS")
        if name in ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME") and env(ours):
            yield finding("horovod-env", name, env(name), INFO,
                          f"ignored: {ours} is set and takes precedence", f"unset {name}")
        elif name == "HOROVOD_CYCLE_TIME":
            yield finding("horovod-env", name, env(name), INFO, f"read as {ours}: " +
                          DETCOLL_VARS[ours], NONE)
        elif name == "HOROVOD_CACHE_CAPACITY":
            why = ("ignored: DETCOLL_FAST_PATH is set and takes precedence"
                   if env("DETCOLL_FAST_PATH") else
                   "read as DETCOLL_FAST_PATH (0: off, any other value: on): " +
                   DETCOLL_VARS["DETCOLL_FAST_PATH"])
            yield finding("horovod-env", name, env(name), INFO, why, NONE)
        elif name != "HOROVOD_FUSION_THRESHOLD":  # that one: check_fusion
            yield finding("horovod-env", name, env(name), INFO, "detcoll does not read it; in "
                          "ordered or invariant mode no Horovod setting is needed",
                          f"use {ours}" if ours in KNOWN_DETCOLL else f"unset {name}")


def check_backend_tuning(ctx):
    extra = [n for n in env_names("NCCL_") if n not in NCCL_TUNING]
    for name in NCCL_TUNING + env_names("OMPI_MCA_coll") + extra:
        if ctx.mode != "native":
            yield finding("backend-tuning", name, env(name), OK, f"in {ctx.mode} mode NCCL and "
                          "MPI only move bytes; detcoll reduces in its own fixed order", NONE)
            continue
        risk = env(name) and name not in extra  # a tuning variable, set
        yield finding("backend-tuning", name, env(name), RISK if risk else INFO,
                      "native mode's ncclAllReduce / MPI_Allreduce sum in an order these pick; "
                      "pinned, it still follows fusion layout and world size", SAME_MODE)


# ---- torch ----

def check_torch_determinism(ctx):
    cuda_risk = RISK if ctx.cuda else INFO
    values = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
              torch.backends.cudnn.deterministic)
    for value, (source, setting, good, bad, why, fix) in zip(values, (
            ("torch-deterministic", "torch.are_deterministic_algorithms_enabled()", True,
             cuda_risk, "off, CUDA kernels that accumulate with atomicAdd (index_add_, "
             "scatter_add_, embedding backward ...) sum in scheduling order",
             "torch.use_deterministic_algorithms(True) with detcoll.torch.patch(); on the CPU, "
             "detcoll.torch.ops"),
            ("cudnn-benchmark", "torch.backends.cudnn.benchmark", False, RISK, "cuDNN times "
             "candidate convolution algorithms and keeps the fastest: another run may pick "
             "another", "torch.backends.cudnn.benchmark = False"),
            ("cudnn-deterministic", "torch.backends.cudnn.deterministic", True, cuda_risk,
             "off, cuDNN may pick convolution kernels whose accumulation order varies",
             "torch.backends.cudnn.deterministic = True"))):
        yield finding(source, setting, value, OK if value == good else bad, why, fix)
    state = hvd.patch_state()
    replaced, absent = state["replaced"], set(state["absent"])
    unpatched = [name for name in PATCHABLE if f"aten::{name} on cuda" not in replaced
                 and f"aten::{name}" not in absent]
    yield finding("detcoll-patch", "detcoll.torch.patch_state()",
                  ", ".join(replaced) if replaced else "not patched",
                  OK if not unpatched else cuda_risk, "unpatched, torch's CUDA kernels of these "
                  "ops accumulate with atomicAdd (and raise under use_deterministic_algorithms): "
                  + ", ".join(unpatched), "detcoll.torch.patch() before the model runs")
    ws = env("CUBLAS_WORKSPACE_CONFIG")
    yield finding("cublas-workspace", "CUBLAS_WORKSPACE_CONFIG", ws,
                  OK if ws in (":4096:8", ":16:8") else cuda_risk, "without a fixed workspace "
                  "cuBLAS (CUDA 10.2+) may split a GEMM's reduction differently run to run",
                  "CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8)")


def check_threads(ctx):
    omp, n = env("OMP_NUM_THREADS"), torch.get_num_threads()
    yield finding("torch-threads", "torch.get_num_threads()", n,
                  OK if omp or env("MKL_NUM_THREADS") or n == 1 else INFO,
                  "torch's parallel CPU reductions split work by thread count, which defaults "
                  "to the core count: another machine or rank sums in another order",
                  "OMP_NUM_THREADS=N (mpirun -x) or torch.set_num_threads(N), one N everywhere")
    yield finding("torch-interop-threads", "torch.get_num_interop_threads()",
                  torch.get_num_interop_threads(), INFO,
                  "runs independent ops side by side; no op's result depends on it", NONE)
    yield finding("omp-threads", "OMP_NUM_THREADS", omp, OK if omp else INFO, "the thread count"
                  " torch's CPU kernels start with (unset: the core count)",
                  NONE if omp else "OMP_NUM_THREADS=N, the same on every machine")
    mkl = "uses" if torch.backends.mkl.is_available() else "does not use"
    yield finding("mkl-threads", "MKL_NUM_THREADS", env("MKL_NUM_THREADS"), INFO, "MKL splits "
                  f"work by thread count and CPU (this torch {mkl} MKL)",
                  "MKL_NUM_THREADS=N and MKL_CBWR=COMPATIBLE (or AVX2)")


def cpuinfo():
    """(model name, set of flags) of the first CPU in /proc/cpuinfo."""
    info = pathlib.Path("/proc/cpuinfo")
    text = info.read_text() if info.exists() else ""
    model, flags = (re.search(rf"^{k}\s*:\s*(.*)$", text, re.M) for k in ("model name", "flags"))
    return model and model.group(1).strip(), set(flags.group(1).split()) if flags else set()


def torch_cpu_capability():
    """get_cpu_capability() where it exists (not in torch 1.13), else what __config__ shows."""
    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    if get is not None:
        return get()
    found = re.search(r"CPU capability usage:\s*(\S.*)", torch.__config__.show())
    return found and found.group(1).strip()


def check_isa(ctx):
    forced = env("ATEN_CPU_CAPABILITY")
    yield finding("cpu-isa", "ATEN_CPU_CAPABILITY", forced, OK if forced else INFO, ISA_WHY,
                  NONE if forced else ISA_FIX)
    yield finding("cpu-isa", "torch CPU capability in use", torch_cpu_capability(),
                  INFO, ISA_WHY, ISA_FIX)
    have = " ".join(f for f in ("avx512f", "avx2", "fma") if f in cpuinfo()[1]) or "none"
    yield finding("cpu-isa", "CPU flags (avx512f, avx2, fma)", have, INFO, "what torch, oneDNN "
                  "and the BLAS dispatch on", ISA_FIX)
    name = "DNNL_MAX_CPU_ISA" if env("DNNL_MAX_CPU_ISA") else "ONEDNN_MAX_CPU_ISA"
    yield finding("cpu-isa", name, env(name), OK if env(name) else INFO, "oneDNN (torch's CPU "
                  "convolutions) generates kernels for the CPU's best ISA",
                  NONE if env(name) else "ONEDNN_MAX_CPU_ISA=AVX2 on every machine")


# ---- Python, data loading, TensorFlow, versions ----

def check_hash_seed(ctx):
    value = env("PYTHONHASHSEED")
    fixed = value is not None and value.isdigit()
    yield finding("python-hash-seed", "PYTHONHASHSEED", value, OK if fixed else RISK, "str "
                  "hashes are salted per process, so iterating a set of names changes order run "
                  "to run and rank to rank", NONE if fixed else "PYTHONHASHSEED=0 before Python "
                  "starts, on every rank (mpirun -x PYTHONHASHSEED=0)")


def check_data_loader(ctx):
    yield finding("dataloader-workers", "DataLoader workers (a static note)", None, INFO,
                  "each worker seeds torch's global generator with base_seed + worker_id, so a "
                  "sample's random augmentation follows which worker, and how many, loaded it",
                  "a key per sample by global index, detcoll.rng.Key.root().derive('augment', "
                  "epoch, index) (detcoll.torch.rng.sample_keys for a batch), filled by detcoll."
                  "torch.rng.uniform_/normal_/bernoulli_; order by detcoll.torch.rng.permutation;"
                  " dropout by detcoll.torch.rng.Dropout in detcoll.torch.rng.samples(keys)")


def check_tensorflow(ctx):
    for name in ("TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC"):
        yield finding("tensorflow", name, env(name), INFO, "TensorFlow's switch; detcoll and "
                      "torch do not read it", "in torch: torch.use_deterministic_algorithms("
                      "True); for the collectives: DETCOLL_DETERMINISM")
    flags = env("TF_XLA_FLAGS")
    on = re.search(r"--tf_xla_auto_jit=(?!0\b|-1\b)\S", flags or "") is not None  # 0, -1: off
    yield finding("tensorflow", "TF_XLA_FLAGS", flags, RISK if on else INFO, "XLA auto-jit "
                  "fuses ops and reorders their reductions by cluster; detcoll does not read it",
                  "remove --tf_xla_auto_jit from TF_XLA_FLAGS" if on else NONE)


def mpi_version():
    """MPI_Get_library_version (callable before MPI_Init) of the libmpi this process loaded."""
    try:
        with open("/proc/self/maps") as f:
            paths = [line.split()[-1] for line in f if "/libmpi.so" in line]
        buf, n = ctypes.create_string_buffer(8192), ctypes.c_int(0)
        ok = paths and not ctypes.CDLL(paths[0]).MPI_Get_library_version(buf, ctypes.byref(n))
        return buf.value.decode(errors="replace").splitlines()[0].strip() if ok else None
    except (OSError, AttributeError, IndexError):
        return None


def detcoll_build():
    """The package has no version number: the SHA-256 of its extension module names the build."""
    with open(_detcoll.__file__, "rb") as f:
        return "extension sha256 " + hashlib.sha256(f.read()).hexdigest()[:16]


def check_versions(ctx):
    libc = "-".join(platform.libc_ver())
    for setting, value in (("python", platform.python_version()),
                           ("platform", f"{platform.system()} {platform.machine()} {libc}"),
                           ("torch", torch.__version__), ("numpy", numpy.__version__),
                           ("detcoll", detcoll_build()), ("MPI library", mpi_version()),
                           ("CPU model", cpuinfo()[0])):
        yield finding("versions", setting, value, INFO, "kernels, libm and reduction orders "
                      "change with versions and machines", "the same versions on every machine")


CHECKS = (check_mode, check_fusion, check_detcoll_env, check_horovod_env, check_backend_tuning,
          check_torch_determinism, check_threads, check_isa, check_hash_seed, check_data_loader,
          check_tensorflow, check_versions)


# ---- across ranks ----

def compare(per_rank):
    """per_rank[r]: rank r's findings. Returns (findings, details): a risk per setting whose
    value differs between ranks, and [{"source", "setting", "values": [{"value", "ranks"}]}]."""
    table, out, details = {}, [], []
    for r, findings in enumerate(per_rank):
        for f in findings:
            table.setdefault((f["source"], f["setting"]), {})[r] = f
    for (source, setting), by_rank in table.items():
        groups = {}
        for r in range(len(per_rank)):
            groups.setdefault(by_rank[r]["value"] if r in by_rank else None, []).append(r)
        if len(groups) < 2:
            continue
        first = next(iter(by_rank.values()))
        fix = next((f["fix"] for f in by_rank.values() if f["fix"] != NONE), None)
        details.append({"source": source, "setting": setting,
                        "values": [{"value": v, "ranks": rs} for v, rs in groups.items()]})
        text = "; ".join(f"{'unset' if v is None else v} on rank{'s' if len(rs) > 1 else ''} "
                         + ",".join(map(str, rs)) for v, rs in groups.items())
        out.append(finding(f"ranks-differ/{source}", setting, text, RISK, "ranks that differ "
                           "here compute differently: " + first["why"],
                           "the same value on every rank" + (f": {fix}" if fix else "")))
    return out, details


def findings_here():
    """Every check's findings; a check that fails adds an "audit-error" finding (main exits 2)."""
    ctx, out = Context(), []
    for check in CHECKS:
        try:
            out += list(check(ctx))
        except Exception as e:  # noqa: BLE001 (gathered like the rest: no rank is left waiting)
            out.append(finding("audit-error", check.__name__, f"{type(e).__name__}: {e}", INFO,
                               "the check failed", "report it"))
    return out


def run_audit(compare_ranks=None):
    """(findings, details, rank, size, any_risk); any_risk covers every rank when compared."""
    rank, size = int(env("OMPI_COMM_WORLD_RANK") or 0), int(env("OMPI_COMM_WORLD_SIZE") or 1)
    if compare_ranks is None:
        compare_ranks = size > 1 or (hvd.is_initialized() and hvd.size() > 1)
    if compare_ranks and not hvd.is_initialized():
        try:
            hvd.init()
        except detcoll.Error as e:  # init fails on every rank alike
            with contextlib.suppress(detcoll.Error):
                _detcoll.finalize()  # MPI_Finalize, so that the job ends cleanly
            failed = finding("detcoll-init", "detcoll.torch.init()", e, RISK, "detcoll could not "
                             "start, so the ranks were not compared", "fix what the value names")
            return findings_here() + [failed], [], rank, size, True
    local = findings_here()
    if not compare_ranks:
        return local, [], rank, size, any(f["status"] == RISK for f in local)
    per_rank = hvd.allgather_object(local, name="detcoll.debug.audit")
    differ, details = compare(per_rank)
    any_risk = bool(differ) or any(f["status"] == RISK for fs in per_rank for f in fs)
    return local + differ, details, hvd.rank(), hvd.size(), any_risk


def audit(compare_ranks=None):
    """This process's findings and, under mpirun or with compare_ranks=True (init and gather are
    collective then), a risk per setting that differs between ranks; False: this process only."""
    return run_audit(compare_ranks)[0]


def format_table(findings, width=100):
    """A line per finding; the fix under those not ok, the why under the risks."""
    head = ("STATUS", "SOURCE", "SETTING", "VALUE")
    rows = [(f["status"], f["source"], f["setting"],
             "(unset)" if f["value"] is None else f["value"]) for f in findings]
    cols = [min(max(len(r[i]) for r in rows + [head]), cap) for i, cap in enumerate((6, 30, 44))]
    lines = []
    for row, f in zip([head] + rows, [None] + findings):
        lines.append("  ".join([c[:w].ljust(w) for c, w in zip(row, cols)] + [row[3]]).rstrip())
        status = f["status"] if f else OK
        for label in (["why"] if status == RISK else []) + (["fix"] if status != OK and
                                                               f["fix"] != NONE else []):
            lines += textwrap.wrap(f[label], width, initial_indent=f"{'':8}{label}: ",
                                   subsequent_indent=" " * 13)
    counts = [f"{sum(f['status'] == s for f in findings)} {s}" for s in (RISK, INFO, OK)]
    return "\n".join(lines + [", ".join(counts)])


def main(argv):
    parser = argparse.ArgumentParser(prog="python3 -m detcoll.debug audit",
                                     description="Sources of nondeterminism and their fixes.")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any rank's risk")
    args = parser.parse_args(argv)
    try:
        findings, details, rank, size, any_risk = run_audit()
    except Exception as e:  # noqa: BLE001 (an internal error: said, and exit status 2)
        print(f"detcoll.debug audit: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    failed = any(f["source"] == "audit-error" for f in findings)
    if rank == 0:
        print(json.dumps({"rank": rank, "size": size, "findings": findings,
                          "ranks_differ": details}, indent=1) if args.json
              else format_table(findings), flush=True)
    return 2 if failed else 1 if args.strict and any_risk else 0
