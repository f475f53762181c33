#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the CMake build with CUDA, NCCL, cuDNN and the Python package
# (on an image without MPI, scripts/device_env.sh supplies the Open MPI unpacked under .device/),
# then the GPU tests of that build (detcoll_gpu_tests: the ops, the reduction kernels, the device
# pipeline, the random fills, NCCL at one rank, cuDNN, the fusion engine's device batches),
# detcoll.torch on CUDA tensors (tests/python/test_torch_devices.py at one rank over NCCL and at
# three ranks on the one GPU, staged through host memory), the gradient-set benchmark
# (scripts/torch_gpu_bench.py), the op families on CUDA (tests/python/test_torch_families_cuda.py)
# and their speed beside torch's CUDA kernels (scripts/torch_gpu_ops_bench.py). Appends what ran and what it measured, with the date, the device
# and the commit, to docs/gpu-results.md (or the path given); logs go to $LOGS (default: the
# build directory).
#   scripts/device_torch_check.sh [OUT.md]
# Exit status: 0 when the build, every test and the benchmark's bit checks passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/gpu-results.md}
build=${DETCOLL_GPU_CMAKE_BUILD:-build-gpu-cmake}
logs=${LOGS:-$build}
mkdir -p "$build" "$logs"
export PYTHONUNBUFFERED=1

DETCOLL_CMAKE_ARGS=()
if [ -d .device/mpi ]; then
  # shellcheck source=scripts/device_env.sh
  source scripts/device_env.sh
else
  # shellcheck source=scripts/mpi_env.sh
  source scripts/mpi_env.sh
  DETCOLL_CMAKE_ARGS=(-DPython_EXECUTABLE="$(command -v python3)")
fi
gtest=()
for dir in "${GTEST_SRC:-}" .device/googletest /usr/src/googletest; do
  if [ -n "$dir" ] && [ -f "$dir/googletest/src/gtest-all.cc" ]; then
    gtest=(-DDETCOLL_GTEST_SOURCE_DIR="$(cd "$dir" && pwd)")
    break
  fi
done

echo "configuring and building in $build"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${gtest[@]}" \
  "${DETCOLL_CMAKE_ARGS[@]}" && cmake --build "$build" --target detcoll _detcoll \
  detcoll_gpu_tests; } >"$logs/build.log" 2>&1; then
  tail -40 "$logs/build.log"
  echo "device_torch_check: the build failed" >&2
  exit 1
fi
grep -E "^-- detcoll:" "$logs/build.log"

# DETCOLL_GPU_TEST_FILTER: a googletest filter, e.g. to leave out what scripts/device_check.sh
# already ran on this commit.
"$build/tests/detcoll_gpu_tests" --gtest_filter="${DETCOLL_GPU_TEST_FILTER:-*}" \
  >"$logs/gpu_tests.log" 2>&1
tests_rc=$?
mpirun=(mpirun --oversubscribe)
command -v mpirun >/dev/null || mpirun=(orterun --oversubscribe)
py=("$(command -v python3)" -m pytest -q -p no:cacheprovider --color=no -rs
  tests/python/test_torch_devices.py)
export PYTHONPATH=$PWD/$build/python
timeout 600 "${mpirun[@]}" -np 1 -x PYTHONPATH "${py[@]}" >"$logs/torch_np1.log" 2>&1
np1_rc=$?
timeout 600 "${mpirun[@]}" -np 3 -x PYTHONPATH -x DETCOLL_GPU_TRANSPORT=mpi "${py[@]}" \
  >"$logs/torch_np3.log" 2>&1
np3_rc=$?
timeout 600 "${mpirun[@]}" -np 1 -x PYTHONPATH python3 scripts/torch_gpu_bench.py \
  >"$logs/bench.log" 2>&1
bench_rc=$?
grep -q "| NO |" "$logs/bench.log" && bench_rc=1
# The op families (no MPI): CUDA against the CPU's bits, and their speed beside torch's kernels.
timeout 600 python3 -m pytest -q -p no:cacheprovider --color=no -rs \
  tests/python/test_torch_families_cuda.py >"$logs/families.log" 2>&1
families_rc=$?
timeout 600 python3 scripts/torch_gpu_ops_bench.py >"$logs/ops_bench.log" 2>&1
ops_rc=$?
grep -q "| NO |" "$logs/ops_bench.log" && ops_rc=1

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=${DETCOLL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "unknown")}
summary() { grep -aE '(passed|failed|skipped|error)' "$1" | grep -aE ' in [0-9.]+s' | tail -3; }
{
  echo
  echo "## detcoll.torch on CUDA tensors: scripts/device_torch_check.sh"
  echo
  echo "Run on $(date -u +%Y-%m-%d), device: ${device:-unknown}; commit $commit (with the"
  echo "working tree's changes); torch $(python3 -c 'import torch; print(torch.__version__)')."
  echo
  echo "### detcoll_gpu_tests of the CMake build, filter '${DETCOLL_GPU_TEST_FILTER:-*}' (exit" \
    "status $tests_rc)"
  echo
  echo '```'
  grep -aE '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|tests? ran' "$logs/gpu_tests.log"
  echo '```'
  echo
  echo "### tests/python/test_torch_devices.py"
  echo
  echo "One rank over NCCL (exit status $np1_rc), three ranks on the GPU staged through host"
  echo "memory with DETCOLL_GPU_TRANSPORT=mpi (exit status $np3_rc); the last lines of pytest"
  echo "on every rank:"
  echo
  echo '```'
  summary "$logs/torch_np1.log"
  summary "$logs/torch_np3.log"
  echo '```'
  echo
  echo "### Gradient-set allreduce from CUDA tensors (exit status $bench_rc)"
  echo
  sed -n '/^device:/,$p' "$logs/bench.log"
  echo
  echo "### tests/python/test_torch_families_cuda.py (exit status $families_rc)"
  echo
  echo '```'
  summary "$logs/families.log"
  echo '```'
  echo
  echo "### The op families beside torch's CUDA kernels: scripts/torch_gpu_ops_bench.py (exit" \
    "status $ops_rc)"
  echo
  sed -n '/^device:/,$p' "$logs/ops_bench.log"
} >>"$out"
echo "appended to $out"
tail -30 "$out"
[ "$tests_rc" -eq 0 ] && [ "$np1_rc" -eq 0 ] && [ "$np3_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] \
  && [ "$families_rc" -eq 0 ] && [ "$ops_rc" -eq 0 ]
