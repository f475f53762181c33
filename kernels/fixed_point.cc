#include "kernels/fixed_point.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/codec.h"
#include "kernels/fixed_point_formats.h"
#include "kernels/fold.h"
#include "kernels/simd.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels {
namespace {

using codec::Format;
using codec::formatOf;
using codec::u128;

uint64_t loadBits(const void* data, size_t i, int bytes) {
  const char* p = static_cast<const char*>(data) + i * bytes;
  switch (bytes) {
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void storeBits(void* data, size_t i, int bytes, uint64_t v) {
  char* p = static_cast<char*>(data) + i * bytes;
  switch (bytes) {
    case 2: {
      const uint16_t w = static_cast<uint16_t>(v);
      std::memcpy(p, &w, 2);
      return;
    }
    case 4: {
      const uint32_t w = static_cast<uint32_t>(v);
      std::memcpy(p, &w, 4);
      return;
    }
    default:
      std::memcpy(p, &v, 8);
  }
}

uint32_t loadKey(const void* keys, size_t i, size_t keyBytes) {
  if (keyBytes == 1) return static_cast<const uint8_t*>(keys)[i];
  uint16_t k;
  std::memcpy(&k, static_cast<const char*>(keys) + 2 * i, 2);
  return k;
}

bool isIntegerType(DataType type) {
  return type == DataType::kInt32 || type == DataType::kInt64;
}

int64_t loadInteger(const void* data, size_t i, DataType type) {
  if (type == DataType::kInt32) {
    int32_t v;
    std::memcpy(&v, static_cast<const char*>(data) + 4 * i, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, static_cast<const char*>(data) + 8 * i, 8);
  return v;
}

int64_t wrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// float32 fast paths. Same bits as the general code above, by exact double arithmetic:
// power-of-two scalings are exact, and adding then subtracting 1.5 * 2^52 rounds a double of
// magnitude below 2^51 to an integer, ties to even, whose two's complement is the difference of
// the bit patterns. The loops have no branches, so they vectorize.
constexpr double kRoundMagic = 6755399441055744.0;  // 1.5 * 2^52
constexpr int64_t kRoundMagicBits = 0x4338000000000000;

using codec::bitsFromDouble;
using codec::doubleFromBits;
using codec::quotientNeedsExact;

// The hot loops are compiled for AVX2 and AVX-512 too and picked at run time (kernels/simd.h).

inline uint32_t float32Key(uint32_t bits) {
  const uint32_t exponent = (bits >> 23) & 0xffu;
  return exponent + static_cast<uint32_t>(exponent == 0 && (bits & 0x7fffffffu) != 0);
}

DETCOLL_VECTOR_CLONES void localMaxKeysFloat32(uint8_t* keys, const void* const* leaves,
                                               int nleaves, size_t begin, size_t n) {
  // The leaves may start at any byte address (kernels/unaligned.h).
  const char* x0 = static_cast<const char*>(leaves[0]) + 4 * begin;
  for (size_t i = 0; i < n; ++i)
    keys[i] = static_cast<uint8_t>(float32Key(loadAt<uint32_t>(x0, i)));
  for (int l = 1; l < nleaves; ++l) {
    const char* x = static_cast<const char*>(leaves[l]) + 4 * begin;
    for (size_t i = 0; i < n; ++i) {
      const uint8_t k = static_cast<uint8_t>(float32Key(loadAt<uint32_t>(x, i)));
      keys[i] = k > keys[i] ? k : keys[i];
    }
  }
}

// out[i] (+)= round(x * 2^(172 - key)): the grid of kHeadroomBits = 16 for float32.
DETCOLL_VECTOR_CLONES void encodeFloat32(int64_t* out, const void* leaf, const uint8_t* keys,
                                         size_t begin, size_t n, bool accumulate) {
  static_assert(kHeadroomBits == 16, "the float32 fast path assumes H = 16");
  const char* x = static_cast<const char*>(leaf) + 4 * begin;
  // Selects are integer masks: a branch around float operations would stop vectorization.
  auto encode = [&](size_t i) {
    const uint64_t key = keys[i];
    const int64_t usable = -static_cast<int64_t>(key != 0 && key != 255);
    const double scale = doubleFromBits((1023 + 172 - key) << 52);
    const double rounded = static_cast<double>(loadAt<float>(x, i)) * scale + kRoundMagic;
    return (bitsFromDouble(rounded) - kRoundMagicBits) & usable;
  };
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += encode(i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = encode(i);
  }
}

// out[i] = sum of pieces, times 2^(key - 172), divided by leaves for average, rounded once.
// Returns the elements left for the exact path in `slow`.
DETCOLL_VECTOR_CLONES void decodeFloat32(float* out, const int64_t* const* pieces, int p,
                                         const uint8_t* keys, size_t n, bool average,
                                         int64_t leaves, std::vector<size_t>& slow) {
  constexpr size_t kBlock = 1024;
  int64_t sums[kBlock];
  uint8_t needsExact[kBlock];
  const double divisor = static_cast<double>(leaves);
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) sums[i] = pieces[0][base + i];
    for (int j = 1; j < p; ++j) {
      for (size_t i = 0; i < m; ++i) sums[i] += pieces[j][base + i];
    }
    for (size_t i = 0; i < m; ++i) {
      const int64_t t = sums[i];
      const uint64_t key = keys[base + i];
      // |t| < 2^51: exact as a double through the magic constant.
      const bool small = static_cast<uint64_t>(t) + (uint64_t{1} << 51) < (uint64_t{1} << 52);
      // In unsigned arithmetic: a sum past 2^51 (left to the exact path) may not overflow.
      double d = doubleFromBits(static_cast<uint64_t>(t) + kRoundMagicBits) - kRoundMagic;
      if (average) d = d / divisor;                                   // one rounding to double
      const double v = d * doubleFromBits((1023 + key - 172) << 52);  // exact
      const float result = static_cast<float>(v);                     // one rounding to float
      const bool inexact = average && quotientNeedsExact(v, t != 0);
      needsExact[i] = static_cast<uint8_t>(!small | inexact | (key == 255));
      uint32_t resultBits;
      std::memcpy(&resultBits, &result, 4);
      resultBits &= -static_cast<uint32_t>(key != 0);  // +0 where every leaf is zero
      std::memcpy(&out[base + i], &resultBits, 4);
    }
    for (size_t i = 0; i < m; ++i) {
      if (needsExact[i]) slow.push_back(base + i);
    }
  }
}
// invariantReduceLocal for float32 leaves, at most kDoubleLeaves of them, in double arithmetic:
// each leaf's encoding round(x * 2^(172 - key)) is an integer of magnitude below 2^46, computed
// exactly by the round magic; up to 64 of them sum exactly in a double (below 2^52); scaling back
// by 2^(key - 172) is exact, and so is a division by a power of two, and the conversion to float
// rounds once. Any other divisor rounds the quotient to double first: elements whose quotient the
// rounding may have put on a float midpoint or in float's subnormal range are flagged for the
// exact path, as are non-finite keys.
//
// A key here is max(largest exponent field, 1): the same as keyOf's maximum wherever some leaf is
// nonzero, and 1 instead of 0 where all are zero, which encodes to a sum of +0 all the same.
constexpr int kDoubleLeaves = 64;

// keys[i] and sums[i] (the exact sum of encodings, as a double) for n elements of k leaves;
// returns the largest key.
DETCOLL_VECTOR_CLONES uint32_t sumFloat32Block(const void* const* x, int k, size_t n,
                                               uint32_t* keys, double* sums) {
  for (size_t i = 0; i < n; ++i) keys[i] = loadAt<uint32_t>(x[0], i) & 0x7fffffffu;
  for (int l = 1; l < k; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t magnitude = loadAt<uint32_t>(x[l], i) & 0x7fffffffu;
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
  for (size_t i = 0; i < n; ++i) {
    const double scale = doubleFromBits((uint64_t{1023 + 172} - keys[i]) << 52);
    sums[i] = (static_cast<double>(loadAt<float>(x[0], i)) * scale + kRoundMagic) - kRoundMagic;
  }
  for (int l = 1; l < k; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const double scale = doubleFromBits((uint64_t{1023 + 172} - keys[i]) << 52);
      sums[i] += (static_cast<double>(loadAt<float>(x[l], i)) * scale + kRoundMagic) - kRoundMagic;
    }
  }
  return largest;
}

// out[i] = sums[i] * 2^(key - 172 - log2Divisor), rounded once to float: exact sums, and averages
// over a power-of-two number of leaves.
DETCOLL_VECTOR_CLONES void scaleFloat32Block(void* out, const uint32_t* keys, const double* sums,
                                             size_t n, uint32_t log2Divisor) {
  for (size_t i = 0; i < n; ++i) {
    const double scale = doubleFromBits((uint64_t{1023 - 172} + keys[i] - log2Divisor) << 52);
    storeAt<float>(out, i, static_cast<float>(sums[i] * scale));
  }
}

// Averages over any other number of leaves; needsExact[i] flags the quotients to settle exactly.
DETCOLL_VECTOR_CLONES void divideFloat32Block(void* out, const uint32_t* keys, const double* sums,
                                              size_t n, double divisor, uint8_t* needsExact) {
  for (size_t i = 0; i < n; ++i) {
    const double d = sums[i] / divisor;  // one rounding to double
    const double v = d * doubleFromBits((uint64_t{1023 - 172} + keys[i]) << 52);  // exact
    storeAt<float>(out, i, static_cast<float>(v));  // one rounding to float
    needsExact[i] = static_cast<uint8_t>(quotientNeedsExact(v, sums[i] != 0));
  }
}

// The result of an element with a non-finite leaf, by the one rule: its leaves' counts, decoded.
uint64_t nonFiniteResult(const void* const* leaves, int nleaves, size_t i, const Format& f) {
  int64_t counts = 0;
  for (int l = 0; l < nleaves; ++l)
    counts += codec::nonFiniteCount(loadBits(leaves[l], i, f.bytes), f);
  return codec::decodeElement(counts, codec::specialKey(f), f, false, 1);
}
}  // namespace

size_t exponentKeyBytes(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 1;
    case DataType::kFloat64:
      return 2;
    default:
      return 0;
  }
}

