// kernels/reduce_parallel.h on the host executor (kernels/host_executor.h): the GPU data path's
// kernel bodies, run as their CPU twins, against the CPU reference kernels of kernels/fold.h and
// kernels/fixed_point.h, bit for bit. Every dtype and op, 1 to 70 pieces, lengths that leave
// vector tails, 16-byte aligned buffers (the vector path) and buffers shifted by one element (the
// scalar path), in place; random non-integer inputs over the whole exponent range of the dtype
// with zeros, -0, subnormals and, in some runs, infinities and NaNs.

#include "kernels/reduce_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "kernels/host_executor.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

namespace par = kernels::parallel;

using testing::Buffer;
using testing::kSentinel;
using testing::sameBits;

constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                    DataType::kBFloat16};
constexpr size_t kGuard = 32;

bool isFloat(DataType type) {
  return type != DataType::kInt32 && type != DataType::kInt64;
}

// The bit layout of a float dtype, written here rather than taken from the codec under test.
struct FloatLayout {
  int mantissaBits;
  int exponentBits;
};

FloatLayout layoutOf(DataType type) {
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

void storeBits(void* data, size_t i, size_t es, uint64_t bits) {
  std::memcpy(static_cast<char*>(data) + i * es, &bits, es);  // little endian: the low bytes
}

// nleaves buffers of count elements, raw dtype bits. Floats: per element, most leaves cluster
// within mantissaBits + 8 binades below an exponent drawn over the whole finite range (so that
// leaves overlap on the invariant grid), some elements draw every leaf's exponent over the whole
// range; random fraction bits and signs; about 2.5% +0, 1.5% -0 and 2% subnormals besides the
// ones the low exponents give; with `specials`, about 2% each of +inf, -inf and NaN (random sign
// and payload). Integers: the full range (sums wrap) and some small values.
std::vector<Buffer> wideLeaves(DataType type, int nleaves, size_t count, uint64_t seed,
                               bool specials) {
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + 12345);
  const size_t es = dataTypeSize(type);
  std::vector<Buffer> leaves(nleaves, Buffer(count * es));
  if (!isFloat(type)) {
    std::uniform_int_distribution<int64_t> small(-1000, 1000);
    for (Buffer& leaf : leaves) {
      for (size_t i = 0; i < count; ++i) {
        int64_t v = static_cast<int64_t>(g());
        if (g() % 5 == 0) v = small(g);
        if (type == DataType::kInt32) {
          const int32_t w = static_cast<int32_t>(static_cast<uint32_t>(v));
          std::memcpy(leaf.data() + 4 * i, &w, 4);
        } else {
          std::memcpy(leaf.data() + 8 * i, &v, 8);
        }
      }
    }
    return leaves;
  }
  const FloatLayout f = layoutOf(type);
  const int maxExponent = (1 << f.exponentBits) - 2;  // the largest finite biased exponent
  const int spread = f.mantissaBits + 8;
  const uint64_t fractionMask = (uint64_t{1} << f.mantissaBits) - 1;
  const uint64_t signBit = uint64_t{1} << (f.mantissaBits + f.exponentBits);
  const uint64_t allOnes = static_cast<uint64_t>(maxExponent + 1) << f.mantissaBits;
  std::uniform_int_distribution<int> center(1, maxExponent);
  std::uniform_int_distribution<int> below(0, spread);
  std::uniform_int_distribution<int> kind(0, 999);
  for (size_t i = 0; i < count; ++i) {
    const bool clustered = g() % 100 < 85;
    const int c = center(g);
    for (Buffer& leaf : leaves) {
      const int u = kind(g);
      const uint64_t sign = (g() & 1) ? signBit : 0;
      const uint64_t fraction = g() & fractionMask;
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
        bits = sign | (static_cast<uint64_t>(e) << f.mantissaBits) | fraction;
      }
      storeBits(leaf.data(), i, es, bits);
    }
  }
  return leaves;
}

std::vector<const void*> pointersOf(const std::vector<Buffer>& buffers) {
  std::vector<const void*> out;
  for (const Buffer& b : buffers) out.push_back(b.data());
  return out;
}

