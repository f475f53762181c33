#!/usr/bin/env bash
# Builds the unit and mpirun test suites with AddressSanitizer and UndefinedBehaviorSanitizer (gcc,
# CUDA and Python off) into build-asan/ and runs them (CTest labels unit and mpi). Any sanitizer
# report fails the run: ASan stops a process at its first error, UBSan too
# (-fno-sanitize-recover=undefined), LeakSanitizer makes a leaking process exit non-zero, and CTest
# fails every test whose process did.
#
# Leaks: the unit tests run with LeakSanitizer. The mpirun tests run without it by default: every
# leak they report is memory Open MPI allocates for the life of the process and never frees (in
# MPI_Init_thread and MPI_Finalize, its progress threads, its components' constructors), and with
# ASan's fast unwinder those stacks end in Open MPI's plugins, unloaded by then, so that no
# suppression can tell them from detcoll's. DETCOLL_SANITIZE_MPI_LEAKS=1 runs them with
# LeakSanitizer, full stacks (slower) and tests/sanitize/lsan.supp, which suppresses exactly those.
#
# DETCOLL_SANITIZE_MPI chooses the mpirun tests: "all" (the default), or "ci", what the CI's time
# affords (scripts/test.sh): mpi.collectives at np 3 only (np 1, 2 and 4 run the same cases at
# other world sizes, which the unit tests cover with ranks as threads) and without its two longest
# cases (FusionMpiTest.ShuffledResNet50*, Invariant.SeveralPipelineRounds*: more data through code
# the other cases run), no soak, no mpi.invariant.mpi_transport (mpi.collectives' invariant
# cases again, over the MPI transport), no mpi.fusion.np3.* (the asynchronous C API's cases of
# mpi.fusion.np4.* under another threshold and cycle time); every other mpirun test.
#
#   scripts/sanitize.sh                 # build and run
#   DETCOLL_SANITIZE_BUILD=dir ...      # another build folder
#   extra arguments go to both ctest runs (e.g. -R Fold)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/mpi_env.sh
build=${DETCOLL_SANITIZE_BUILD:-build-asan}
jobs=$(nproc)
start=$(date +%s)

sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# -O1 -g1: reports name file and line, and the build stays short.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS="$sanitizers" -DCMAKE_CXX_FLAGS="$sanitizers" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DDETCOLL_ENABLE_CUDA=OFF -DDETCOLL_BUILD_PYTHON=OFF "${launcher[@]}" >/dev/null
# The executables the unit and mpirun tests run, no benchmark or demo: the unit test binary and
# every program of the build that an mpirun test's command or environment names.
targets=(detcoll_unit_tests)
build_dir=$(cd "$build" && pwd)
known=$(cmake --build "$build" --target help | sed -n 's/^\.\.\. \([A-Za-z0-9_]*\).*/\1/p')
for program in $(ctest --test-dir "$build" -N -V -L '^(unit|mpi)$' |
  grep -oE "$build_dir/[^ \";]*" | xargs -rn1 basename | sort -u); do
  if grep -qx "$program" <<<"$known"; then targets+=("$program"); fi
done
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
built=$(date +%s)

asan="abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mpi_asan="$asan:detect_leaks=0"
if [ "${DETCOLL_SANITIZE_MPI_LEAKS:-0}" = 1 ]; then
  mpi_asan="$asan:detect_leaks=1:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0"
fi

mpi_select=()
mpi_filter=()
case "${DETCOLL_SANITIZE_MPI:-all}" in
  all) ;;
  ci)
    mpi_select=(-E '^mpi\.(collectives\.np[124]|soak\..*|invariant\.mpi_transport\..*|fusion\.np3\..*)$')
    mpi_filter=(GTEST_FILTER='-FusionMpiTest.ShuffledResNet50*:Invariant.SeveralPipelineRounds*')
    ;;
  *)
    echo "sanitize: DETCOLL_SANITIZE_MPI is all or ci, not '$DETCOLL_SANITIZE_MPI'" >&2
    exit 2
    ;;
esac

status=0
cd "$build"
echo "=== sanitize: unit tests"
ASAN_OPTIONS="$asan:detect_leaks=1" ctest -L '^unit$' -j"$jobs" --timeout 900 --output-on-failure "$@" ||
  status=1
echo "=== sanitize: mpirun tests"
env ASAN_OPTIONS="$mpi_asan" "${mpi_filter[@]}" ctest -L '^mpi$' "${mpi_select[@]}" --timeout 900 \
  --output-on-failure "$@" || status=1
end=$(date +%s)
echo "=== sanitize: build $((built - start)) s, tests $((end - built)) s: $([ $status -eq 0 ] && echo clean || echo FAILED)"
exit $status
