# Sourced on a GPU machine whose image has no MPI (the device machines of docs/gpu-results.md):
# puts the Open MPI unpacked under .device/mpi (dpkg -x of Debian's openmpi-bin, libopenmpi3,
# libopenmpi-dev and their libraries) on PATH and the loader's path, relocated with OPAL_PREFIX,
# and sets DETCOLL_CMAKE_ARGS for a CMake build there: that MPI, the python3 on PATH (the one
# with torch), pybind11's CMake files, and NCCL and cuDNN from the toolkit or the nvidia-* Python
# packages, xxHash's header from .device/xxhash, MPFR from .device/mpfr (the tests). Also sets
# what mpirun needs as root (scripts/mpi_env.sh).
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mpi=$repo/.device/mpi/usr
lib=$mpi/lib/x86_64-linux-gnu
export OPAL_PREFIX=$mpi
export PMIX_INSTALL_PREFIX=$lib/pmix2
export PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix PMIX_MCA_pcompress_base_silence_warning=1
export PATH=$mpi/bin:$PATH
export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=scripts/mpi_env.sh
source "$repo/scripts/mpi_env.sh"

# nvidia.<name>'s directory when that Python package has include/<header>; nothing otherwise.
_detcoll_nvidia_package() {
  python3 - "$1" "$2" <<'PY' 2>/dev/null
import importlib, os, sys
try:
    mod = importlib.import_module("nvidia." + sys.argv[1])
except ImportError:
    sys.exit(0)
for base in list(getattr(mod, "__path__", [])) + [os.path.dirname(mod.__file__ or "")]:
    if base and os.path.exists(os.path.join(base, "include", sys.argv[2])):
        print(base)
        break
PY
}
DETCOLL_CMAKE_ARGS=(-DMPI_C_COMPILER="$mpi/bin/mpicc.openmpi"
  -DPython_EXECUTABLE="$(command -v python3)"
  -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir 2>/dev/null)")
# xxHash's header (libxxhash-dev unpacked under .device/xxhash), where the image lacks it.
if [ -f "$repo/.device/xxhash/usr/include/xxhash.h" ]; then
  DETCOLL_CMAKE_ARGS+=(-DXXHASH_INCLUDE_DIR="$repo/.device/xxhash/usr/include")
fi
# MPFR and GMP (libmpfr-dev, libgmp-dev and their libraries under .device/mpfr, gmp.h beside
# mpfr.h): the tests' exact reference.
mpfr=$repo/.device/mpfr/usr
if [ -f "$mpfr/include/mpfr.h" ]; then
  DETCOLL_CMAKE_ARGS+=(-DMPFR_INCLUDE_DIR="$mpfr/include"
    -DMPFR_LIBRARY="$mpfr/lib/x86_64-linux-gnu/libmpfr.so.6"
    -DGMP_LIBRARY="$mpfr/lib/x86_64-linux-gnu/libgmp.so.10")
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$mpfr/lib/x86_64-linux-gnu
fi
for pair in nccl:nccl.h:NCCL cudnn:cudnn.h:CUDNN; do
  IFS=: read -r name header var <<<"$pair"
  if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/$header" ]; then
    dir=$(_detcoll_nvidia_package "$name" "$header")
    if [ -n "$dir" ]; then
      so=$(compgen -G "$dir/lib/lib$name.so*" | head -1)
      DETCOLL_CMAKE_ARGS+=(-D${var}_INCLUDE_DIR="$dir/include" -D${var}_LIBRARY="$so")
      export LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH
    fi
  fi
done
unset -f _detcoll_nvidia_package
