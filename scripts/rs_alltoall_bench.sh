#!/usr/bin/env bash
# The reduce-scatter and alltoall benchmark of the README: detcoll_enqueue + detcoll_wait
# (reduce-scatter ordered and invariant, alltoall) beside MPI_Reduce_scatter_block and
# MPI_Alltoall, np 2, float32, 64 KiB to 64 MiB per rank, alternating, medians of 5 repetitions.
# Extra arguments go to detcoll_rs_alltoall_perf (e.g. -m alltoall -f 2). CSV=path appends the
# rows to a CSV file as well (-C).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
# One rank per core: let MPI (ours and the peer alike) poll at full speed.
unset OMPI_MCA_mpi_yield_when_idle
np=${NP:-2}
build=${BUILD_DIR:-build}
csv=()
if [ -n "${CSV:-}" ]; then
  mkdir -p "$(dirname "$CSV")"
  csv=(-C "$CSV")
fi
mpirun -np "$np" --oversubscribe "$build"/tests/detcoll_rs_alltoall_perf -b 64K -e 64M -f 4 \
  -n 20 -w 3 -r 5 "${csv[@]}" "$@"