// A buffer at a 64-byte boundary plus `shift` bytes, between guard bytes that must stay
// kSentinel. Movable (the storage does not move), not copyable.
class Slab {
 public:
  Slab(size_t bytes, size_t shift)
      : bytes_(bytes), storage_(bytes + shift + 64 + kGuard, kSentinel) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    begin_ = (64 - address % 64) % 64 + shift;
  }
  Slab(const Buffer& contents, size_t shift) : Slab(contents.size(), shift) {
    std::memcpy(data(), contents.data(), contents.size());
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

// Where the buffers of a twin call lie: all 16-byte aligned (the vector path), or some of them one
// element off (every call then takes the scalar path).
enum class Layout { kAligned, kAllShifted, kOutShifted, kFirstInShifted };
constexpr Layout kLayouts[] = {Layout::kAligned, Layout::kAllShifted, Layout::kOutShifted,
                               Layout::kFirstInShifted};

std::string layoutName(Layout layout) {
  switch (layout) {
    case Layout::kAligned:
      return "aligned";
    case Layout::kAllShifted:
      return "all shifted";
    case Layout::kOutShifted:
      return "out shifted";
    case Layout::kFirstInShifted:
      return "first input shifted";
  }
  return "?";
}

size_t shiftOf(Layout layout, bool isOut, int index, size_t es) {
  switch (layout) {
    case Layout::kAligned:
      return 0;
    case Layout::kAllShifted:
      return es;
    case Layout::kOutShifted:
      return isOut ? es : 0;
    case Layout::kFirstInShifted:
      return !isOut && index == 0 ? es : 0;
  }
  return 0;
}

std::vector<Slab> slabsOf(const std::vector<Buffer>& buffers, Layout layout, size_t es) {
  std::vector<Slab> slabs;
  for (size_t j = 0; j < buffers.size(); ++j) {
    slabs.emplace_back(buffers[j], shiftOf(layout, false, static_cast<int>(j), es));
  }
  return slabs;
}

std::vector<const void*> pointersOf(const std::vector<Slab>& slabs) {
  std::vector<const void*> out;
  for (const Slab& s : slabs) out.push_back(s.data());
  return out;
}

// The inputs still hold what they were given.
::testing::AssertionResult inputsUnchanged(const std::vector<Slab>& slabs,
                                           const std::vector<Buffer>& original, int skip = -1) {
  for (size_t j = 0; j < slabs.size(); ++j) {
    if (static_cast<int>(j) == skip) continue;
    if (slabs[j].contents() != original[j]) {
      return ::testing::AssertionFailure() << "input " << j << " was written";
    }
    if (!slabs[j].guardsIntact()) {
      return ::testing::AssertionFailure() << "the guard bytes around input " << j << " changed";
    }
  }
  return ::testing::AssertionSuccess();
}

// An integer in decimal and hex.
template <typename T>
std::string decimalAndHex(T v) {
  std::ostringstream text;
  text << +v << " (0x" << std::hex << +v << ")";
  return text.str();
}

// Element-wise equality of two arrays of integers (keys, int64 sums), first difference named.
template <typename T>
::testing::AssertionResult sameValues(const T* got, const T* want, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << what << " element " << i << " of " << n << ": twin " << decimalAndHex(got[i])
             << ", expected " << decimalAndHex(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult sameKeys(const void* got, const void* want, size_t n, size_t kb) {
  if (kb == 1) {
    return sameValues(static_cast<const uint8_t*>(got), static_cast<const uint8_t*>(want), n,
                      "key");
  }
  return sameValues(static_cast<const uint16_t*>(got), static_cast<const uint16_t*>(want), n,
                    "key");
}

uint32_t keyAt(const void* keys, size_t i, size_t kb) {
  if (kb == 1) return static_cast<const uint8_t*>(keys)[i];
  uint16_t k;
  std::memcpy(&k, static_cast<const char*>(keys) + 2 * i, 2);
  return k;
}

std::string label(DataType type, ReduceOp op) {
  return dataTypeName(type) + "_" + reduceOpName(op);
}

// Counts with vector tails of every length (16 bytes hold 2 to 8 elements), and none at all.
constexpr size_t kCounts[] = {0, 1, 7, 8, 9, 33, 1031, 2053};

// ---- the rank-order fold ------------------------------------------------------------------------

class ReduceTwinFoldTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceTwinFoldTest, MatchesCpuFold) {
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  for (int k : {1, 2, 3, 5, 8}) {
    std::vector<int64_t> divisors = {1};
    if (op == ReduceOp::kAverage) divisors = {k, 3, 7};
    for (size_t count : kCounts) {
      for (bool specials : {false, true}) {
        if (specials && !isFloat(type)) continue;
        const auto leaves = wideLeaves(type, k, count, ++seed + 1000 * k, specials);
        for (int64_t divisor : divisors) {
          Buffer want(count * es);
          kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), k, count, type, op,
                                 divisor);
          for (Layout layout : kLayouts) {
            SCOPED_TRACE(label(type, op) + " k=" + std::to_string(k) +
                         " count=" + std::to_string(count) + " divisor=" + std::to_string(divisor) +
                         " " + layoutName(layout) + (specials ? " with inf/NaN" : ""));
            std::vector<Slab> in = slabsOf(leaves, layout, es);
            Slab out(count * es, shiftOf(layout, true, 0, es));
            kernels::HostExecutor e;
            par::foldRankOrder(e, out.data(), pointersOf(in).data(), k, count, type, op, divisor);
            ASSERT_TRUE(e.status().isOk()) << e.status().toString();
            ASSERT_TRUE(sameBits(out.data(), want.data(), count, type));
            ASSERT_TRUE(out.guardsIntact()) << "wrote outside out";
            ASSERT_TRUE(inputsUnchanged(in, leaves));
          }
        }
      }
    }
  }
}