uint32_t nonFiniteKey(DataType type) {
  return (1u << formatOf(type).exponentBits) - 1;
}

uint64_t roundToFloatBits(bool negative, u128 magnitude, int exponent, bool sticky, DataType type) {
  return codec::roundToFloatBits(negative, magnitude, exponent, sticky, formatOf(type));
}

void localMaxKeys(void* keys, const void* const* leaves, int nleaves, size_t begin, size_t n,
                  DataType type) {
  if (type == DataType::kFloat32) {
    return localMaxKeysFloat32(static_cast<uint8_t*>(keys), leaves, nleaves, begin, n);
  }
  if (formats::handles(type)) formats::localMaxKeys(keys, leaves, nleaves, begin, n, type);
  // Integer dtypes have no keys.
}

void foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, DataType type) {
  formats::foldMaxKeys(out, pieces, p, n, exponentKeyBytes(type));
}

void encodeLeaves(int64_t* out, const void* const* leaves, int nleaves, const void* keys,
                  size_t begin, size_t n, DataType type) {
  if (isIntegerType(type)) {
    for (size_t i = 0; i < n; ++i) {
      int64_t sum = 0;
      for (int l = 0; l < nleaves; ++l)
        sum = wrappingAdd(sum, loadInteger(leaves[l], begin + i, type));
      out[i] = sum;
    }
    return;
  }
  const Format f = formatOf(type);
  const size_t kb = exponentKeyBytes(type);
  for (int l = 0; l < nleaves; ++l) {
    if (type == DataType::kFloat32) {
      encodeFloat32(out, leaves[l], static_cast<const uint8_t*>(keys), begin, n, l > 0);
    } else {
      formats::encode(out, leaves[l], keys, begin, n, type, l > 0);
    }
  }
  // The vector loops write 0 under the special key; the counts of the (rare) non-finite leaves go
  // there.
  const uint32_t special = codec::specialKey(f);
  auto addCounts = [&](size_t i) {
    for (int l = 0; l < nleaves; ++l) {
      out[i] += codec::nonFiniteCount(loadBits(leaves[l], begin + i, f.bytes), f);
    }
  };
  if (kb == 1) {
    const auto* k = static_cast<const uint8_t*>(keys);
    for (size_t i = 0; const void* hit = std::memchr(k + i, static_cast<int>(special), n - i);
         ++i) {
      i = static_cast<const uint8_t*>(hit) - k;
      addCounts(i);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (loadKey(keys, i, kb) == special) addCounts(i);
    }
  }
}

