#pragma once

// Marks functions that compile for the host and, under nvcc, for the device too: the numeric
// primitives shared by the CPU reference and the CUDA kernels are written once.

#if defined(__CUDACC__)
#define DETCOLL_HOST_DEVICE __host__ __device__
#define DETCOLL_FORCE_INLINE __forceinline__
#else
#define DETCOLL_HOST_DEVICE
#define DETCOLL_FORCE_INLINE inline __attribute__((always_inline))
#endif
