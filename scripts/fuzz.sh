#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz/ with clang (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer) into build-fuzz/, a project of its own beside the normal build, and
# runs each for a bounded time from its seed corpus (tests/fuzz/corpus/<target>/). Fails if any
# target crashes, hangs (one input over 10 s), runs out of memory or breaks a property it asserts.
#
#   scripts/fuzz.sh                          # every target, 60 s each
#   DETCOLL_FUZZ_SECONDS=600 scripts/fuzz.sh call_agreement
#   DETCOLL_FUZZ_JOBS=1 ...                  # targets at a time (default: one per core)
#
# Inputs that add coverage are kept in build-fuzz/corpus/<target>/ (later runs start from them);
# a failing input is written to build-fuzz/artifacts/<target>/. Once the bug is fixed, commit the
# input as tests/fuzz/corpus/<target>/crash-<what> so that the unit tests replay it
# (tests/unit/fuzz_corpus_test.cc). tests/fuzz/make_corpus.cc writes the seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${DETCOLL_FUZZ_SECONDS:-60}
jobs=${DETCOLL_FUZZ_JOBS:-$(nproc)}
build=${DETCOLL_FUZZ_BUILD:-build-fuzz}
targets=("$@")
if ((${#targets[@]} == 0)); then targets=(negotiation response_cache call_agreement seed_state); fi
start=$(date +%s)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ is missing (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# -O1 -g1: reports name file and line, and the build stays short.
cmake -S tests/fuzz -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
built=$(date +%s)

# One target: its log and exit status (libFuzzer's is non-zero on any failure) in files.
run() {
  local target=$1 rc=0
  mkdir -p "$build/corpus/$target" "$build/artifacts/$target"
  "$build/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$target/" \
    "$build/corpus/$target" "tests/fuzz/corpus/$target" >"$build/$target.log" 2>&1 || rc=$?
  echo "$rc" >"$build/$target.rc"
}

echo "=== fuzz: ${targets[*]}, ${seconds} s each, ${jobs} at a time"
for target in "${targets[@]}"; do
  rm -f "$build/$target.rc"
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run "$target" &
done
wait

failed=0
printf '%-16s %10s %8s %6s %7s %8s  %s\n' target runs exec/s cov ft corpus result
for target in "${targets[@]}"; do
  result=ok
  [ "$(cat "$build/$target.rc" 2>/dev/null)" = 0 ] || result=FAILED
  log="$build/$target.log"
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  [ -n "$done_line" ] || done_line=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$done_line")
  printf '%-16s %10s %8s %6s %7s %8s  %s\n' "$target" "${runs:-?}" "${speed:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$result"
  if [ "$result" != ok ]; then
    failed=1
    echo "--- $target: $log" >&2
    grep -E 'ERROR|runtime error|fuzz property violated|SUMMARY|Test unit written' "$log" >&2 || true
  fi
done
end=$(date +%s)
echo "=== fuzz: build $((built - start)) s, fuzzing $((end - built)) s: $([ $failed -eq 0 ] && echo clean || echo FAILED)"
exit $failed