void decodeSums(void* out, const int64_t* const* pieces, int p, const void* keys, size_t n,
                DataType type, ReduceOp op, int64_t leaves) {
  const bool average = op == ReduceOp::kAverage;
  if (isIntegerType(type)) {
    for (size_t i = 0; i < n; ++i) {
      int64_t sum = 0;
      for (int j = 0; j < p; ++j) sum = wrappingAdd(sum, pieces[j][i]);
      if (average) sum /= leaves;
      if (type == DataType::kInt32) {
        const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(sum));
        std::memcpy(static_cast<char*>(out) + 4 * i, &v, 4);
      } else {
        std::memcpy(static_cast<char*>(out) + 8 * i, &sum, 8);
      }
    }
    return;
  }
  const Format f = formatOf(type);
  const size_t kb = exponentKeyBytes(type);
  auto exact = [&](size_t i) {
    int64_t sum = 0;  // exact: |sum| < 2^62 for at most 2^H leaves
    for (int j = 0; j < p; ++j) sum += pieces[j][i];
    storeBits(out, i, f.bytes, codec::decodeElement(sum, loadKey(keys, i, kb), f, average, leaves));
  };
  std::vector<size_t> slow;
  if (type == DataType::kFloat32) {
    decodeFloat32(static_cast<float*>(out), pieces, p, static_cast<const uint8_t*>(keys), n,
                  average, leaves, slow);
  } else {
    formats::decode(out, pieces, p, keys, n, type, average, leaves, slow);
  }
  for (size_t i : slow) exact(i);
}

