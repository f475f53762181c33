#!/usr/bin/env bash
# The debugger's demo (README, "Finding why two runs differ"): scripts/debug_demo_train.py holds
# one run-dependent op (demo::atomic_index_add, an emulated atomicAdd scatter) in an otherwise
# reproducible ordered-mode training at np 3.
# 1. The script runs twice, recorded with its aten ops (DETCOLL_DEBUG_RECORD, the script itself
#    unchanged); `python3 -m detcoll.debug diff` must name that op and its call site.
# 2. With --fixed (torch's index_add), two recorded runs must agree.
# Usage: scripts/debug_demo.sh [DIR]  (the traces go to DIR, a temporary directory by default,
# kept for a look with python3 -m detcoll.debug diff)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
export DETCOLL_DETERMINISM=ordered
python=/usr/bin/python3
dir=${1:-$(mktemp -d)}
record() {  # record NAME [args]: one recorded run at np 3
  local name=$1
  shift
  echo "=== DETCOLL_DEBUG_RECORD=$dir/$name mpirun -np 3 scripts/debug_demo_train.py $*"
  DETCOLL_DEBUG_RECORD="$dir/$name" DETCOLL_DEBUG_RECORD_OPS=1 \
    mpirun -np 3 --oversubscribe -x DETCOLL_DEBUG_RECORD -x DETCOLL_DEBUG_RECORD_OPS \
    -x DETCOLL_DETERMINISM -x PYTHONPATH "$python" scripts/debug_demo_train.py "$@"
}
diff_runs() {  # diff_runs A B: prints the diff, sets $rc to its exit status (0 agree, 1 differ)
  echo "=== python3 -m detcoll.debug diff $dir/$1 $dir/$2"
  rc=0
  "$python" -m detcoll.debug diff "$dir/$1" "$dir/$2" | tee "$dir/$1-$2.diff" || rc=$?
  echo
}
status=0

record planted-1
record planted-2
diff_runs planted-1 planted-2
# The line after "root cause" names the record: it must be the planted op, at its call site.
root=$(sed -n '/^root cause/{n;p;q}' "$dir/planted-1-planted-2.diff")
if [ "$rc" = 1 ] && [[ "$root" == *"op demo.atomic_index_add"* ]] &&
  [[ "$root" =~ debug_demo_train\.py:[0-9]+\ \(forward\) ]]; then
  echo "planted op: named as the root cause, with its call site"
else
  echo "planted op: NOT named (diff exit status $rc)"
  status=1
fi
echo

record fixed-1 --fixed
record fixed-2 --fixed
diff_runs fixed-1 fixed-2
if [ "$rc" = 0 ]; then
  echo "without it: the runs agree"
else
  echo "without it: the runs DIFFER (diff exit status $rc)"
  status=1
fi
echo "traces: $dir"
exit $status
