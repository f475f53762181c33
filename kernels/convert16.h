#pragma once

// float16 and bfloat16 arrays to float and back on the host, vectorized, with the bits of the
// scalar conversions of common/half.h (exact widening; narrowing rounds to nearest even, overflow
// to inf, every NaN to the canonical quiet NaN). The rank-order fold (kernels/fold.cc) and the
// native mode's MPI operations on 16-bit dtypes (through the fold) widen each block of inputs once
// and narrow the result once. Narrowing must run in the defined floating-point environment
// (common/float_env.h), as every reduction does.

#include <cstddef>

namespace detcoll::kernels {

// out[i] = the value of in's element i (16-bit storage at any byte address).
void widenHalf(float* out, const void* in, size_t n);
void widenBFloat16(float* out, const void* in, size_t n);

// out's element i (16-bit storage at any byte address) = in[i] rounded once.
void narrowHalf(void* out, const float* in, size_t n);
void narrowBFloat16(void* out, const float* in, size_t n);

}  // namespace detcoll::kernels
