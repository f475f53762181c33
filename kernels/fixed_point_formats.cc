#include "kernels/fixed_point_formats.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/codec.h"
#include "kernels/convert16.h"
#include "kernels/format_bits.h"
#include "kernels/simd.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels::formats {
namespace {

template <typename F>
DETCOLL_FORCE_INLINE void localMaxKeysBody(typename F::Key* keys, const void* const* leaves,
                                           int nleaves, size_t begin, size_t n) {
  using Key = typename F::Key;
  using Bits = typename F::Bits;
  const char* x0 = static_cast<const char*>(leaves[0]) + sizeof(Bits) * begin;
  // Keys through bytes: a caller's 2-byte keys may start at any address (kernels/unaligned.h).
  for (size_t i = 0; i < n; ++i)
    storeAt<Key>(keys, i, static_cast<Key>(keyOfBits<F>(loadAt<Bits>(x0, i))));
  for (int l = 1; l < nleaves; ++l) {
    const char* x = static_cast<const char*>(leaves[l]) + sizeof(Bits) * begin;
    for (size_t i = 0; i < n; ++i) {
      const Key k = static_cast<Key>(keyOfBits<F>(loadAt<Bits>(x, i)));
      const Key was = loadAt<Key>(keys, i);
      storeAt<Key>(keys, i, k > was ? k : was);
    }
  }
}

// codec::encodeValue by exact double arithmetic. A finite leaf with exponent field e (effective
// exponent max(e, 1)) on the grid of key k encodes to round(1.f * 2^E), E = max(e, 1) - k + 45
// (0.f for a subnormal): E <= 45, since k is the largest key, so the magnitude is below 2^46 and
// the round magic rounds it once, ties to even. The double 1.f * 2^E is built from the bits (E is
// clamped at -60, where the value stays below 1/2 and rounds to 0 all the same); a subnormal's
// 0.f * 2^E is that minus 2^E, exactly.
// The encoding plus the round magic, as a double (its bits less the magic's are the integer);
// usable(key) masks elements whose key is 0 or the special key, which encode to 0.
template <typename F>
DETCOLL_FORCE_INLINE uint64_t usable(int64_t key) {
  return -static_cast<uint64_t>((key != 0) & (key != static_cast<int64_t>(F::kSpecial)));
}

template <typename F>
DETCOLL_FORCE_INLINE double encodedWithMagic(uint64_t b, int64_t key) {
  const int64_t e = static_cast<int64_t>((b >> F::kM) & F::kSpecial);
  const int64_t exponent = std::max<int64_t>(e + (e == 0) - key + 45, -60);
  const uint64_t top =
      ((b >> (F::kM + F::kE)) << 63) | (static_cast<uint64_t>(exponent + 1023) << 52);
  const double whole = doubleFromBits(top | ((b & F::kFraction) << (52 - F::kM)));
  const double implicit = doubleFromBits(top & -static_cast<uint64_t>(e == 0));
  return (whole - implicit) + kRoundMagic;
}

template <typename F>
DETCOLL_FORCE_INLINE void encodeBody(int64_t* __restrict out, const void* __restrict leaf,
                                     const typename F::Key* __restrict keys, size_t begin, size_t n,
                                     bool accumulate) {
  using Bits = typename F::Bits;
  const char* x = static_cast<const char*>(leaf) + sizeof(Bits) * begin;
  auto encode = [&](size_t i) {
    const int64_t key = loadAt<typename F::Key>(keys, i);
    const double rounded = encodedWithMagic<F>(loadAt<Bits>(x, i), key);
    return (bitsFromDouble(rounded) - kRoundMagicBits) & static_cast<int64_t>(usable<F>(key));
  };
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += encode(i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = encode(i);
  }
}

// out = the exact sums decoded: |t| < 2^51 converts exactly; the scaling by the grid's power of
// two is exact; one rounding to the format gives decodeSum's bits. Sums of 2^51 or more are left
// to the exact path.
//
// Average rounds the quotient t / L to double first, and the second rounding, to the format, is
// still the exact quotient's (docs/design.md, "The invariant mode"): a second rounding can only
// differ where the double lands exactly on a tie of the format while the quotient does not, and
// that cannot happen here. A tie d = D * 2^j has D < 2^(p+1) (p = 24, 11 or 8 significant bits,
// fewer below the normal range). If t / L != d, then |t / L - d| >= 2^j / L (j <= 0: L * 2^-j *
// (t / L - d) is a nonzero integer) or >= 1 / L (j > 0), while the double's error is at most
// 2^-53 |d|, below 2^(p + 1 + j - 53) and below 2^-1 / L (|d| < 2^52 / L): with L <= 2^16 the
// first bound exceeds it in both cases. float64's quotient keeps p = 53 bits, so for float64
// only a result in the subnormal range, where the scaling rounds a second time, is left to the
// exact path.
template <typename F, bool average>
DETCOLL_FORCE_INLINE void decodeBody(void* __restrict out, const int64_t* const* pieces, int p,
                                     const typename F::Key* __restrict keys, size_t n,
                                     int64_t leaves, std::vector<size_t>& slow) {
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
      const int64_t key = loadAt<typename F::Key>(keys, base + i);
      const bool small = static_cast<uint64_t>(t) + (uint64_t{1} << 51) < (uint64_t{1} << 52);
      // In unsigned arithmetic: a sum past 2^51 (left to the exact path) may not overflow.
      double d = doubleFromBits(static_cast<uint64_t>(t) + kRoundMagicBits) - kRoundMagic;
      if constexpr (average) d = d / divisor;  // one rounding to double
      uint64_t unsettled = 0;
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
        result = static_cast<Bits>(roundDouble<F>(v));
      }
      needsExact[i] = static_cast<uint8_t>((!small) | (average & (unsettled != 0)) |
                                           (key == static_cast<int64_t>(F::kSpecial)));
      storeAt<Bits>(out, base + i, result);
    }
    for (size_t i = 0; i < m; ++i) {
      if (needsExact[i]) slow.push_back(base + i);
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
                                       std::vector<size_t>& slow) {                              \
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

// The one-process reduction of at most 64 float16 or bfloat16 leaves in double arithmetic, as
// float32's (kernels/fixed_point.cc): the leaves widen to float exactly, and on float32's grid of
// the widened values every encoding is the codec's own (bfloat16 has float32's exponents, so its
// keys and grid are float32's; a float16 value is exact on either grid, the format spanning 40
// binades where the grid keeps 45 bits), below 2^46, and up to 64 of them sum exactly in a
// double. The sum, scaled exactly, rounds once to the format; an average's quotient rounds to
// double first, which cannot change the result (see decodeBody).
template <bool kHalf>
DETCOLL_FORCE_INLINE uint32_t sum16Body(const void* const* x, int k, size_t n,
                                        uint32_t* __restrict keys, double* __restrict sums) {
  using F = std::conditional_t<kHalf, Float16, BFloat16>;
  for (size_t i = 0; i < n; ++i) keys[i] = widenedBits<F>(x[0], i) & 0x7fffffffu;
  for (int l = 1; l < k; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t magnitude = widenedBits<F>(x[l], i) & 0x7fffffffu;
      keys[i] = magnitude > keys[i] ? magnitude : keys[i];
    }
  }
  uint32_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t exponent = keys[i] >> 23;
    const uint32_t key = exponent > 1 ? exponent : 1;
    keys[i] = key;
    largest = key > largest ? key : largest;
  }
  for (int l = 0; l < k; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const double scale = doubleFromBits((uint64_t{1023 + 172} - keys[i]) << 52);
      const double value = static_cast<double>(bitsToFloat(widenedBits<F>(x[l], i)));
      const double encoding = (value * scale + kRoundMagic) - kRoundMagic;
      sums[i] = l == 0 ? encoding : sums[i] + encoding;
    }
  }
  return largest;
}

