#!/usr/bin/env bash
# The deterministic ops' benchmark of the README: detcoll.torch.ops on the CPU beside the PyTorch
# CPU op each replaces, same inputs, one run. Extra arguments go to tests/bench/ops_bench.py
# (--threads, --repeats, --updates).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
/usr/bin/python3 tests/bench/ops_bench.py "$@"