TEST_P(ReduceTwinFoldTest, InPlaceOverEachInput) {
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  for (int k : {1, 2, 3, 5, 8}) {
    const int64_t divisor = op == ReduceOp::kAverage ? 3 : 1;
    for (size_t count : {size_t{9}, size_t{33}, size_t{1031}}) {
      const auto leaves = wideLeaves(type, k, count, ++seed + 77 * k, isFloat(type));
      Buffer want(count * es);
      kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), k, count, type, op, divisor);
      for (int j : {0, k / 2, k - 1}) {
        for (Layout layout : {Layout::kAligned, Layout::kAllShifted}) {
          SCOPED_TRACE(label(type, op) + " k=" + std::to_string(k) +
                       " count=" + std::to_string(count) + " out=input " + std::to_string(j) + " " +
                       layoutName(layout));
          std::vector<Slab> in = slabsOf(leaves, layout, es);
          kernels::HostExecutor e;
          par::foldRankOrder(e, in[j].data(), pointersOf(in).data(), k, count, type, op, divisor);
          ASSERT_TRUE(e.status().isOk()) << e.status().toString();
          ASSERT_TRUE(sameBits(in[j].data(), want.data(), count, type));
          ASSERT_TRUE(in[j].guardsIntact()) << "wrote outside out";
          ASSERT_TRUE(inputsUnchanged(in, leaves, j));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceTwinFoldTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllTypes),
                                            ::testing::ValuesIn(testing::kAllOps)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param), std::get<1>(info.param));
                         });

// ---- exponent keys ------------------------------------------------------------------------------

class ReduceTwinKeysTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceTwinKeysTest, KeyWidthIsTheCodecs) {
  const DataType type = GetParam();
  EXPECT_EQ(kernels::exponentKeyBytes(type), type == DataType::kFloat64 ? 2u : 1u);
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    EXPECT_EQ(sizeof(par::KeyOf<T>), kernels::exponentKeyBytes(type));
  });
}

TEST_P(ReduceTwinKeysTest, LocalMaxKeysMatchCpu) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  uint64_t seed = 0;
  for (int nleaves : {1, 2, 3, 5, 8}) {
    for (size_t count : kCounts) {
      for (bool specials : {false, true}) {
        const auto leaves = wideLeaves(type, nleaves, count, ++seed + 500 * nleaves, specials);
        Buffer want(count * kb);
        kernels::localMaxKeys(want.data(), pointersOf(leaves).data(), nleaves, 0, count, type);
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(dataTypeName(type) + " nleaves=" + std::to_string(nleaves) +
                       " count=" + std::to_string(count) + " " + layoutName(layout) +
                       (specials ? " with inf/NaN" : ""));
          std::vector<Slab> in = slabsOf(leaves, layout, es);
          // Keys are written one by one: an odd address is fine.
          Slab keys(count * kb, shiftOf(layout, true, 0, 1));
          kernels::HostExecutor e;
          par::localMaxKeys(e, keys.data(), pointersOf(in).data(), nleaves, count, type);
          ASSERT_TRUE(e.status().isOk()) << e.status().toString();
          ASSERT_TRUE(sameKeys(keys.data(), want.data(), count, kb));
          ASSERT_TRUE(keys.guardsIntact()) << "wrote outside keys";
          ASSERT_TRUE(inputsUnchanged(in, leaves));
        }
      }
    }
  }
}

