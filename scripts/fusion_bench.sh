#!/usr/bin/env bash
# The fusion benchmark of the README: ResNet-50 and BERT-base steps through the fusion engine,
# fused (64 MiB) beside unfused (threshold 0) beside one flat MPI_Allreduce, np 2. Extra
# arguments go to detcoll_fusion_perf (e.g. -m invariant, -n 20, or model names). CSV=path
# appends the rows to a CSV file as well (-C).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
unset OMPI_MCA_mpi_yield_when_idle
np=${NP:-2}
csv=()
if [ -n "${CSV:-}" ]; then
  mkdir -p "$(dirname "$CSV")"
  csv=(-C "$CSV")
fi
mpirun -np "$np" --oversubscribe build/tests/detcoll_fusion_perf "${csv[@]}" "$@"
