#pragma once

// The float formats' fields and the exact double arithmetic that the invariant codec's vector
// paths share (kernels/fixed_point_formats.cc, kernels/fixed_point_few.cc; docs/design.md, "The
// invariant mode"). Everything here is branch-free, so that the loops using it vectorize.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/half.h"
#include "common/host_device.h"
#include "kernels/codec.h"
#include "kernels/convert16.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels::formats {

using codec::bitsFromDouble;
using codec::doubleFromBits;

// Adding then subtracting 1.5 * 2^52 rounds a double of magnitude below 2^51 to an integer, ties
// to even, and the difference of the bit patterns is that integer in two's complement; the same
// constant turns an int64 below 2^51 into a double exactly.
constexpr double kRoundMagic = 6755399441055744.0;
constexpr int64_t kRoundMagicBits = 0x4338000000000000;

// A float format: its storage bits, its key's storage, explicit mantissa bits and exponent bits.
template <typename TBits, typename TKey, int kMantissaBits, int kExponentBitsOf>
struct Format {
  using Bits = TBits;
  using Key = TKey;
  static constexpr int kM = kMantissaBits;
  static constexpr int kE = kExponentBitsOf;
  static constexpr int64_t kBias = (int64_t{1} << (kE - 1)) - 1;
  static constexpr uint64_t kSpecial = (uint64_t{1} << kE) - 1;  // the exponent field of inf, NaN
  static constexpr uint64_t kFraction = (uint64_t{1} << kM) - 1;
  static constexpr uint64_t kMagnitude = (uint64_t{1} << (kM + kE)) - 1;
};
using Float16 = Format<uint16_t, uint8_t, 10, 5>;
using BFloat16 = Format<uint16_t, uint8_t, 7, 8>;
using Float64 = Format<uint64_t, uint16_t, 52, 11>;
using Float32 = Format<uint32_t, uint8_t, 23, 8>;
static_assert(codec::kHeadroomBits == 16, "the grid below assumes H = 16");

// codec::keyOf without branches: the exponent field, 1 for a nonzero subnormal, 0 for zero, the
// special key for inf and NaN.
template <typename F>
DETCOLL_FORCE_INLINE uint64_t keyOfBits(uint64_t b) {
  const uint64_t e = (b >> F::kM) & F::kSpecial;
  return e + static_cast<uint64_t>((e == 0) & ((b & F::kMagnitude) != 0));
}

// A 32-bit or narrower leaf as float32 bits (exact).
template <typename F>
DETCOLL_FORCE_INLINE uint32_t widenedBits(const void* leaf, size_t i) {
  if constexpr (std::is_same_v<F, Float32>) {
    return loadAt<uint32_t>(leaf, i);
  } else if constexpr (std::is_same_v<F, BFloat16>) {
    return uint32_t{loadAt<uint16_t>(leaf, i)} << 16;
  } else {
    return widenHalfBits(loadAt<uint16_t>(leaf, i));
  }
}

// A double rounded once, to nearest even, to a 16-bit format's bits (overflow to inf). The
// rounding is done in double: u is the format's last mantissa bit at v's exponent (fixed at the
// smallest subnormal's below the normal range), and the round magic scaled by u rounds v to a
// multiple of u. r is then a value of the format (or its first power of two past the largest,
// which is inf there), so it converts to float exactly and from float to the format without a
// further rounding (narrowHalfBits, or bfloat16's upper half). The sign is v's, also where r is 0.
// Only constant shifts and 32-bit lanes after the rounding: the loop vectorizes.
template <typename F>
DETCOLL_FORCE_INLINE uint64_t roundDouble(double v) {
  static_assert(sizeof(typename F::Bits) == 2, "16-bit formats only");
  constexpr int64_t kMinLsb = 1 - F::kBias - F::kM;  // exponent of the smallest subnormal
  const uint64_t vb = static_cast<uint64_t>(bitsFromDouble(v));
  const int64_t ev = static_cast<int64_t>((vb >> 52) & 0x7ff);
  const int64_t lsb = std::max<int64_t>(ev - 1023 - F::kM, kMinLsb);
  const double u = doubleFromBits(static_cast<uint64_t>(lsb + 1023) << 52);
  const double magic = u * kRoundMagic;  // exact: |v| < 2^(kM + 2) u, far below 2^51 u
  const double r = (v + magic) - magic;
  const uint32_t bits =
      floatBits(static_cast<float>(r)) | (static_cast<uint32_t>(vb >> 32) & 0x80000000u);
  if constexpr (F::kE == 8) {
    return bits >> 16;  // bfloat16: float32's exponent range
  } else {
    return narrowHalfBits(bits);
  }
}

}  // namespace detcoll::kernels::formats
