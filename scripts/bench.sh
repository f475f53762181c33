#!/usr/bin/env bash
# The allreduce benchmark of the README: detcoll ordered beside MPI_Allreduce, np 2, float32,
# 8 B to 64 MiB. Extra arguments go to detcoll_allreduce_perf (e.g. -d half -o avg; later flags
# override the defaults, e.g. -b 256 -e 16M -f 4). CSV=path appends the rows to a CSV file as
# well (-C; scripts/plot_bench.py draws it); BUILD_DIR (build) holds the binary.
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
mpirun -np "$np" --oversubscribe "$build"/tests/detcoll_allreduce_perf -b 8 -e 64M -f 2 -n 20 -w 5 \
  "${csv[@]}" "$@"
