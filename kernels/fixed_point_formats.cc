#include "kernels/fixed_point_formats.h"

#include <algorithm>

#include "kernels/codec.h"
#include "kernels/simd.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels::formats {
namespace {

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
static_assert(codec::kHeadroomBits == 16, "the grid below assumes H = 16");

// codec::keyOf without branches: the exponent field, 1 for a nonzero subnormal, 0 for zero, the
// special key for inf and NaN.
template <typename F>
DETCOLL_FORCE_INLINE uint64_t keyOfBits(uint64_t b) {
  const uint64_t e = (b >> F::kM) & F::kSpecial;
  return e + static_cast<uint64_t>((e == 0) & ((b & F::kMagnitude) != 0));
}

template <typename F>
DETCOLL_FORCE_INLINE void localMaxKeysBody(typename F::Key* keys, const void* const* leaves,
                                           int nleaves, size_t begin, size_t n) {
  using Key = typename F::Key;
  using Bits = typename F::Bits;
  const char* x0 = static_cast<const char*>(leaves[0]) + sizeof(Bits) * begin;
  for (size_t i = 0; i < n; ++i) keys[i] = static_cast<Key>(keyOfBits<F>(loadAt<Bits>(x0, i)));
  for (int l = 1; l < nleaves; ++l) {
    const char* x = static_cast<const char*>(leaves[l]) + sizeof(Bits) * begin;
    for (size_t i = 0; i < n; ++i) {
      const Key k = static_cast<Key>(keyOfBits<F>(loadAt<Bits>(x, i)));
      keys[i] = k > keys[i] ? k : keys[i];
    }
  }
}

// codec::encodeValue by exact double arithmetic. A finite leaf with exponent field e (effective
// exponent max(e, 1)) on the grid of key k encodes to round(1.f * 2^E), E = max(e, 1) - k + 45
// (0.f for a subnormal): E <= 45, since k is the largest key, so the magnitude is below 2^46 and
// the round magic rounds it once, ties to even. The double 1.f * 2^E is built from the bits (E is
// clamped at -60, where the value stays below 1/2 and rounds to 0 all the same); a subnormal's
// 0.f * 2^E is that minus 2^E, exactly.
template <typename F>
DETCOLL_FORCE_INLINE void encodeBody(int64_t* __restrict out, const void* __restrict leaf,
                                     const typename F::Key* __restrict keys, size_t begin, size_t n,
                                     bool accumulate) {
  using Bits = typename F::Bits;
  const char* x = static_cast<const char*>(leaf) + sizeof(Bits) * begin;
  auto encode = [&](size_t i) {
    const uint64_t b = loadAt<Bits>(x, i);
    const int64_t key = keys[i];
    const int64_t e = static_cast<int64_t>((b >> F::kM) & F::kSpecial);
    const int64_t exponent = std::max<int64_t>(e + (e == 0) - key + 45, -60);
    const uint64_t top =
        ((b >> (F::kM + F::kE)) << 63) | (static_cast<uint64_t>(exponent + 1023) << 52);
    const double whole = doubleFromBits(top | ((b & F::kFraction) << (52 - F::kM)));
    const double implicit = doubleFromBits(top & -static_cast<uint64_t>(e == 0));
    const double rounded = (whole - implicit) + kRoundMagic;
    const int64_t usable =
        -static_cast<int64_t>((key != 0) & (key != static_cast<int64_t>(F::kSpecial)));
    return (bitsFromDouble(rounded) - kRoundMagicBits) & usable;
  };
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += encode(i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = encode(i);
  }
}

// A double rounded once, to nearest even, to a 16-bit format's bits (overflow to inf); *tie: the
// double sat exactly halfway between two neighbours of the format. The rounding is done in
// double: u is the format's last mantissa bit at v's exponent (fixed at the smallest subnormal's
// below the normal range), the round magic scaled by u rounds v to a multiple of u, and v - r is
// exact (Sterbenz). r then converts to the format without rounding: its fields shift into place,
// or, in the subnormal range, it is an integer number of smallest subnormals. Only constant
// shifts: the loop vectorizes.
template <typename F>
DETCOLL_FORCE_INLINE uint64_t roundDouble(double v, uint64_t* tie) {
  constexpr int64_t kMinLsb = 1 - F::kBias - F::kM;  // exponent of the smallest subnormal
  const uint64_t vb = static_cast<uint64_t>(bitsFromDouble(v));
  const int64_t ev = static_cast<int64_t>((vb >> 52) & 0x7ff);
  const int64_t lsb = std::max<int64_t>(ev - 1023 - F::kM, kMinLsb);
  const double u = doubleFromBits(static_cast<uint64_t>(lsb + 1023) << 52);
  const double magic = u * kRoundMagic;  // exact: |v| < 2^(kM + 2) u, far below 2^51 u
  const double r = (v + magic) - magic;
  const double gap = v - r;
  *tie = static_cast<uint64_t>((gap == 0.5 * u) | (gap == -0.5 * u));
  const uint64_t rb = static_cast<uint64_t>(bitsFromDouble(r)) & 0x7fffffffffffffffu;
  const int64_t te = static_cast<int64_t>(rb >> 52) - 1023 + F::kBias;
  const uint64_t normal =
      (static_cast<uint64_t>(te) << F::kM) | ((rb >> (52 - F::kM)) & F::kFraction);
  const double units =
      doubleFromBits(rb) * doubleFromBits(static_cast<uint64_t>(1023 - kMinLsb) << 52);
  const uint64_t subnormal =
      static_cast<uint64_t>(bitsFromDouble(units + kRoundMagic) - kRoundMagicBits);
  const uint64_t infinity = F::kSpecial << F::kM;
  const uint64_t finite = -static_cast<uint64_t>(normal < infinity);
  const uint64_t isNormal = -static_cast<uint64_t>(te >= 1);
  const uint64_t bits =
      (((normal & finite) | (infinity & ~finite)) & isNormal) | (subnormal & ~isNormal);
  return ((vb >> 63) << (F::kM + F::kE)) | bits;
}

// out = the exact sums decoded: |t| < 2^51 converts exactly; the scaling by the grid's power of
// two is exact; one rounding to the format gives decodeSum's bits. Average rounds the quotient to
// double first, which can only matter where it then sits on a tie (16-bit) or in float64's
// subnormal range: those are left to the exact path, as are sums of 2^51 or more.
template <typename F, bool average>
DETCOLL_FORCE_INLINE void decodeBody(void* __restrict out, const int64_t* const* pieces, int p,
                                     const typename F::Key* __restrict keys, size_t n,
                                     int64_t leaves, std::vector<uint32_t>& slow) {
  using Bits = typename F::Bits;
  constexpr size_t kBlock = 1024;
  alignas(64) int64_t sums[kBlock];
  alignas(64) uint8_t needsExact[kBlock];
  const double divisor = static_cast<double>(leaves);
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) sums[i] = pieces[0][base + i];
    for (int j = 1; j < p; ++j) {
      for (size_t i = 0; i < m; ++i) sums[i] += pieces[j][base + i];
    }
    for (size_t i = 0; i < m; ++i) {
      const int64_t t = sums[i];
      const int64_t key = keys[base + i];
      const bool small = static_cast<uint64_t>(t + (int64_t{1} << 51)) < (uint64_t{1} << 52);
      double d = doubleFromBits(static_cast<uint64_t>(t + kRoundMagicBits)) - kRoundMagic;
      if constexpr (average) d = d / divisor;  // one rounding to double
      uint64_t unsettled;
      Bits result;
      if constexpr (sizeof(Bits) == 8) {
        // 2^(key - 1068) in two exact steps where it is below double's normal range.
        const bool low = key < 100;
        const double first = doubleFromBits(static_cast<uint64_t>(key + (low ? 55 : -45)) << 52);
        const double second = doubleFromBits(low ? uint64_t{923} << 52 : uint64_t{1023} << 52);
        const double v = (d * first) * second;  // one rounding, in the subnormal range only
        result = static_cast<Bits>(bitsFromDouble(v));
        unsettled = static_cast<uint64_t>(((result & 0x7ff0000000000000u) == 0) & (t != 0));
      } else {
        const double v =
            d * doubleFromBits(static_cast<uint64_t>(key + 1023 - F::kBias - 45) << 52);
        result = static_cast<Bits>(roundDouble<F>(v, &unsettled));
      }
      needsExact[i] = static_cast<uint8_t>((!small) | (average & (unsettled != 0)) |
                                           (key == static_cast<int64_t>(F::kSpecial)));
      storeAt<Bits>(out, base + i, result);
    }
    for (size_t i = 0; i < m; ++i) {
      if (needsExact[i]) slow.push_back(static_cast<uint32_t>(base + i));
    }
  }
}