// Whether dividing by `divisor` (a count of leaves, at most 2^16) is multiplying by 1 / divisor
// exactly: a power of two, whose reciprocal is one too (x * 2^-k rounds as x / 2^k does, also in
// the subnormal range).
inline bool exactReciprocal(double divisor) {
  const uint64_t bits = static_cast<uint64_t>(bitsFromDouble(divisor));
  return (bits & ((uint64_t{1} << 52) - 1)) == 0;
}

// out's element i = sums[i] * 2^(key - 172) / divisor, rounded to the format. A divisor that is a
// power of two (1 for a sum) is a multiplication by its exact reciprocal: a division costs several
// times as much as the rest of the loop.
template <typename F, bool kDivide>
DETCOLL_FORCE_INLINE void round16Body(void* __restrict out, const uint32_t* __restrict keys,
                                      const double* __restrict sums, size_t n, double divisor) {
  const double reciprocal = 1.0 / divisor;
  for (size_t i = 0; i < n; ++i) {
    const double d = kDivide ? sums[i] / divisor : sums[i] * reciprocal;
    const double v = d * doubleFromBits((uint64_t{1023 - 172} + keys[i]) << 52);
    storeAt<uint16_t>(out, i, static_cast<uint16_t>(roundDouble<F>(v)));
  }
}

