#!/usr/bin/env bash
# The allreduce benchmark swept over dtypes and modes, into one CSV, then drawn: np 2 (NP),
# float32, float64, float16 and bfloat16, ordered and invariant mode, 256 B to 16 MiB by factors
# of 4, sum; the rows go to $BUILD_DIR/bench/allreduce.csv (CSV; started afresh each sweep) and
# scripts/plot_bench.py draws them into docs/plots/ (PLOTS): allreduce_<mode>_sum_np<P>.png, a
# panel per dtype. REPEATS=N runs every configuration N times (the plot takes the medians);
# ITERS and WARMUP (10, 2) set -n and -w; extra arguments go to detcoll_allreduce_perf. One run
# takes 1.5 to 2 minutes on the 2-core development machine, most of it in the invariant mode's
# float64 and 16-bit paths (and their reference check on rank 0).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
csv=${CSV:-$build/bench/allreduce.csv}
plots=${PLOTS:-docs/plots}
repeats=${REPEATS:-1}
mkdir -p "$(dirname "$csv")"
rm -f "$csv"
start=$(date +%s)
for ((run = 1; run <= repeats; run++)); do
  for mode in ordered invariant; do
    for dtype in float double half bfloat16; do
      echo "=== sweep: run $run/$repeats, mode $mode, dtype $dtype"
      CSV=$csv BUILD_DIR=$build scripts/bench.sh -b 256 -e 16M -f 4 -n "${ITERS:-10}" \
        -w "${WARMUP:-2}" -d "$dtype" -m "$mode" "$@"
    done
  done
done
echo "=== sweep: $(($(wc -l <"$csv") - 1)) rows in $csv, $(($(date +%s) - start)) s"
/usr/bin/python3 scripts/plot_bench.py "$csv" "$plots"
