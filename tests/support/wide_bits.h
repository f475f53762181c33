#pragma once

// Test data in raw dtype bits and its comparison, shared by the unit tests of the GPU data path's
// serial runs (tests/unit/reduce_serial_test.cc, serial_allreduce_test.cc) and the GPU tests
// (tests/gpu/): random leaves over the whole exponent range of a dtype (zeros, -0, subnormals
// and, on request, infinities and NaNs), integer-valued leaves and random exponent keys, the loop
// over piece counts, counts and inf/NaN, where a call's buffers lie (at an aligned address or one
// element off), host buffers between guard bytes, and bit and key comparisons that name the first
// differing element. Header-only, without MPI or MPFR: the GPU tests are also compiled by
// scripts/device_check.sh with nvcc alone.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "tests/support/reference.h"

namespace detcoll::testing {

using Buffer = std::vector<uint8_t>;

// Fill of the bytes that must stay untouched: unused output, guard bytes around a buffer.
constexpr uint8_t kSentinel = 0xa5;

inline bool isFloatType(DataType type) {
  return type != DataType::kInt32 && type != DataType::kInt64;
}

// ---- data ---------------------------------------------------------------------------------------

// The bit layout of a float dtype, written here rather than taken from the codec under test.
struct FloatLayout {
  int mantissaBits;
  int exponentBits;
};

inline FloatLayout floatLayoutOf(DataType type) {
  switch (type) {
    case DataType::kFloat64:
      return {52, 11};
    case DataType::kFloat16:
      return {10, 5};
    case DataType::kBFloat16:
      return {7, 8};
    default:
      return {23, 8};
  }
}

inline void storeElementBits(void* data, size_t i, size_t es, uint64_t bits) {
  std::memcpy(static_cast<char*>(data) + i * es, &bits, es);  // little endian: the low bytes
}

// n leaves of count elements, raw dtype bits, deterministic in seed. Floats: per element, most
// leaves cluster within mantissaBits + 8 binades below an exponent drawn over the whole finite
// range (so that they overlap on the invariant grid and sums round), some elements draw every
// leaf's exponent over the whole range; random fraction bits (non-integers) and signs; about 2.5%
// +0, 1.5% -0 and 2% subnormals besides those the low exponents give; with `specials`, about 2%
// each of +inf, -inf and NaN (random sign and payload). Integers: the full range (sums wrap) and
// small values.
inline std::vector<Buffer> wideLeaves(DataType type, int n, size_t count, uint64_t seed,
                                      bool specials) {
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + 20261121);
  const size_t es = dataTypeSize(type);
  std::vector<Buffer> leaves(n, Buffer(count * es));
  if (!isFloatType(type)) {
    std::uniform_int_distribution<int64_t> small(-1000, 1000);
    for (Buffer& leaf : leaves) {
      for (size_t i = 0; i < count; ++i) {
        int64_t v = static_cast<int64_t>(g());
        if (g() % 5 == 0) v = small(g);
        storeElementBits(leaf.data(), i, es, static_cast<uint64_t>(v));  // int32: the low half
      }
    }
    return leaves;
  }
  const FloatLayout f = floatLayoutOf(type);
  const int maxExponent = (1 << f.exponentBits) - 2;  // the largest finite biased exponent
  const int spread = f.mantissaBits + 8;
  const uint64_t fractionMask = (uint64_t{1} << f.mantissaBits) - 1;
  const uint64_t signBit = uint64_t{1} << (f.mantissaBits + f.exponentBits);
  const uint64_t allOnes = static_cast<uint64_t>(maxExponent + 1) << f.mantissaBits;
  std::uniform_int_distribution<int> center(1, maxExponent);
  std::uniform_int_distribution<int> below(0, spread);
  for (size_t i = 0; i < count; ++i) {
    const bool clustered = g() % 100 < 85;
    const int c = center(g);
    for (Buffer& leaf : leaves) {
      const uint64_t r = g();
      const unsigned u = static_cast<unsigned>(r % 1000);
      const uint64_t sign = ((r >> 20) & 1) ? signBit : 0;
      const uint64_t fraction = (r >> 21) & fractionMask;
      uint64_t bits;
      if (u < 25) {
        bits = 0;
      } else if (u < 40) {
        bits = signBit;
      } else if (u < 60) {
        bits = sign | (fraction | 1);  // subnormal
      } else if (specials && u < 80) {
        bits = allOnes;
      } else if (specials && u < 100) {
        bits = signBit | allOnes;
      } else if (specials && u < 120) {
        bits = sign | allOnes | (fraction | 1);  // NaN, any payload
      } else {
        int e = clustered ? c - below(g) : center(g);
        if (e < 0) e = 0;  // subnormal (or zero, if the fraction is)
        // 43 more random bits for float64's fraction than r has left.
        const uint64_t more = f.mantissaBits > 43 ? (g() & fractionMask) : fraction;
        bits = sign | (static_cast<uint64_t>(e) << f.mantissaBits) | more;
      }
      storeElementBits(leaf.data(), i, es, bits);
    }
  }
  return leaves;
}