DETCOLL_VECTOR_CLONES uint32_t sumHalfBlock(const void* const* x, int k, size_t n, uint32_t* keys,
                                            double* sums) {
  return sum16Body<true>(x, k, n, keys, sums);
}
DETCOLL_VECTOR_CLONES uint32_t sumBFloat16Block(const void* const* x, int k, size_t n,
                                                uint32_t* keys, double* sums) {
  return sum16Body<false>(x, k, n, keys, sums);
}
DETCOLL_VECTOR_CLONES void roundHalfBlock(void* out, const uint32_t* keys, const double* sums,
                                          size_t n, double divisor) {
  exactReciprocal(divisor) ? round16Body<Float16, false>(out, keys, sums, n, divisor)
                           : round16Body<Float16, true>(out, keys, sums, n, divisor);
}
DETCOLL_VECTOR_CLONES void roundBFloat16Block(void* out, const uint32_t* keys, const double* sums,
                                              size_t n, double divisor) {
  exactReciprocal(divisor) ? round16Body<BFloat16, false>(out, keys, sums, n, divisor)
                           : round16Body<BFloat16, true>(out, keys, sums, n, divisor);
}

// float64's one-process reduction of at most 64 leaves in double arithmetic: keys and encodings
// as encodeBody's (below 2^46, exact as doubles), summed exactly in a double (below 2^52), and
// scaled as decodeBody's: one rounding, in the scaling, only where the result is subnormal; an
// average's quotient there rounds twice, and those elements are left to the exact path.
DETCOLL_VECTOR_CLONES uint32_t sumFloat64Block(const void* const* x, int k, size_t n,
                                               uint32_t* __restrict keys, double* __restrict sums) {
  for (size_t i = 0; i < n; ++i)
    keys[i] = static_cast<uint32_t>(keyOfBits<Float64>(loadAt<uint64_t>(x[0], i)));
  for (int l = 1; l < k; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = static_cast<uint32_t>(keyOfBits<Float64>(loadAt<uint64_t>(x[l], i)));
      keys[i] = key > keys[i] ? key : keys[i];
    }
  }
  uint32_t largest = 0;
  for (size_t i = 0; i < n; ++i) largest = keys[i] > largest ? keys[i] : largest;
  for (int l = 0; l < k; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t key = keys[i];
      const double rounded = encodedWithMagic<Float64>(loadAt<uint64_t>(x[l], i), key);
      const double encoding = doubleFromBits(
          static_cast<uint64_t>(bitsFromDouble(rounded - kRoundMagic)) & usable<Float64>(key));
      sums[i] = l == 0 ? encoding : sums[i] + encoding;
    }
  }
  return largest;
}

template <bool kDivide>
DETCOLL_FORCE_INLINE void scaleFloat64Body(void* __restrict out, const uint32_t* __restrict keys,
                                           const double* __restrict sums, size_t n, double divisor,
                                           uint8_t* __restrict tiny) {
  const double reciprocal = 1.0 / divisor;
  for (size_t i = 0; i < n; ++i) {
    const int64_t key = keys[i];
    const double d = kDivide ? sums[i] / divisor : sums[i] * reciprocal;
    const bool low = key < 100;
    const double first = doubleFromBits(static_cast<uint64_t>(key + (low ? 55 : -45)) << 52);
    const double second = doubleFromBits(low ? uint64_t{923} << 52 : uint64_t{1023} << 52);
    const uint64_t bits = static_cast<uint64_t>(bitsFromDouble((d * first) * second));
    storeAt<uint64_t>(out, i, bits);
    tiny[i] = static_cast<uint8_t>(((bits & 0x7ff0000000000000u) == 0) & (sums[i] != 0));
  }
}
DETCOLL_VECTOR_CLONES void scaleFloat64Block(void* out, const uint32_t* keys, const double* sums,
                                             size_t n, double divisor, uint8_t* tiny) {
  exactReciprocal(divisor) ? scaleFloat64Body<false>(out, keys, sums, n, divisor, tiny)
                           : scaleFloat64Body<true>(out, keys, sums, n, divisor, tiny);
}

