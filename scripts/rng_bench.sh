#!/usr/bin/env bash
# The seed benchmark of the README: detcoll's random fills beside std::mt19937 and the <random>
# distributions, one core each, in one run. Extra arguments go to detcoll_rng_perf (-n, -r, -t).
set -euo pipefail
cd "$(dirname "$0")/.."
build/tests/detcoll_rng_perf "$@"
