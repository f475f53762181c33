#pragma once

// The invariant mode's codec for one element, written once for the host and the device: the
// exponent key of a value, its encoding on a key's fixed-point grid (and the count of a non-finite
// leaf), and the one rounding of an exact sum back to the dtype. kernels/fixed_point.cc (CPU) and
// the bodies of kernels/bodies/reduce.h (GPU) call these same functions, so a GPU result is the
// CPU's by construction of the arithmetic, and the tests compare the two on random inputs all
// the same.
// The grid and its guarantees are described in kernels/fixed_point.h.

#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "common/host_device.h"

namespace detcoll::kernels::codec {

// H: headroom bits; the sum of up to 2^H leaves cannot overflow.
constexpr int kHeadroomBits = 16;

using u128 = unsigned __int128;

struct Format {
  int mantissaBits;  // explicit fraction bits
  int exponentBits;
  int bias;
  int bytes;
};

DETCOLL_HOST_DEVICE inline Format formatOf(DataType type) {
  switch (type) {
    case DataType::kFloat64:
      return {52, 11, 1023, 8};
    case DataType::kFloat16:
      return {10, 5, 15, 2};
    case DataType::kBFloat16:
      return {7, 8, 127, 2};
    default:
      return {23, 8, 127, 4};
  }
}

struct Fields {
  bool negative;
  uint32_t exponent;  // biased exponent field
  uint64_t fraction;
};

DETCOLL_HOST_DEVICE inline Fields split(uint64_t bits, const Format& f) {
  return {((bits >> (f.exponentBits + f.mantissaBits)) & 1) != 0,
          static_cast<uint32_t>((bits >> f.mantissaBits) & ((1u << f.exponentBits) - 1)),
          bits & ((uint64_t{1} << f.mantissaBits) - 1)};
}

// The key marking a non-finite value: the all-ones exponent.
DETCOLL_HOST_DEVICE inline uint32_t specialKey(const Format& f) {
  return (1u << f.exponentBits) - 1;
}

// A value's key: its biased exponent, at least 1 for nonzero values, 0 for zero, the special key
// for inf and NaN.
DETCOLL_HOST_DEVICE inline uint32_t keyOf(uint64_t bits, const Format& f) {
  const Fields x = split(bits, f);
  if (x.exponent == specialKey(f)) return x.exponent;
  if (x.exponent == 0 && x.fraction == 0) return 0;
  return x.exponent > 1 ? x.exponent : 1;
}

DETCOLL_HOST_DEVICE inline uint64_t canonicalNaN(const Format& f) {
  const uint64_t exponent = static_cast<uint64_t>(specialKey(f)) << f.mantissaBits;
  return exponent | (uint64_t{1} << (f.mantissaBits - 1));
}

// Encoding of one finite value on the grid of `key` (its element's largest key, not special):
// round(m * 2^shift), to nearest even.
DETCOLL_HOST_DEVICE inline int64_t encodeValue(uint64_t bits, uint32_t key, const Format& f) {
  const Fields x = split(bits, f);
  if (x.exponent == 0 && x.fraction == 0) return 0;
  const int effective = static_cast<int>(x.exponent > 1 ? x.exponent : 1);
  const uint64_t m = x.fraction | (x.exponent != 0 ? uint64_t{1} << f.mantissaBits : 0);
  const int shift = effective - static_cast<int>(key) + (61 - kHeadroomBits - f.mantissaBits);
  uint64_t q;
  if (shift >= 0) {
    q = m << shift;  // shift <= 61 - H - mantissaBits: q < 2^(62 - H)
  } else if (-shift >= 64) {
    q = 0;  // m < 2^53 <= half a grid step
  } else {
    const int r = -shift;
    q = m >> r;
    const uint64_t rest = m & ((uint64_t{1} << r) - 1);
    const uint64_t half = uint64_t{1} << (r - 1);
    if (rest > half || (rest == half && (q & 1))) ++q;
  }
  return x.negative ? -static_cast<int64_t>(q) : static_cast<int64_t>(q);
}

DETCOLL_HOST_DEVICE inline int bitLength(u128 v) {
  const uint64_t high = static_cast<uint64_t>(v >> 64);
  const uint64_t low = static_cast<uint64_t>(v);
#if defined(__CUDA_ARCH__)
  if (high != 0) return 128 - __clzll(static_cast<long long>(high));
  return low == 0 ? 0 : 64 - __clzll(static_cast<long long>(low));
#else
  if (high != 0) return 128 - __builtin_clzll(high);
  return low == 0 ? 0 : 64 - __builtin_clzll(low);
#endif
}

// Rounds magnitude * 2^exponent (exact, plus a sticky bit for discarded nonzero bits below it)
// once, to nearest even, to the float dtype's bits (returned in the low bits).
DETCOLL_HOST_DEVICE inline uint64_t roundToFloatBits(bool negative, u128 magnitude, int exponent,
                                                     bool sticky, const Format& f) {
  const uint64_t sign = static_cast<uint64_t>(negative) << (f.exponentBits + f.mantissaBits);
  if (magnitude == 0) return 0;
  const int lead = exponent + bitLength(magnitude) - 1;  // exponent of the leading bit
  const int minNormal = 1 - f.bias;
  // Exponent of the result's last mantissa bit: fixed in the subnormal range.
  const int normalLsb = lead - f.mantissaBits;
  const int subnormalLsb = minNormal - f.mantissaBits;
  int lsb = normalLsb > subnormalLsb ? normalLsb : subnormalLsb;
  const int drop = lsb - exponent;
  u128 q;
  if (drop <= 0) {
    q = magnitude << (-drop);  // exact: at most mantissaBits + 1 bits
  } else if (drop >= 128) {
    return sign;  // far below the smallest subnormal: rounds to zero
  } else {
    q = magnitude >> drop;
    const u128 rest = magnitude & ((u128{1} << drop) - 1);
    const u128 half = u128{1} << (drop - 1);
    if (rest > half || (rest == half && (sticky || (q & 1)))) ++q;
  }
  if (q >> (f.mantissaBits + 1)) {  // the rounding carried into a new leading bit
    q >>= 1;
    ++lsb;
  }
  uint64_t biased = 0;
  uint64_t fraction = static_cast<uint64_t>(q);
  if (q >> f.mantissaBits) {
    biased = static_cast<uint64_t>(lsb + f.mantissaBits + f.bias);
    fraction &= (uint64_t{1} << f.mantissaBits) - 1;
  }
  const uint64_t allOnes = specialKey(f);
  if (biased >= allOnes) return sign | (allOnes << f.mantissaBits);  // beyond the range: inf
  return sign | (biased << f.mantissaBits) | fraction;
}

// The dtype's bits of an exact sum of encodings on the grid of `key` (not special), divided by
// `leaves` for average, rounded once.
DETCOLL_HOST_DEVICE inline uint64_t decodeSum(int64_t sum, uint32_t key, const Format& f,
                                              bool average, int64_t leaves) {
  const bool negative = sum < 0;
  const u128 magnitude =
      static_cast<u128>(negative ? -static_cast<uint64_t>(sum) : static_cast<uint64_t>(sum));
  // The grid step of this element: 2^(key - bias + 1 - 62 + H).
  const int grid = static_cast<int>(key) - f.bias - 61 + kHeadroomBits;
  if (average && leaves > 1 && magnitude != 0) {
    // Scale to 127 bits first, so that the quotient keeps at least 127 - 17 bits: more than any
    // dtype's mantissa plus a rounding bit, so the sticky bit decides ties correctly.
    const int shift = 127 - bitLength(magnitude);
    const u128 scaled = magnitude << shift;
    const u128 quotient = scaled / static_cast<u128>(leaves);
    const bool sticky = quotient * static_cast<u128>(leaves) != scaled;
    return roundToFloatBits(negative, quotient, grid - shift, sticky, f);
  }
  return roundToFloatBits(negative, magnitude, grid, false, f);
}

// The non-finite result from counts of +inf, -inf and NaN leaves: NaN if any leaf is NaN or both
// infinities meet, else the infinity.
DETCOLL_HOST_DEVICE inline uint64_t nonFiniteBits(int64_t positive, int64_t negative, int64_t nan,
                                                  const Format& f) {
  if (nan > 0 || (positive > 0 && negative > 0)) return canonicalNaN(f);
  const uint64_t infinity = static_cast<uint64_t>(specialKey(f)) << f.mantissaBits;
  return positive > 0 ? infinity : (uint64_t{1} << (f.exponentBits + f.mantissaBits)) | infinity;
}

// What a non-finite value counts as: 0 for +inf, 1 for -inf, 2 for NaN (the index of its count).
DETCOLL_HOST_DEVICE inline int nonFiniteClass(const Fields& x) {
  return x.fraction != 0 ? 2 : (x.negative ? 1 : 0);
}

// Non-finite leaves travel inside the sums (docs/design.md, "The invariant mode"): where an
// element's key is the special key, its int64 holds the number of +inf, -inf and NaN leaves in
// three fields of kCountBits bits, from the low bits. The counts add exactly, as the encodings
// do (at most 2^H leaves, below 2^kCountBits), so one int64 sum carries both and every executor
// applies the one rule of nonFiniteBits to it.
constexpr int kCountBits = 21;
static_assert(kHeadroomBits < kCountBits, "a count field must hold every leaf");

// What a leaf adds to its element's int64 under the special key: one in the field of its class,
// nothing when it is finite.
DETCOLL_HOST_DEVICE inline int64_t nonFiniteCount(uint64_t bits, const Format& f) {
  const Fields x = split(bits, f);
  if (x.exponent != specialKey(f)) return 0;
  return int64_t{1} << (kCountBits * nonFiniteClass(x));
}

// What a leaf adds to its element's int64: its encoding on the grid of `key`, or, under the
// special key, its count.
DETCOLL_HOST_DEVICE inline int64_t leafContribution(uint64_t bits, uint32_t key, const Format& f) {
  if (key == specialKey(f)) return nonFiniteCount(bits, f);
  return key == 0 ? 0 : encodeValue(bits, key, f);
}

// The dtype's bits of an element's exact int64 sum on the grid of `key`: decodeSum (divided by
// `leaves` for average), or, under the special key, the non-finite result of the counts.
DETCOLL_HOST_DEVICE inline uint64_t decodeElement(int64_t sum, uint32_t key, const Format& f,
                                                  bool average, int64_t leaves) {
  if (key == specialKey(f)) {
    const int64_t mask = (int64_t{1} << kCountBits) - 1;
    return nonFiniteBits(sum & mask, (sum >> kCountBits) & mask, (sum >> (2 * kCountBits)) & mask,
                         f);
  }
  return decodeSum(sum, key, f, average, leaves);
}

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double doubleFromBits(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
#endif
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE int64_t bitsFromDouble(double d) {
#if defined(__CUDA_ARCH__)
  return __double_as_longlong(d);
#else
  int64_t bits;
  std::memcpy(&bits, &d, 8);
  return bits;
#endif
}

// Whether v, a quotient rounded to double then scaled exactly, must be settled by the exact path
// before it is rounded to float: a double that sits exactly on a float midpoint may hide which
// way the exact quotient lies, and so may one in float's subnormal range (nonzero: the exact
// value was not zero).
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE bool quotientNeedsExact(double v, bool nonzero) {
  const uint64_t vb = static_cast<uint64_t>(bitsFromDouble(v));
  const bool midpoint = (vb & 0x1fffffffu) == 0x10000000u;
  const bool tiny = ((vb & 0x7fffffffffffffffu) < 0x3810000000000000u) & nonzero;
  return midpoint | tiny;
}

// float32's decodeSum by double arithmetic, the bits of decodeSum wherever *settled comes back
// true: an exact sum below 2^51 is exact as a double, scaling it by the grid's power of two is
// exact, and the conversion to float rounds once. Average rounds the quotient to double first,
// which can only matter where the double sits on a float midpoint or in float's subnormal range:
// those come back unsettled, as does a sum of 2^51 or more.
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE float decodeFloat32(int64_t sum, uint32_t key,
                                                             bool average, int64_t leaves,
                                                             bool* settled) {
  const bool small = static_cast<uint64_t>(sum + (int64_t{1} << 51)) < (uint64_t{1} << 52);
  double d = static_cast<double>(sum);
  if (average) d = d / static_cast<double>(leaves);  // one rounding to double
  const double v = d * doubleFromBits((uint64_t{1023} + key - 172) << 52);  // exact
  *settled = small && !(average && quotientNeedsExact(v, sum != 0));
  return static_cast<float>(v);  // one rounding to float
}

}  // namespace detcoll::kernels::codec
