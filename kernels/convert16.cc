#include "kernels/convert16.h"

#include <cstdint>

#include "common/half.h"
#include "kernels/simd.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels {
namespace {

// halfToFloat without branches: a normal's fields move into place and rebias (inf and NaN rebias
// further, to the all-ones exponent); a subnormal's mantissa is an integer count of 2^-24, whose
// float conversion and scaling are exact (a normal float: no subnormal is involved).
DETCOLL_FORCE_INLINE uint32_t widenHalfBits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t exponent = magnitude >> 10;
  const uint32_t normal = (magnitude << 13) + ((exponent == 31 ? 224u : 112u) << 23);
  const uint32_t subnormal = floatBits(static_cast<float>(magnitude) * 0x1p-24f);
  return sign | (exponent == 0 ? subnormal : normal);
}

// floatToHalf without branches. Normal results round by adding below the 13 dropped bits (a carry
// moves into the exponent, up to inf at 65520); below 2^-14, adding 1/2, whose last bit is 2^-24,
// rounds the value to a count of 2^-24 once, to nearest even.
DETCOLL_FORCE_INLINE uint16_t narrowHalfBits(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t subnormal = floatBits(bitsToFloat(a) + 0.5f) - 0x3f000000u;
  uint32_t h = a < 0x38800000u ? subnormal : normal;
  h = a >= 0x477ff000u ? 0x7c00u : h;  // >= 65520, or inf
  h = a > 0x7f800000u ? kHalfCanonicalNaN : (sign | h);
  return static_cast<uint16_t>(h);
}

DETCOLL_FORCE_INLINE uint16_t narrowBFloat16Bits(uint32_t x) {
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // a carry reaches inf
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? kBFloat16CanonicalNaN : rounded);
}

}  // namespace

DETCOLL_VECTOR_CLONES void widenHalf(float* out, const void* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bitsToFloat(widenHalfBits(loadAt<uint16_t>(in, i)));
}

DETCOLL_VECTOR_CLONES void widenBFloat16(float* out, const void* in, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = bitsToFloat(static_cast<uint32_t>(loadAt<uint16_t>(in, i)) << 16);
}

DETCOLL_VECTOR_CLONES void narrowHalf(void* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) storeAt<uint16_t>(out, i, narrowHalfBits(floatBits(in[i])));
}

DETCOLL_VECTOR_CLONES void narrowBFloat16(void* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) storeAt<uint16_t>(out, i, narrowBFloat16Bits(floatBits(in[i])));
}

}  // namespace detcoll::kernels