void invariantReduceLocal(void* out, const void* const* leaves, int nleaves, size_t count,
                          DataType type, ReduceOp op) {
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
    foldRankOrder(out, leaves, nleaves, count, type, op, 1);  // order-independent already
    return;
  }
  if (formats::reduceFewLeaves(out, leaves, nleaves, count, type, op)) return;
  if (formats::reduceLocal(out, leaves, nleaves, count, type, op)) return;
  // Blocks small enough for the keys and sums to stay in L1: the leaves are read from memory
  // once and the output written once. Every read of a block's leaves comes before its output is
  // written, so out may alias a leaf.
  constexpr size_t kBlock = 1024;
  const size_t es = dataTypeSize(type);
  std::vector<const void*> at(nleaves);  // the leaves from the block's first element on
  auto block = [&](size_t base) {
    for (int l = 0; l < nleaves; ++l) at[l] = static_cast<const char*>(leaves[l]) + base * es;
    return static_cast<char*>(out) + base * es;
  };
  if (type == DataType::kFloat32 && nleaves <= kDoubleLeaves) {
    alignas(64) uint32_t keys[kBlock];
    alignas(64) double sums[kBlock];
    alignas(64) uint8_t needsExact[kBlock];
    const bool average = op == ReduceOp::kAverage && nleaves > 1;
    const bool powerOfTwo = (nleaves & (nleaves - 1)) == 0;
    const uint32_t log2Divisor = average && powerOfTwo ? __builtin_ctz(nleaves) : 0;
    const Format f = formatOf(type);
    std::vector<std::pair<size_t, uint64_t>> specials;
    for (size_t base = 0; base < count; base += kBlock) {
      const size_t m = std::min(kBlock, count - base);
      void* result = block(base);
      const uint32_t largest = sumFloat32Block(at.data(), nleaves, m, keys, sums);
      // Non-finite results are found before the block is written: out may alias a leaf.
      specials.clear();
      if (largest == 255) {
        for (size_t i = 0; i < m; ++i) {
          if (keys[i] == 255) specials.emplace_back(i, nonFiniteResult(at.data(), nleaves, i, f));
        }
      }
      if (average && !powerOfTwo) {
        divideFloat32Block(result, keys, sums, m, nleaves, needsExact);
        for (size_t i = 0; i < m; ++i) {
          if (needsExact[i] && keys[i] != 255) {
            storeBits(result, i, 4,
                      codec::decodeSum(static_cast<int64_t>(sums[i]), keys[i], f, true, nleaves));
          }
        }
      } else {
        scaleFloat32Block(result, keys, sums, m, log2Divisor);
      }
      for (const auto& [i, bits] : specials) storeBits(result, i, 4, bits);
    }
    return;
  }
  const size_t kb = exponentKeyBytes(type);
  alignas(64) uint8_t keys[kBlock * 2];
  alignas(64) int64_t sums[kBlock];
  const int64_t* pieces[1] = {sums};
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    void* result = block(base);
    if (kb > 0) localMaxKeys(keys, at.data(), nleaves, 0, m, type);
    encodeLeaves(sums, at.data(), nleaves, keys, 0, m, type);
    decodeSums(result, pieces, 1, keys, m, type, op, nleaves);
  }
}

}  // namespace detcoll::kernels
