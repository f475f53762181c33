#!/usr/bin/env bash
# Installs what detcoll needs from Debian's packages (when missing) and builds it into build/.
# CUDA, NCCL and cuDNN are used when found under /usr/local/cuda; the CPU path needs none of them.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang and libclang-rt-dev (libFuzzer's runtime): the fuzz targets of scripts/fuzz.sh;
# python3-matplotlib: the benchmark plots of scripts/plot_bench.py.
packages=(cmake make g++ openmpi-bin libopenmpi-dev libgtest-dev libmpfr-dev nlohmann-json3-dev
  libxxhash-dev xxhash python3-dev pybind11-dev python3-torch python3-numpy python3-pytest
  python3-matplotlib clang libclang-rt-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
