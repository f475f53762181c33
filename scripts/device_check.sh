#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build detcoll's GPU code, run the GPU tests and the GPU
# benchmarks, and write what ran and what it measured, with the date and the device, to
# docs/gpu-results.md (or the path given). The build needs no MPI: the GPU ops, the allreduce
# kernels and pipeline, their tests and the benchmarks are compiled directly with nvcc, with
# googletest's sources from $GTEST_SRC, .device/googletest or /usr/src/googletest; cuDNN and NCCL
# from the CUDA toolkit or the nvidia-cudnn / nvidia-nccl Python packages (the tests that need
# them are left out, saying so, when neither has them).
#   scripts/device_check.sh [OUT.md]
# Exit status: 0 when every test passed (or skipped: no device) and both benchmarks exited 0
# (detcoll_reduce_gpu_perf exits 1 when a kernel's result differs from the CPU reference, and 0,
# saying so, without a device); non-zero otherwise.
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

# The directory of the Python package nvidia.<name> ($1) when it has include/<header> ($2) and
# lib/lib<name>.so*; nothing otherwise.
python_package() {
  local pkg
  # nvidia.<name> may be a namespace package (no __file__): its first directory.
  pkg=$(python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null) || return 0
  if [ -f "$pkg/include/$2" ] && compgen -G "$pkg/lib/lib$1.so*" >/dev/null; then echo "$pkg"; fi
}

# cuDNN and NCCL: the toolkit's, else the Python package's (linked by path, found at run time
# through an rpath). *_flags: link flags; *_include: the directory of the header.
cudnn_flags=() cudnn_include=""
if [ -f "$cuda/include/cudnn.h" ]; then
  cudnn_flags=(-lcudnn) cudnn_include=$cuda/include
else
  pkg=$(python_package cudnn cudnn.h)
  if [ -n "$pkg" ]; then
    cudnn_flags=("$(compgen -G "$pkg/lib/libcudnn.so*" | head -1)" -Xlinker -rpath="$pkg/lib")
    cudnn_include=$pkg/include
  fi
