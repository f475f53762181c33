#!/usr/bin/env bash
# The main demo: ResNet-50's gradients averaged over 3 ranks, per tensor and fused, in native
# and ordered mode, run twice. Ordered checksums must agree across layouts, ranks and runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
np=${NP:-3}
checksums=()
for run in 1 2; do
  echo "=== run $run of 2: mpirun -np $np build/scripts/detcoll_demo"
  output=$(mpirun -np "$np" --oversubscribe build/scripts/detcoll_demo "$@")
  echo "$output"
  checksums+=("$(echo "$output" | sed -n 's/^ordered checksum: //p')")
  echo
done
if [ -n "${checksums[0]}" ] && [ "${checksums[0]}" = "${checksums[1]}" ]; then
  echo "ordered checksums of the two runs: ${checksums[0]} = ${checksums[1]}: identical"
else
  echo "ordered checksums of the two runs differ: ${checksums[*]}"
  exit 1
fi
