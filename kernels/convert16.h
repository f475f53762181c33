#pragma once

// float16 and bfloat16 arrays to float and back on the host, vectorized, with the bits of the
// scalar conversions of common/half.h (exact widening; narrowing rounds to nearest even, overflow
// to inf, every NaN to the canonical quiet NaN). The rank-order fold (kernels/fold.cc) and the
// native mode's MPI operations on 16-bit dtypes (through the fold) widen each block of inputs once
// and narrow the result once. Narrowing must run in the defined floating-point environment
// (common/float_env.h), as every reduction does.

#include <cstddef>
#include <cstdint>

#include "common/half.h"
#include "common/host_device.h"

namespace detcoll::kernels {

// halfToFloat without branches: a normal's fields move into place and rebias (inf and NaN rebias
// further, to the all-ones exponent); a subnormal's mantissa is an integer count of 2^-24, whose
// float conversion and scaling are exact (a normal float: no subnormal is involved).
DETCOLL_FORCE_INLINE uint32_t widenHalfBits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t exponent = magnitude >> 10;
  const uint32_t normal = (magnitude << 13) + ((exponent == 31 ? 224u : 112u) << 23);
  const uint32_t subnormal = floatBits(static_cast<float>(magnitude) * 0x1p-24f);
  // Masks, not a conditional: the compiler may not move a floating-point operation under a
  // branch it made, and with none the loops vectorize.
  const uint32_t isSubnormal = -static_cast<uint32_t>(exponent == 0);
  return sign | (subnormal & isSubnormal) | (normal & ~isSubnormal);
}

// floatToHalf without branches. Normal results round by adding below the 13 dropped bits (a carry
// moves into the exponent, up to inf at 65520); below 2^-14, adding 1/2, whose last bit is 2^-24,
// rounds the value to a count of 2^-24 once, to nearest even.
DETCOLL_FORCE_INLINE uint16_t narrowHalfBits(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t subnormal = floatBits(bitsToFloat(a) + 0.5f) - 0x3f000000u;
  const uint32_t isSubnormal = -static_cast<uint32_t>(a < 0x38800000u);
  const uint32_t isInfinite = -static_cast<uint32_t>(a >= 0x477ff000u);  // >= 65520, or inf
  const uint32_t isNaN = -static_cast<uint32_t>(a > 0x7f800000u);
  uint32_t h = (subnormal & isSubnormal) | (normal & ~isSubnormal);
  h = (0x7c00u & isInfinite) | (h & ~isInfinite);
  h = (kHalfCanonicalNaN & isNaN) | ((sign | h) & ~isNaN);
  return static_cast<uint16_t>(h);
}

DETCOLL_FORCE_INLINE uint16_t narrowBFloat16Bits(uint32_t x) {
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // a carry reaches inf
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? kBFloat16CanonicalNaN : rounded);
}

// out[i] = the value of in's element i (16-bit storage at any byte address).
void widenHalf(float* out, const void* in, size_t n);
void widenBFloat16(float* out, const void* in, size_t n);

// out's element i (16-bit storage at any byte address) = in[i] rounded once.
void narrowHalf(void* out, const float* in, size_t n);
void narrowBFloat16(void* out, const float* in, size_t n);

}  // namespace detcoll::kernels
