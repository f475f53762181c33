# Sourced by the scripts: lets Open MPI run as root (containers, CI) and makes oversubscribed
# ranks yield instead of spinning.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