template <typename Key>
DETCOLL_FORCE_INLINE void foldMaxKeysBody(void* out, const void* const* pieces, int p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Key key = loadAt<Key>(pieces[0], i);
    for (int j = 1; j < p; ++j) {
      const Key k = loadAt<Key>(pieces[j], i);
      key = k > key ? k : key;
    }
    storeAt<Key>(out, i, key);
  }
}

// The clones: one function per format and loop, compiled for each vector width.
#define DETCOLL_FORMAT_LOOPS(F)                                                                  \
  DETCOLL_VECTOR_CLONES void localMaxKeys##F(void* keys, const void* const* leaves, int nleaves, \
                                             size_t begin, size_t n) {                           \
    localMaxKeysBody<F>(static_cast<F::Key*>(keys), leaves, nleaves, begin, n);                  \
  }                                                                                              \
  DETCOLL_VECTOR_CLONES void encode##F(int64_t* out, const void* leaf, const void* keys,         \
                                       size_t begin, size_t n, bool accumulate) {                \
    encodeBody<F>(out, leaf, static_cast<const F::Key*>(keys), begin, n, accumulate);            \
  }                                                                                              \
  DETCOLL_VECTOR_CLONES void decode##F(void* out, const int64_t* const* pieces, int p,           \
                                       const void* keys, size_t n, bool average, int64_t leaves, \
                                       std::vector<uint32_t>& slow) {                            \
    if (average) {                                                                               \
      decodeBody<F, true>(out, pieces, p, static_cast<const F::Key*>(keys), n, leaves, slow);    \
    } else {                                                                                     \
      decodeBody<F, false>(out, pieces, p, static_cast<const F::Key*>(keys), n, leaves, slow);   \
    }                                                                                            \
  }