// The codec's result for one element of the leaves, element by element: the exact path.
uint64_t exactElement(const void* const* leaves, int nleaves, size_t i, DataType type,
                      bool average) {
  const codec::Format f = codec::formatOf(type);
  auto bits = [&](int l) -> uint64_t {
    return f.bytes == 8 ? loadAt<uint64_t>(leaves[l], i) : loadAt<uint16_t>(leaves[l], i);
  };
  uint32_t key = 0;
  for (int l = 0; l < nleaves; ++l) key = std::max(key, codec::keyOf(bits(l), f));
  int64_t sum = 0;
  for (int l = 0; l < nleaves; ++l) sum += codec::leafContribution(bits(l), key, f);
  return codec::decodeElement(sum, key, f, average, nleaves);
}

bool reduceLocalFloat64(void* out, const void* const* leaves, int nleaves, size_t count,
                        bool average) {
  constexpr size_t kBlock = 1024;
  alignas(64) uint32_t keys[kBlock];
  alignas(64) double sums[kBlock];
  alignas(64) uint64_t result[kBlock];
  alignas(64) uint8_t tiny[kBlock];
  const double divisor = average ? static_cast<double>(nleaves) : 1.0;
  std::vector<const void*> at(nleaves);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    for (int l = 0; l < nleaves; ++l) at[l] = static_cast<const char*>(leaves[l]) + 8 * base;
    sumFloat64Block(at.data(), nleaves, m, keys, sums);
    // Into a scratch block first: the exact path reads the leaves, and out may alias one.
    scaleFloat64Block(result, keys, sums, m, divisor, tiny);
    for (size_t i = 0; i < m; ++i) {
      if (keys[i] == 2047 || (average && tiny[i])) {
        result[i] = exactElement(at.data(), nleaves, i, DataType::kFloat64, average);
      }
    }
    std::memcpy(static_cast<char*>(out) + 8 * base, result, 8 * m);
  }
  return true;
}

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
            DataType type, bool average, int64_t leaves, std::vector<size_t>& slow) {
  switch (type) {
    case DataType::kFloat16:
      return decodeFloat16(out, pieces, p, keys, n, average, leaves, slow);
    case DataType::kBFloat16:
      return decodeBFloat16(out, pieces, p, keys, n, average, leaves, slow);
    default:
      return decodeFloat64(out, pieces, p, keys, n, average, leaves, slow);
  }
}

bool reduceLocal(void* out, const void* const* leaves, int nleaves, size_t count, DataType type,
                 ReduceOp op) {
  constexpr int kDoubleLeaves = 64;
  const bool half = type == DataType::kFloat16;
  if (nleaves > kDoubleLeaves || op == ReduceOp::kMin || op == ReduceOp::kMax) return false;
  if (type == DataType::kFloat64) {
    return reduceLocalFloat64(out, leaves, nleaves, count, op == ReduceOp::kAverage && nleaves > 1);
  }
  if (!half && type != DataType::kBFloat16) return false;
  constexpr size_t kBlock = 1024;
  alignas(64) uint32_t keys[kBlock];
  alignas(64) double sums[kBlock];
  const bool average = op == ReduceOp::kAverage && nleaves > 1;
  const double divisor = average ? static_cast<double>(nleaves) : 1.0;
  std::vector<const void*> at(nleaves);
  std::vector<std::pair<size_t, uint64_t>> settled;
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    for (int l = 0; l < nleaves; ++l) at[l] = static_cast<const char*>(leaves[l]) + 2 * base;
    const uint32_t largest = half ? sumHalfBlock(at.data(), nleaves, m, keys, sums)
                                  : sumBFloat16Block(at.data(), nleaves, m, keys, sums);
    // Non-finite results, found before the block is written: out may alias a leaf.
    settled.clear();
    if (largest == 255) {
      for (size_t i = 0; i < m; ++i) {
        if (keys[i] == 255)
          settled.emplace_back(i, exactElement(at.data(), nleaves, i, type, average));
      }
    }
    void* result = static_cast<char*>(out) + 2 * base;
    half ? roundHalfBlock(result, keys, sums, m, divisor)
         : roundBFloat16Block(result, keys, sums, m, divisor);
    for (const auto& [i, bits] : settled)
      storeAt<uint16_t>(static_cast<char*>(out) + 2 * base, i, static_cast<uint16_t>(bits));
  }
  return true;
}

void foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, size_t keyBytes) {
  if (keyBytes == 1) return foldMaxKeys8(out, pieces, p, n);
  foldMaxKeys16(out, pieces, p, n);
}

}  // namespace detcoll::kernels::formats
