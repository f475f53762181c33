#!/usr/bin/env bash
# The main demo: scripts/train_demo.py, an MLP with per-sample dropout trained for 300 steps on
# synthetic data, through detcoll.torch's DistributedOptimizer.
# 1. Ordered mode at np 3, twice: the final weights' SHA-256 must agree.
# 2. Invariant mode, 4 micro-batches per step over 1, 2 and 4 ranks: the hashes must agree.
# 3. Native mode (MPI's allreduce) at np 3, twice: whether the hashes agree is reported.
# Extra arguments go to train_demo.py (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
unset DETCOLL_DETERMINISM
python=/usr/bin/python3
hash_of() { sed -n 's/^final weights sha256: //p'; }
run() {  # run NP MODE [args]: prints the demo's output, records its hash in $hash
  local np=$1 mode=$2
  shift 2
  echo "=== mpirun -np $np scripts/train_demo.py --mode $mode $*"
  local output
  output=$(mpirun -np "$np" --oversubscribe "$python" scripts/train_demo.py --mode "$mode" "$@")
  echo "$output"
  echo
  hash=$(echo "$output" | hash_of)
}
status=0
verdict() {  # verdict LABEL HASH...: identical or not
  local label=$1
  shift
  if [ -n "$1" ] && [ "$(printf '%s\n' "$@" | sort -u | wc -l)" = 1 ]; then
    echo "$label: identical ($1)"
  else
    echo "$label: DIFFER: $*"
    status=1
  fi
}
run 3 ordered "$@"; o1=$hash
run 3 ordered "$@"; o2=$hash
run 1 invariant --micro-batches 4 "$@"; i1=$hash
run 2 invariant --micro-batches 4 "$@"; i2=$hash
run 4 invariant --micro-batches 4 "$@"; i4=$hash
run 3 native "$@"; n1=$hash
run 3 native "$@"; n2=$hash
echo "=== final weights"
verdict "ordered, np 3, two runs" "$o1" "$o2"
verdict "invariant, 4 micro-batches at np 1, 2, 4" "$i1" "$i2" "$i4"
if [ "$n1" = "$n2" ]; then
  echo "native, np 3, two runs: identical this time (MPI promises nothing)"
else
  echo "native, np 3, two runs: differ ($n1 vs $n2): what DETCOLL_DETERMINISM fixes"
fi
exit $status
