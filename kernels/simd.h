#pragma once

// Runtime-dispatched vector code paths for the host kernels. A function marked
// DETCOLL_VECTOR_CLONES is compiled for AVX-512, AVX2 and the baseline, and the loader picks the
// widest the CPU has. The operations, hence the bits, are the same on every path: contraction is
// off (no FMA), and every path rounds the same IEEE operations to nearest even.

#if defined(__x86_64__) && defined(__GNUC__)
#define DETCOLL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DETCOLL_VECTOR_CLONES
#endif