DETCOLL_FORMAT_LOOPS(Float16)
DETCOLL_FORMAT_LOOPS(BFloat16)
DETCOLL_FORMAT_LOOPS(Float64)
#undef DETCOLL_FORMAT_LOOPS

DETCOLL_VECTOR_CLONES void foldMaxKeys8(void* out, const void* const* pieces, int p, size_t n) {
  foldMaxKeysBody<uint8_t>(out, pieces, p, n);
}
DETCOLL_VECTOR_CLONES void foldMaxKeys16(void* out, const void* const* pieces, int p, size_t n) {
  foldMaxKeysBody<uint16_t>(out, pieces, p, n);
}

}  // namespace

bool handles(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBFloat16 || type == DataType::kFloat64;
}

void localMaxKeys(void* keys, const void* const* leaves, int nleaves, size_t begin, size_t n,
                  DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return localMaxKeysFloat16(keys, leaves, nleaves, begin, n);
    case DataType::kBFloat16:
      return localMaxKeysBFloat16(keys, leaves, nleaves, begin, n);
    default:
      return localMaxKeysFloat64(keys, leaves, nleaves, begin, n);
  }
}

void encode(int64_t* out, const void* leaf, const void* keys, size_t begin, size_t n, DataType type,
            bool accumulate) {
  switch (type) {
    case DataType::kFloat16:
      return encodeFloat16(out, leaf, keys, begin, n, accumulate);
    case DataType::kBFloat16:
      return encodeBFloat16(out, leaf, keys, begin, n, accumulate);
    default:
      return encodeFloat64(out, leaf, keys, begin, n, accumulate);
  }
}

void decode(void* out, const int64_t* const* pieces, int p, const void* keys, size_t n,
            DataType type, bool average, int64_t leaves, std::vector<uint32_t>& slow) {
  switch (type) {
    case DataType::kFloat16:
      return decodeFloat16(out, pieces, p, keys, n, average, leaves, slow);
    case DataType::kBFloat16:
      return decodeBFloat16(out, pieces, p, keys, n, average, leaves, slow);
    default:
      return decodeFloat64(out, pieces, p, keys, n, average, leaves, slow);
  }
}

void foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, size_t keyBytes) {
  if (keyBytes == 1) return foldMaxKeys8(out, pieces, p, n);
  foldMaxKeys16(out, pieces, p, n);
}

}  // namespace detcoll::kernels::formats
