#!/usr/bin/env bash
# The allreduce demo (ResNet-50's gradients, C++).
# 1. Layouts, at np 3, run twice: averaged per tensor and fused, native and ordered mode. Ordered
#    checksums must agree across layouts, ranks and runs.
# 2. World sizes: 6 micro-batches per step spread over 1, 2 and 3 ranks, ordered and invariant
#    mode. Invariant checksums must agree across world sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
demo=build/scripts/detcoll_demo
ordered=()
invariant=()
for run in 1 2; do
  echo "=== run $run of 2: mpirun -np 3 $demo"
  output=$(mpirun -np 3 --oversubscribe "$demo" "$@")
  echo "$output"
  ordered+=("$(echo "$output" | sed -n 's/^ordered checksum: //p')")
  invariant+=("$(echo "$output" | sed -n 's/^invariant checksum .*: \([0-9a-f]*\) .*/\1/p')")
  echo
done
for np in 1 2; do
  echo "=== mpirun -np $np $demo --leaves-only"
  output=$(mpirun -np "$np" --oversubscribe "$demo" --leaves-only "$@")
  echo "$output"
  invariant+=("$(echo "$output" | sed -n 's/^invariant checksum .*: \([0-9a-f]*\) .*/\1/p')")
  echo
done
status=0
if [ -n "${ordered[0]}" ] && [ "${ordered[0]}" = "${ordered[1]}" ]; then
  echo "ordered checksums of the two np-3 runs: ${ordered[0]} = ${ordered[1]}: identical"
else
  echo "ordered checksums of the two np-3 runs differ: ${ordered[*]}"
  status=1
fi
if [ -n "${invariant[0]}" ] && [ "$(printf '%s\n' "${invariant[@]}" | sort -u | wc -l)" = 1 ]; then
  echo "invariant checksums at np 3, 3, 1, 2: ${invariant[*]}: identical"
else
  echo "invariant checksums at np 3, 3, 1, 2 differ: ${invariant[*]}"
  status=1
fi
exit $status
