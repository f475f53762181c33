#pragma once

// IEEE binary16 and bfloat16 without any GPU header, the same code on the host and (under nvcc)
// the device. Conversions from float round to nearest even; NaN converts to the canonical quiet
// NaN of the target (positive sign, top mantissa bit only) so that results do not depend on NaN
// payloads.

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace detcoll {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

DETCOLL_HOST_DEVICE inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
DETCOLL_HOST_DEVICE inline float bitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

constexpr uint16_t kHalfCanonicalNaN = 0x7e00;
constexpr uint16_t kBFloat16CanonicalNaN = 0x7fc0;

DETCOLL_HOST_DEVICE inline float halfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return bitsToFloat(sign | floatBits(magnitude));
  }
  if (exponent == 31) return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

DETCOLL_HOST_DEVICE inline Half floatToHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return Half{kHalfCanonicalNaN};
  if (abs >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: inf
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal in units of 2^-24, or zero.
    if (abs <= 0x33000000u) return Half{sign};  // <= 2^-25 rounds to zero (the tie goes to even)
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14..24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (q & 1u))) ++q;
    return Half{static_cast<uint16_t>(sign | q)};
  }
  uint32_t h = (abs - 0x38000000u) >> 13;  // rebias 127 -> 15 and drop 13 mantissa bits
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return Half{static_cast<uint16_t>(sign | h)};
}

DETCOLL_HOST_DEVICE inline float bfloat16ToFloat(BFloat16 b) {
  return bitsToFloat(static_cast<uint32_t>(b.bits) << 16);
}

DETCOLL_HOST_DEVICE inline BFloat16 floatToBFloat16(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BFloat16{kBFloat16CanonicalNaN};
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // overflow carries into infinity
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

}  // namespace detcoll
