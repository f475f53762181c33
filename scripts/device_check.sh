#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build detcoll's GPU code, run the GPU tests and the GPU
# benchmark, and write what ran and what it measured, with the date and the device, to
# docs/gpu-results.md (or the path given). The build needs no MPI: the GPU ops, their tests and
# the benchmark are compiled directly with nvcc, with googletest's sources from $GTEST_SRC,
# .device/googletest or /usr/src/googletest, and cuDNN from the CUDA toolkit or the nvidia-cudnn
# Python package (its tests are left out, saying so, when neither has it).
#   scripts/device_check.sh [OUT.md]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/gpu-results.md}
build=${DETCOLL_GPU_BUILD:-build-gpu}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$build" "$(dirname "$out")"

gtest=""
for dir in "${GTEST_SRC:-}" .device/googletest /usr/src/googletest; do
  if [ -n "$dir" ] && [ -f "$dir/googletest/src/gtest-all.cc" ]; then gtest=$dir/googletest; break; fi
done
[ -n "$gtest" ] || { echo "device_check: no googletest sources (set GTEST_SRC)" >&2; exit 2; }

cudnn_flags=() cudnn_sources=() cudnn_note="cuDNN: not found, its tests not built"
if [ -f "$cuda/include/cudnn.h" ]; then
  cudnn_flags=(-lcudnn)
else
  pkg=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' \
        2>/dev/null || true)
  if [ -n "$pkg" ] && [ -f "$pkg/include/cudnn.h" ]; then
    lib=$(ls "$pkg"/lib/libcudnn.so* | head -1)
    cudnn_flags=(-I"$pkg/include" "$lib" -Xlinker -rpath="$pkg/lib")
  fi
fi
if [ ${#cudnn_flags[@]} -gt 0 ]; then
  cudnn_sources=(kernels/ops/cudnn_select.cc tests/gpu/cudnn_gpu_test.cc)
  major=$(cat "$cuda/include/cudnn_version.h" "${pkg:-/nonexistent}/include/cudnn_version.h" \
    2>/dev/null | awk '/define CUDNN_MAJOR/ {print $3; exit}' || true)
  cudnn_note="cuDNN: ${major:-?}.x"
fi

# The numeric flags of CMakeLists.txt: no FMA contraction, no fast math, denormals kept.
nvcc=("$cuda/bin/nvcc" -std=c++17 -O2 -x cu
  -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
  --fmad=false -ftz=false -prec-div=true -prec-sqrt=true -Xcompiler=-ffp-contract=off
  -diag-suppress=2810 -I. -I"$gtest/include" -I"$gtest")
core=(common/status.cc common/dtype.cc kernels/ops/segment.cc kernels/ops/scatter.cc
  kernels/ops/reduce.cc kernels/ops/resample.cc kernels/ops/op_checks.cc kernels/ops/device.cu)

echo "building the GPU tests and the benchmark in $build"
"${nvcc[@]}" -o "$build/detcoll_ops_gpu_tests" "${core[@]}" tests/support/reference.cc \
  tests/gpu/ops_gpu_test.cc "${cudnn_sources[@]}" "$gtest/src/gtest-all.cc" \
  "$gtest/src/gtest_main.cc" "${cudnn_flags[@]}" -lpthread
"${nvcc[@]}" -o "$build/detcoll_ops_gpu_perf" "${core[@]}" tests/bench/ops_gpu_perf.cu

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 ||
  echo "unknown")
set +e
"$build/detcoll_ops_gpu_tests" 2>&1 | tee "$build/tests.log"
tests_rc=${PIPESTATUS[0]}
"$build/detcoll_ops_gpu_perf" -r 20 2>&1 | tee "$build/bench.log"
bench_rc=${PIPESTATUS[0]}
set -e

{
  echo "# GPU results"
  echo
  echo "Written by scripts/device_check.sh on $(date -u +%Y-%m-%d), device: $device;"
  echo "nvcc $("$cuda/bin/nvcc" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2); $cudnn_note."
  echo
  echo "## Tests (exit status $tests_rc)"
  echo
  echo '```'
  grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|tests? ran' "$build/tests.log" || true
  echo '```'
  echo
  echo "## Deterministic ops vs atomicAdd (exit status $bench_rc)"
  echo
  sed -n '/^device:/,$p' "$build/bench.log"
} >"$out"
echo "wrote $out"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
