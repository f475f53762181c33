#!/usr/bin/env bash
# The training benchmark of the README: the demo's step time with detcoll's DistributedOptimizer
# (ordered and invariant) beside torch DistributedDataParallel over gloo, at np 2, in one job.
# Extra arguments go to tests/bench/train_bench.py (--hidden, --steps, --rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
mpirun -np 2 /usr/bin/python3 tests/bench/train_bench.py "$@"
