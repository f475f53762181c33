#!/usr/bin/env bash
# Runs the whole test suite of a build made by scripts/setup.sh, as CI does (.ci/run):
#  1. CTest in build/: unit, mpirun at np 1-4, Python, install and layout tests;
#  2. scripts/sanitize.sh: the unit and mpirun tests built with AddressSanitizer and
#     UndefinedBehaviorSanitizer in build-asan/, the mpirun tests CI affords
#     (DETCOLL_SANITIZE_MPI=ci; =all for every one);
#  3. scripts/fuzz.sh: every fuzz target of tests/fuzz/ for 20 s (DETCOLL_FUZZ_SECONDS), in
#     build-fuzz/.
# Each part prints its summary; the run fails if any part does, after running them all. On the
# 2-core CI machine the setup takes about 5 minutes, parts 1, 2 and 3 about 10, 13 and 1. Part 1
# runs as many tests at once as there are cores (DETCOLL_TEST_JOBS): most of its time is spent
# in multi-process tests that wait on each other, not on the CPU.
#
#   scripts/test.sh                      # all three
#   scripts/test.sh -R Fold              # arguments: part 1 only, with them passed to ctest
#   DETCOLL_TEST_SANITIZE=0, DETCOLL_TEST_FUZZ=0   leave out part 2 or 3
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh

status=0
summary=()
part() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  "$@" || rc=$?
  summary+=("$name $(($(date +%s) - start)) s $([ $rc -eq 0 ] && echo ok || echo FAILED)")
  if [ $rc -ne 0 ]; then status=1; fi
}

jobs=${DETCOLL_TEST_JOBS:-$(nproc)}
part ctest bash -c 'cd build && ctest -j"$0" --output-on-failure --timeout 900 "$@"' "$jobs" "$@"
if (($# == 0)); then
  if [ "${DETCOLL_TEST_SANITIZE:-1}" != 0 ]; then
    part sanitize env DETCOLL_SANITIZE_MPI="${DETCOLL_SANITIZE_MPI:-ci}" scripts/sanitize.sh
  fi
  if [ "${DETCOLL_TEST_FUZZ:-1}" != 0 ]; then
    part fuzz env DETCOLL_FUZZ_SECONDS="${DETCOLL_FUZZ_SECONDS:-20}" scripts/fuzz.sh
  fi
fi
joined=$(printf '%s; ' "${summary[@]}")
echo "=== test: ${joined%; }"
exit $status