TEST_P(ReduceTwinKeysTest, FoldMaxKeysMatchCpu) {
  const DataType type = GetParam();
  const size_t kb = kernels::exponentKeyBytes(type);
  const uint32_t special = kernels::nonFiniteKey(type);
  uint64_t seed = 0;
  for (int p : {1, 2, 3, 5, 8}) {
    for (size_t count : kCounts) {
      // Random keys of every value, many zeros and some non-finite keys.
      std::mt19937_64 g(++seed * 31 + p);
      std::vector<Buffer> pieces(p, Buffer(count * kb));
      for (Buffer& piece : pieces) {
        for (size_t i = 0; i < count; ++i) {
          const uint64_t u = g() % 100;
          const uint64_t key = u < 15 ? 0 : u < 20 ? special : g() % (special + 1);
          std::memcpy(piece.data() + i * kb, &key, kb);
        }
      }
      Buffer want(count * kb);
      kernels::foldMaxKeys(want.data(), pointersOf(pieces).data(), p, count, type);
      for (int inPlace = -1; inPlace < p; inPlace += std::max(1, p / 2)) {
        SCOPED_TRACE(dataTypeName(type) + " p=" + std::to_string(p) +
                     " count=" + std::to_string(count) +
                     (inPlace >= 0 ? " out=piece " + std::to_string(inPlace) : " out of place"));
        std::vector<Slab> in = slabsOf(pieces, Layout::kFirstInShifted, kb);
        Slab separate(count * kb, 0);
        uint8_t* out = inPlace >= 0 ? in[inPlace].data() : separate.data();
        kernels::HostExecutor e;
        par::foldMaxKeys(e, out, pointersOf(in).data(), p, count, type);
        ASSERT_TRUE(e.status().isOk()) << e.status().toString();
        ASSERT_TRUE(sameKeys(out, want.data(), count, kb));
        ASSERT_TRUE(separate.guardsIntact()) << "wrote outside out";
        ASSERT_TRUE(inputsUnchanged(in, pieces, inPlace));
        if (inPlace >= 0) ASSERT_TRUE(in[inPlace].guardsIntact()) << "wrote outside out";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, ReduceTwinKeysTest, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

// ---- encodings and their decoding ---------------------------------------------------------------

// Keys of the leaves [0, nleaves) by the CPU reference (an empty buffer for integers).
Buffer cpuKeys(const std::vector<Buffer>& leaves, size_t count, DataType type) {
  const size_t kb = kernels::exponentKeyBytes(type);
  Buffer keys(std::max<size_t>(count * kb, 1));
  if (kb > 0) {
    kernels::localMaxKeys(keys.data(), pointersOf(leaves).data(), static_cast<int>(leaves.size()),
                          0, count, type);
  }
  return keys;
}

// Leaves [begin, end) of `leaves`.
std::vector<Buffer> slice(const std::vector<Buffer>& leaves, int begin, int end) {
  return std::vector<Buffer>(leaves.begin() + begin, leaves.begin() + end);
}

// Cuts n leaves into p nonempty groups of random sizes: the group boundaries.
std::vector<int> groupBoundaries(int n, int p, std::mt19937_64& g) {
  std::vector<int> cuts;
  for (int i = 1; i < n; ++i) cuts.push_back(i);
  std::shuffle(cuts.begin(), cuts.end(), g);
  cuts.resize(p - 1);
  cuts.push_back(0);
  cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

class ReduceTwinEncodeTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceTwinEncodeTest, EncodingsMatchCpuAndCarryNonFiniteCounts) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  const bool floating = isFloat(type);
  uint64_t seed = 0;
  size_t specialElements = 0;
  for (int total : {1, 2, 3, 5, 8}) {
    for (size_t count : kCounts) {
      for (bool specials : {false, true}) {
        if (specials && !floating) continue;
        const auto all = wideLeaves(type, total, count, ++seed + 300 * total, specials);
        // The keys are those of every leaf (as after the key allreduce); the group is some of
        // them (one rank's leaves).
        const Buffer keys = cpuKeys(all, count, type);
        for (int groupEnd : {total, (total + 1) / 2}) {
          const auto group = slice(all, 0, groupEnd);
          std::vector<int64_t> want(count + 1);
          kernels::encodeLeaves(want.data(), pointersOf(group).data(), groupEnd, keys.data(), 0,
                                count, type);
          std::vector<int64_t> counts;
          if (floating) {
            counts.assign(3 * kernels::countNonFiniteKeys(keys.data(), count, type), 0);
            kernels::countNonFinite(counts.data(), pointersOf(group).data(), groupEnd, keys.data(),
                                    count, type);
          }
          for (Layout layout : {Layout::kAligned, Layout::kAllShifted, Layout::kFirstInShifted}) {
            SCOPED_TRACE(dataTypeName(type) + " leaves " + std::to_string(groupEnd) + " of " +
                         std::to_string(total) + " count=" + std::to_string(count) + " " +
                         layoutName(layout) + (specials ? " with inf/NaN" : ""));
            std::vector<Slab> in = slabsOf(group, layout, es);
            Slab out(count * sizeof(int64_t), shiftOf(layout, true, 0, sizeof(int64_t)));
            kernels::HostExecutor e;
            par::encodeLeaves(e, reinterpret_cast<int64_t*>(out.data()), pointersOf(in).data(),
                              groupEnd, keys.data(), count, type);
            ASSERT_TRUE(e.status().isOk()) << e.status().toString();
            std::vector<int64_t> got(count);
            std::memcpy(got.data(), out.data(), count * sizeof(int64_t));
            // Where the key is the non-finite key, the twin carries the packed counts.
            std::vector<int64_t> expected(want.begin(), want.begin() + count);
            size_t k = 0;
            for (size_t i = 0; i < count && floating; ++i) {
              if (keyAt(keys.data(), i, kb) != kernels::nonFiniteKey(type)) continue;
              ASSERT_EQ(want[i], 0) << "the CPU encodes a non-finite element as 0, element " << i;
              const int64_t* c = &counts[3 * k++];
              expected[i] = c[0] | (c[1] << par::kCountBits) | (c[2] << (2 * par::kCountBits));
            }
            specialElements += k;
            ASSERT_TRUE(sameValues(got.data(), expected.data(), count, "encoding"));
            ASSERT_TRUE(out.guardsIntact()) << "wrote outside out";
            ASSERT_TRUE(inputsUnchanged(in, group));
          }
        }
      }
    }
  }
  if (floating) EXPECT_GT(specialElements, 100u) << "the data must exercise the non-finite counts";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceTwinEncodeTest, ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

class ReduceTwinDecodeTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceTwinDecodeTest, DecodedSumsMatchCpuDecodeAndNonFinite) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  const bool floating = isFloat(type);
  uint64_t seed = 0;
  for (int total : {1, 2, 3, 5, 8, 9}) {
    for (int p : {1, 2, 3}) {
      if (p > total) continue;
      for (size_t count : kCounts) {
        for (bool specials : {false, true}) {
          if (specials && !floating) continue;
          ++seed;
          std::mt19937_64 g(seed * 101 + total);
          const auto all = wideLeaves(type, total, count, seed + 700 * total, specials);
          const Buffer keys = cpuKeys(all, count, type);
          const std::vector<int> cuts = groupBoundaries(total, p, g);
          // p pieces: each group's leaves encoded by the twin and by the CPU.
          std::vector<std::vector<int64_t>> twinPieces, cpuPieces;
          for (int j = 0; j < p; ++j) {
            const auto group = slice(all, cuts[j], cuts[j + 1]);
            const int n = cuts[j + 1] - cuts[j];
            twinPieces.emplace_back(count + 1);
            cpuPieces.emplace_back(count + 1);
            kernels::HostExecutor e;
            par::encodeLeaves(e, twinPieces.back().data(), pointersOf(group).data(), n, keys.data(),
                              count, type);
            ASSERT_TRUE(e.status().isOk()) << e.status().toString();
            kernels::encodeLeaves(cpuPieces.back().data(), pointersOf(group).data(), n, keys.data(),
                                  0, count, type);
          }
          std::vector<const int64_t*> twinPointers, cpuPointers;
          for (int j = 0; j < p; ++j) {
            twinPointers.push_back(twinPieces[j].data());
            cpuPointers.push_back(cpuPieces[j].data());
          }
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
            Buffer want(count * es);
            kernels::decodeSums(want.data(), cpuPointers.data(), p, keys.data(), count, type, op,
                                total);
            if (floating) {
              const size_t nonFinite = kernels::countNonFiniteKeys(keys.data(), count, type);
              std::vector<int64_t> counts(3 * nonFinite, 0);
              kernels::countNonFinite(counts.data(), pointersOf(all).data(), total, keys.data(),
                                      count, type);
              kernels::applyNonFinite(want.data(), counts.data(), keys.data(), count, type);
            }
            for (bool shifted : {false, true}) {
              SCOPED_TRACE(label(type, op) + " leaves=" + std::to_string(total) +
                           " pieces=" + std::to_string(p) + " count=" + std::to_string(count) +
                           (shifted ? " out shifted" : " out aligned") +
                           (specials ? " with inf/NaN" : ""));
              Slab out(count * es, shifted ? es : 0);
              kernels::HostExecutor e;
              par::decodeSums(e, out.data(), twinPointers.data(), p, keys.data(), count, type, op,
                              total);
              ASSERT_TRUE(e.status().isOk()) << e.status().toString();
              ASSERT_TRUE(sameBits(out.data(), want.data(), count, type));
              ASSERT_TRUE(out.guardsIntact()) << "wrote outside out";
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceTwinDecodeTest, ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

// ---- the invariant reduction of leaves held in one place ----------------------------------------

class ReduceTwinInvariantLocalTest
    : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceTwinInvariantLocalTest, MatchesCpuOutOfPlaceInPlaceAndPermuted) {
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  // Up to 64 float32 leaves take the CPU's double fast path; 70 the exact path.
  for (int nleaves : {1, 2, 3, 4, 5, 6, 7, 8, 9, 70}) {
    const std::vector<size_t> counts = nleaves > 9
                                           ? std::vector<size_t>{33, 1031}
                                           : std::vector<size_t>{1, 7, 8, 9, 33, 1031, 2053};
    for (size_t count : counts) {
      for (bool specials : {false, true}) {
        if (specials && !isFloat(type)) continue;
        const auto leaves = wideLeaves(type, nleaves, count, ++seed + 900 * nleaves, specials);
        Buffer want(count * es);
        kernels::invariantReduceLocal(want.data(), pointersOf(leaves).data(), nleaves, count, type,
                                      op);
        for (Layout layout : kLayouts) {
          const std::string where = label(type, op) + " nleaves=" + std::to_string(nleaves) +
                                    " count=" + std::to_string(count) + " " + layoutName(layout) +
                                    (specials ? " with inf/NaN" : "");
          {
            SCOPED_TRACE(where + " out of place");
            std::vector<Slab> in = slabsOf(leaves, layout, es);
            Slab out(count * es, shiftOf(layout, true, 0, es));
            kernels::HostExecutor e;
            par::invariantReduceLocal(e, out.data(), pointersOf(in).data(), nleaves, count, type,
                                      op);
            ASSERT_TRUE(e.status().isOk()) << e.status().toString();
            ASSERT_TRUE(sameBits(out.data(), want.data(), count, type));
            ASSERT_TRUE(out.guardsIntact()) << "wrote outside out";
            ASSERT_TRUE(inputsUnchanged(in, leaves));
          }
          if (layout == Layout::kOutShifted) continue;  // in place: out is a leaf
          {
            const int j = static_cast<int>(seed % nleaves);
            SCOPED_TRACE(where + " in place over leaf " + std::to_string(j));
            std::vector<Slab> in = slabsOf(leaves, layout, es);
            kernels::HostExecutor e;
            par::invariantReduceLocal(e, in[j].data(), pointersOf(in).data(), nleaves, count, type,
                                      op);
            ASSERT_TRUE(e.status().isOk()) << e.status().toString();
            ASSERT_TRUE(sameBits(in[j].data(), want.data(), count, type));
            ASSERT_TRUE(in[j].guardsIntact()) << "wrote outside out";
            ASSERT_TRUE(inputsUnchanged(in, leaves, j));
          }
        }
        // The result depends on the multiset of leaves only: the leaves in another order.
        std::vector<Buffer> permuted = leaves;
        std::shuffle(permuted.begin(), permuted.end(), std::mt19937_64(seed));
        std::reverse(permuted.begin(), permuted.end());
        SCOPED_TRACE(label(type, op) + " nleaves=" + std::to_string(nleaves) +
                     " count=" + std::to_string(count) + " leaves permuted");
        Buffer out(count * es);
        kernels::HostExecutor e;
        par::invariantReduceLocal(e, out.data(), pointersOf(permuted).data(), nleaves, count, type,
                                  op);
        ASSERT_TRUE(sameBits(out.data(), want.data(), count, type));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceTwinInvariantLocalTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllTypes),
                                            ::testing::ValuesIn(testing::kAllOps)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param), std::get<1>(info.param));
                         });

}  // namespace
}  // namespace detcoll