// The dtype bits of the integer v (exact: |v| < 2^(mantissa bits + 1) for the float dtypes).
inline uint64_t integerBits(DataType type, int64_t v) {
  if (!isFloatType(type)) return static_cast<uint64_t>(v);
  if (v == 0) return 0;
  const FloatLayout f = floatLayoutOf(type);
  const uint64_t magnitude = static_cast<uint64_t>(v < 0 ? -v : v);
  const int e = 63 - __builtin_clzll(magnitude);
  const int bias = (1 << (f.exponentBits - 1)) - 1;
  const uint64_t fraction =
      (magnitude << (f.mantissaBits - e)) & ((uint64_t{1} << f.mantissaBits) - 1);
  const uint64_t sign = v < 0 ? uint64_t{1} << (f.mantissaBits + f.exponentBits) : 0;
  return sign | (static_cast<uint64_t>(e + bias) << f.mantissaBits) | fraction;
}

// n leaves of count integers drawn from [-range, range], as dtype values.
inline std::vector<Buffer> integerLeaves(DataType type, int n, size_t count, uint64_t seed,
                                         int64_t range) {
  std::mt19937_64 g(seed * 0x2545f4914f6cdd1dull + 7);
  std::uniform_int_distribution<int64_t> pick(-range, range);
  const size_t es = dataTypeSize(type);
  std::vector<Buffer> leaves(n, Buffer(count * es));
  for (Buffer& leaf : leaves) {
    for (size_t i = 0; i < count; ++i)
      storeElementBits(leaf.data(), i, es, integerBits(type, pick(g)));
  }
  return leaves;
}

// The addresses of buffers (host Buffers or Slabs: anything with data()).
template <typename B>
std::vector<const void*> pointersOf(const std::vector<B>& buffers) {
  std::vector<const void*> out;
  for (const B& b : buffers) out.push_back(b.data());
  return out;
}

// p arrays of count exponent keys of kb bytes, deterministic in seed: random keys of every value
// up to `special` (the non-finite key), about 15% zeros and 5% `special`.
inline std::vector<Buffer> randomKeys(int p, size_t count, size_t kb, uint32_t special,
                                      uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<Buffer> pieces(p, Buffer(count * kb));
  for (Buffer& piece : pieces) {
    for (size_t i = 0; i < count; ++i) {
      const uint64_t u = g() % 100;
      const uint64_t key = u < 15 ? 0 : u < 20 ? special : g() % (special + 1);
      storeElementBits(piece.data(), i, kb, key);
    }
  }
  return pieces;
}

