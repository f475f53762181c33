#!/usr/bin/env bash
# The agreement benchmark of the README: a blocking 8-byte allreduce (the call agreement and
# nothing else) at np 2, 4, 8 and 16, oversubscribed: messages per rank per call and time per call,
# beside MPI_Allreduce. NPS="2 4" picks the world sizes; extra arguments go to
# detcoll_agreement_perf (e.g. -n 500 -r 7).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
header=()
for np in ${NPS:-2 4 8 16}; do
  mpirun -np "$np" --oversubscribe build/tests/detcoll_agreement_perf ${header[@]+"${header[@]}"} "$@"
  header=(--no-header)
done
