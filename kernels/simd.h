#pragma once

// Runtime-dispatched vector code paths for the host kernels. A function marked
// DETCOLL_VECTOR_CLONES is compiled for x86-64-v4 (AVX-512 F, BW, DQ and VL: with F alone 64-bit
// integer lanes and int64 conversions stay in 256-bit halves or are emulated), AVX2 and the
// baseline, and the loader picks the widest the CPU has. The operations, hence the bits, are the
// same on every path: contraction is off (no FMA, which x86-64-v4 has), and every path rounds the
// same IEEE operations to nearest even (docs/design.md, "The invariant mode").

#if defined(__x86_64__) && defined(__GNUC__)
#define DETCOLL_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DETCOLL_VECTOR_CLONES
#endif