// The bytes of an array of int64 (encodings), to compare as DataType::kInt64.
inline Buffer bytesOf(const std::vector<int64_t>& v) {
  Buffer b(v.size() * sizeof(int64_t));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Cuts n leaves into p nonempty groups of random sizes: the p + 1 group boundaries, 0 to n.
inline std::vector<int> groupBoundaries(int n, int p, std::mt19937_64& g) {
  std::vector<int> cuts;
  for (int i = 1; i < n; ++i) cuts.push_back(i);
  std::shuffle(cuts.begin(), cuts.end(), g);
  cuts.resize(p - 1);
  cuts.push_back(0);
  cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// The numbers of pieces (leaves, ranks' encodings) the kernel tests reduce.
constexpr int kPieceCounts[] = {1, 2, 3, 5, 8};

// Calls draw(k, count, specials) for every k of `pieces` and every count of `counts` (those that
// take(k, count) accepts, where given), without and then with inf and NaN (the float dtypes
// only), in that order; stops at the first fatal failure.
template <typename Pieces, typename Counts>
void forEachDraw(DataType type, const Pieces& pieces, const Counts& counts,
                 const std::function<bool(int k, size_t count)>& take,
                 const std::function<void(int k, size_t count, bool specials)>& draw) {
  for (int k : pieces) {
    for (size_t count : counts) {
      if (take && !take(k, count)) continue;
      for (bool specials : {false, true}) {
        if (specials && !isFloatType(type)) continue;
        draw(k, count, specials);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// ---- where a call's buffers lie -----------------------------------------------------------------

// Every buffer 16-byte aligned (the vector path), every one an element off, or only the first
// input (or the output) off: then each call takes the scalar path.
enum class Layout { kAligned, kAllShifted, kFirstInShifted, kOutShifted };
constexpr Layout kLayouts[] = {Layout::kAligned, Layout::kAllShifted, Layout::kFirstInShifted,
                               Layout::kOutShifted};

inline std::string layoutName(Layout layout) {
  static const char* const kNames[] = {"aligned", "all shifted by one element",
                                       "first input shifted", "output shifted"};
  return kNames[static_cast<int>(layout)];
}

// The shift in bytes of the output (isOut) or of input `index` under `layout`; es: one element.
inline size_t shiftOf(Layout layout, bool isOut, size_t index, size_t es) {
  const bool shifted = layout == Layout::kAllShifted ||
                       (layout == Layout::kFirstInShifted && !isOut && index == 0) ||
                       (layout == Layout::kOutShifted && isOut);
  return shifted ? es : 0;
}

// A host buffer at a 64-byte boundary plus `shift` bytes, between guard bytes that must stay
// kSentinel. Movable (the storage does not move), not copyable.
class Slab {
 public:
  static constexpr size_t kGuard = 32;

  Slab(size_t bytes, size_t shift)
      : bytes_(bytes), storage_(bytes + shift + 64 + kGuard, kSentinel) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    begin_ = (64 - address % 64) % 64 + shift;
  }
  Slab(const Buffer& contents, size_t shift) : Slab(contents.size(), shift) {
    if (!contents.empty()) std::memcpy(data(), contents.data(), contents.size());
  }
  Slab(Slab&&) = default;
  Slab& operator=(Slab&&) = default;
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;

  uint8_t* data() { return storage_.data() + begin_; }
  const uint8_t* data() const { return storage_.data() + begin_; }
  Buffer contents() const { return Buffer(data(), data() + bytes_); }
  bool guardsIntact() const {
    for (size_t i = 0; i < storage_.size(); ++i) {
      if ((i < begin_ || i >= begin_ + bytes_) && storage_[i] != kSentinel) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  Buffer storage_;
  size_t begin_ = 0;
};

// Copies of the inputs, laid out as `layout` says (es: one element).
inline std::vector<Slab> slabsOf(const std::vector<Buffer>& buffers, Layout layout, size_t es) {
  std::vector<Slab> slabs;
  for (size_t j = 0; j < buffers.size(); ++j) {
    slabs.emplace_back(buffers[j], shiftOf(layout, false, j, es));
  }
  return slabs;
}

// ---- comparisons --------------------------------------------------------------------------------

// Bit equality of count elements with the first differing element described.
inline ::testing::AssertionResult sameBits(const void* actual, const void* expected, size_t count,
                                           DataType type) {
  const long i = firstDifference(actual, expected, count, type);
  if (i < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dataTypeName(type) << " element " << i << " of " << count
                                       << ": got " << describeElement(actual, i, type)
                                       << ", reference " << describeElement(expected, i, type);
}

// Key i of an array of kb-byte exponent keys.
inline uint32_t keyAt(const void* keys, size_t i, size_t kb) {
  uint32_t k = 0;
  std::memcpy(&k, static_cast<const char*>(keys) + i * kb, kb);  // little endian: the low bytes
  return k;
}

// Equality of count keys of kb bytes (1 or 2), the first difference named in decimal and hex.
inline ::testing::AssertionResult sameKeys(const void* got, const void* want, size_t count,
                                           size_t kb) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t g = keyAt(got, i, kb), w = keyAt(want, i, kb);
    if (g != w) {
      return ::testing::AssertionFailure()
             << "key " << i << " of " << count << ": got " << g << " (0x" << std::hex << g
             << std::dec << "), expected " << w << " (0x" << std::hex << w << std::dec << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// What a call's output must hold: `want`, compared as count elements of `type` bit for bit or,
// where keyBytes > 0, as count exponent keys of keyBytes bytes.
struct Expected {
  const Buffer& want;
  size_t count;
  DataType type;
  size_t keyBytes = 0;

  size_t elementBytes() const { return keyBytes > 0 ? keyBytes : dataTypeSize(type); }
  ::testing::AssertionResult heldBy(const void* got) const {
    if (keyBytes > 0) return sameKeys(got, want.data(), count, keyBytes);
    return sameBits(got, want.data(), count, type);
  }
};

}  // namespace detcoll::testing
