#!/usr/bin/env bash
# install_test.sh BUILD_DIR WORK_DIR: installs BUILD_DIR into WORK_DIR/prefix, builds the consumer
# project against it and runs it on 2 ranks.
set -euo pipefail
build=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/detcoll.h"
cmake -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
mpirun -np 2 --oversubscribe "$work/consumer/consumer"
