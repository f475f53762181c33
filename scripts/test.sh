#!/usr/bin/env bash
# Runs the whole test suite (unit, mpirun at np 1-4) of a build made by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