fi
cudnn_sources=() cudnn_note="cuDNN: not found, its tests not built"
if [ ${#cudnn_flags[@]} -gt 0 ]; then
  cudnn_sources=(kernels/ops/cudnn_select.cc tests/gpu/cudnn_gpu_test.cc)
  major=$(awk '/define CUDNN_MAJOR/ {print $3; exit}' "$cudnn_include/cudnn_version.h" \
    2>/dev/null || true)
  cudnn_note="cuDNN: ${major:-?}.x"
fi

nccl_flags=() nccl_include=""
if [ -f "$cuda/include/nccl.h" ]; then
  nccl_flags=(-lnccl) nccl_include=$cuda/include
else
  pkg=$(python_package nccl nccl.h)
  if [ -n "$pkg" ]; then
    nccl_flags=("$(compgen -G "$pkg/lib/libnccl.so*" | head -1)" -Xlinker -rpath="$pkg/lib")
    nccl_include=$pkg/include
  fi
fi
nccl_sources=() nccl_defs=() nccl_note="NCCL: not found, the tests over NCCL not built"
if [ ${#nccl_flags[@]} -gt 0 ]; then
  nccl_sources=(collective/transport/nccl_transport.cc)
  nccl_defs=(-DDETCOLL_GPU_TEST_NCCL=1)
  version=$(awk '/define NCCL_(MAJOR|MINOR|PATCH) / {printf "%s%s", sep, $3; sep = "."}' \
    "$nccl_include/nccl.h" 2>/dev/null || true)
  nccl_note="NCCL: ${version:-?} (headers in $nccl_include)"
fi

# The numeric flags of CMakeLists.txt: no FMA contraction, no fast math, denormals kept.
# shellcheck disable=SC2054  # the commas belong to -gencode's values
nvcc=("$cuda/bin/nvcc" -std=c++17 -O2 -x cu
  -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
  --fmad=false -ftz=false -prec-div=true -prec-sqrt=true -Xcompiler=-ffp-contract=off
  -diag-suppress=2810 -I. -I"$gtest/include" -I"$gtest")
core=(common/status.cc common/dtype.cc kernels/ops/segment.cc kernels/ops/scatter.cc
  kernels/ops/axis_sums.cc kernels/ops/resample.cc kernels/ops/op_checks.cc kernels/ops/taps.cc
  kernels/ops/writes.cc kernels/ops/cubic.cc kernels/ops/grid_sample.cc kernels/ops/ctc.cc
  kernels/ops/losses.cc kernels/ops/selection.cc kernels/ops/crop.cc kernels/ops/device.cu
  kernels/fold.cc kernels/fixed_point.cc kernels/host_reduce_kernels.cc kernels/reduce_device.cu
  kernels/convert16.cc kernels/fixed_point_formats.cc kernels/fixed_point_few.cc
  collective/device_allreduce.cu collective/allreduce.cc collective/comm_exchange.cc
  collective/ring_allreduce.cc collective/transport/communicator.cc
  collective/transport/record_board.cc collective/transport/thread_communicator.cc
  "${nccl_sources[@]}")
tests=(tests/support/reference.cc tests/gpu/ops_gpu_test.cc tests/gpu/ops_families_gpu_test.cc
  tests/gpu/reduce_gpu_test.cc
  tests/gpu/allreduce_gpu_test.cc "${cudnn_sources[@]}" "$gtest/src/gtest-all.cc"
  "$gtest/src/gtest_main.cc")
benches=(tests/bench/ops_gpu_perf.cu tests/bench/reduce_gpu_perf.cu)
# Host-only sources with runtime-dispatched vector clones (kernels/simd.h): the host compiler's,
# with CMakeLists.txt's numeric flags, since nvcc's front end does not take target_clones.
host_only=(kernels/convert16.cc kernels/fixed_point_formats.cc kernels/fixed_point_few.cc)
cxx=("${CXX:-c++}" -std=c++17 -O3 -ffp-contract=off -fno-fast-math -I.)

# CMake generates common/config.h; where a compiled source (or a header of the repository)
# includes it, write the same defines for this build: CUDA on, NCCL and cuDNN as found here.
if grep -rlq --include='*.h' --include='*.cuh' '"common/config.h"' common kernels collective ||
  grep -lq '"common/config.h"' "${core[@]}" "${tests[@]}" "${benches[@]}"; then
  mkdir -p "$build/include/common"
  cat >"$build/include/common/config.h" <<EOF
#pragma once

// Generated by scripts/device_check.sh for its nvcc build (CMake writes it from config.h.in).

#define DETCOLL_VERSION "device-check"
#define DETCOLL_WITH_CUDA 1
#define DETCOLL_WITH_NCCL $([ ${#nccl_flags[@]} -gt 0 ] && echo 1 || echo 0)
#define DETCOLL_WITH_CUDNN $([ ${#cudnn_flags[@]} -gt 0 ] && echo 1 || echo 0)
EOF
  nvcc+=(-I"$build/include")
fi

# Every source compiled once, in parallel (cuDNN's and NCCL's sources with their headers); a
# failure names its source, and every log with an error or a warning is shown.
echo "building the GPU tests and the benchmarks in $build"
mkdir -p "$build/obj"
rm -f "$build/failed"
jobs=$(nproc 2>/dev/null || echo 4)
object() { echo "$build/obj/$(echo "$1" | tr '/' '_').o"; }
compile() {
  local extra=()
  case " ${cudnn_sources[*]} " in *" $1 "*) extra=(-I"$cudnn_include") ;; esac
  case " ${nccl_sources[*]} " in *" $1 "*) extra=(-I"$nccl_include") ;; esac
  # googletest's registration variables are "declared but never referenced" for nvcc.
  case "$1" in tests/gpu/* | "$gtest"/*) extra+=(-diag-suppress=177) ;; esac
  local compiler=("${nvcc[@]}" "${extra[@]}" "${nccl_defs[@]}")
  case " ${host_only[*]} " in *" $1 "*) compiler=("${cxx[@]}" -I"$build/include") ;; esac
  if ! "${compiler[@]}" -c "$1" -o "$(object "$1")" >"$(object "$1").log" 2>&1; then
    echo "$1" >>"$build/failed"
  fi
}
sources=("${core[@]}" "${tests[@]}" "${benches[@]}")
for src in "${sources[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  compile "$src" &
done
wait
for src in "${sources[@]}"; do
  if grep -qE 'error|warning' "$(object "$src").log"; then cat "$(object "$src").log"; fi
done
if [ -f "$build/failed" ]; then
  echo "device_check: these sources did not compile:" >&2
  cat "$build/failed" >&2
  exit 1
fi
objects() { for src in "$@"; do object "$src"; done; }
mapfile -t core_objects < <(objects "${core[@]}")
mapfile -t test_objects < <(objects "${tests[@]}")
"${nvcc[@]:0:1}" -o "$build/detcoll_gpu_tests" "${core_objects[@]}" "${test_objects[@]}" \
  "${cudnn_flags[@]}" "${nccl_flags[@]}" -lpthread
"${nvcc[@]:0:1}" -o "$build/detcoll_ops_gpu_perf" "${core_objects[@]}" \
  "$(object tests/bench/ops_gpu_perf.cu)" "${nccl_flags[@]}"
"${nvcc[@]:0:1}" -o "$build/detcoll_reduce_gpu_perf" "${core_objects[@]}" \
  "$(object tests/bench/reduce_gpu_perf.cu)" "${nccl_flags[@]}"

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 ||
  echo "unknown")
set +e
"$build/detcoll_gpu_tests" 2>&1 | tee "$build/tests.log"
tests_rc=${PIPESTATUS[0]}
"$build/detcoll_ops_gpu_perf" -r 20 2>&1 | tee "$build/bench.log"
bench_rc=${PIPESTATUS[0]}
"$build/detcoll_reduce_gpu_perf" 2>&1 | tee "$build/reduce_bench.log"
reduce_rc=${PIPESTATUS[0]}
set -e

{
  echo "# GPU results"
  echo
  echo "Written by scripts/device_check.sh on $(date -u +%Y-%m-%d), device: $device;"
  echo "nvcc $("$cuda/bin/nvcc" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2);" \
    "$cudnn_note; $nccl_note."
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
  grep '^no CUDA device' "$build/bench.log" || true
  echo
  echo "## Allreduce kernels vs device-to-device copy (exit status $reduce_rc)"
  echo
  sed -n '/^device:/,$p' "$build/reduce_bench.log"
  grep '^no CUDA device' "$build/reduce_bench.log" || true
} >"$out"
echo "wrote $out"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$reduce_rc" -eq 0 ]
