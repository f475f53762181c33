#!/usr/bin/env bash
# The long soak: 10^5 mixed calls at np 3 (tests/mpi/soak.cc) on a build made by scripts/setup.sh,
# with its time and memory. CALLS and NP override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
mpirun -np "${NP:-3}" --oversubscribe build/tests/detcoll_soak "${CALLS:-100000}"
