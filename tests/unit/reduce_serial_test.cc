// kernels/bodies/reduce.h on the serial executor (tests/support/serial_executor.h): the GPU data
// path's kernel bodies, run one index at a time on the host, against the CPU reference kernels of
// kernels/fold.h and kernels/fixed_point.h, bit for bit. Every dtype and op, 1 to 70 pieces,
// lengths that leave vector tails, 16-byte aligned buffers (the vector path) and buffers shifted by
// one element (the scalar path), in place; random non-integer inputs over the whole exponent range
// of the dtype with zeros, -0, subnormals and, in some runs, infinities and NaNs.

#include "kernels/bodies/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "kernels/codec.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "tests/support/codec_reference.h"
#include "tests/support/reference.h"
#include "tests/support/serial_executor.h"
#include "tests/support/wide_bits.h"

namespace detcoll {
namespace {

namespace par = kernels::bodies;

using testing::Buffer;
using testing::Expected;
using testing::forEachDraw;
using testing::isFloatType;
using testing::kLayouts;
using testing::kPieceCounts;
using testing::Layout;
using testing::layoutName;
using testing::pointersOf;
using testing::sameBits;
using testing::Slab;
using testing::slabsOf;
using testing::wideLeaves;

static_assert(kernels::codec::kCountBits == testing::kNonFiniteCountBits,
              "tests/support/codec_reference.h packs the non-finite counts as the serial runs do");

// The inputs still hold what they were given (all but input `skip`), and their guards are intact.
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

// A serial kernel call on the host executor: writes `out` from the inputs `in`.
using SerialCall =
    std::function<void(testing::SerialExecutor&, uint8_t* out, const void* const* in)>;

// Runs `call` on copies of `inputs` (elements of es bytes) laid out as `layout`, into an output
// of its own (inPlace < 0) or over input inPlace, and checks that it succeeded, that the output
// holds what `expected` says, that nothing was written around the output and that the other
// inputs are unchanged.
::testing::AssertionResult serialGives(const std::vector<Buffer>& inputs, size_t es, Layout layout,
                                       int inPlace, const Expected& expected,
                                       const SerialCall& call) {
  const size_t outEs = expected.elementBytes();
  std::vector<Slab> in = slabsOf(inputs, layout, es);
  Slab separate(inPlace >= 0 ? 0 : expected.count * outEs,
                testing::shiftOf(layout, true, 0, outEs));
  Slab& out = inPlace >= 0 ? in[inPlace] : separate;
  testing::SerialExecutor e;
  call(e, out.data(), pointersOf(in).data());
  if (!e.status().isOk()) return ::testing::AssertionFailure() << e.status().toString();
  ::testing::AssertionResult same = expected.heldBy(out.data());
  if (!same) return same;
  if (!out.guardsIntact()) return ::testing::AssertionFailure() << "wrote outside out";
  return inputsUnchanged(in, inputs, inPlace);
}

std::string label(DataType type, ReduceOp op) {
  return dataTypeName(type) + "_" + reduceOpName(op);
}

// Counts with vector tails of every length (16 bytes hold 2 to 8 elements), and none at all.
constexpr size_t kCounts[] = {0, 1, 7, 8, 9, 33, 1031, 2053};

// ---- the rank-order fold ------------------------------------------------------------------------

class ReduceSerialFoldTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceSerialFoldTest, MatchesCpuFold) {
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  forEachDraw(type, kPieceCounts, kCounts, nullptr, [&](int k, size_t count, bool specials) {
    const auto leaves = wideLeaves(type, k, count, ++seed + 1000 * k, specials);
    for (int64_t divisor :
         op == ReduceOp::kAverage ? std::vector<int64_t>{k, 3, 7} : std::vector<int64_t>{1}) {
      const SerialCall fold = [&](testing::SerialExecutor& e, uint8_t* out, const void* const* in) {
        par::foldRankOrder(e, out, in, k, count, type, op, divisor);
      };
      Buffer want(count * es);
      kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), k, count, type, op, divisor);
      for (Layout layout : kLayouts) {
        ASSERT_TRUE(serialGives(leaves, es, layout, -1, {want, count, type}, fold))
            << label(type, op) << " k=" << k << " count=" << count << " divisor=" << divisor << " "
            << layoutName(layout) << (specials ? " with inf/NaN" : "");
      }
    }
  });
}

TEST_P(ReduceSerialFoldTest, InPlaceOverEachInput) {
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  for (int k : kPieceCounts) {
    const int64_t divisor = op == ReduceOp::kAverage ? 3 : 1;
    for (size_t count : {size_t{9}, size_t{33}, size_t{1031}}) {
      const auto leaves = wideLeaves(type, k, count, ++seed + 77 * k, isFloatType(type));
      Buffer want(count * es);
      kernels::foldRankOrder(want.data(), pointersOf(leaves).data(), k, count, type, op, divisor);
      const SerialCall fold = [&](testing::SerialExecutor& e, uint8_t* out, const void* const* in) {
        par::foldRankOrder(e, out, in, k, count, type, op, divisor);
      };
      for (int j : {0, k / 2, k - 1}) {
        for (Layout layout : {Layout::kAligned, Layout::kAllShifted}) {
          ASSERT_TRUE(serialGives(leaves, es, layout, j, {want, count, type}, fold))
              << label(type, op) << " k=" << k << " count=" << count << " out=input " << j << " "
              << layoutName(layout);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceSerialFoldTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllTypes),
                                            ::testing::ValuesIn(testing::kAllOps)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param), std::get<1>(info.param));
                         });

// ---- exponent keys ------------------------------------------------------------------------------

class ReduceSerialKeysTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceSerialKeysTest, KeyWidthIsTheCodecs) {
  const DataType type = GetParam();
  EXPECT_EQ(kernels::exponentKeyBytes(type), type == DataType::kFloat64 ? 2u : 1u);
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    EXPECT_EQ(sizeof(par::KeyOf<T>), kernels::exponentKeyBytes(type));
  });
}

TEST_P(ReduceSerialKeysTest, LocalMaxKeysMatchCpu) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  uint64_t seed = 0;
  forEachDraw(type, kPieceCounts, kCounts, nullptr, [&](int nleaves, size_t count, bool specials) {
    const auto leaves = wideLeaves(type, nleaves, count, ++seed + 500 * nleaves, specials);
    Buffer want(count * kb);
    kernels::localMaxKeys(want.data(), pointersOf(leaves).data(), nleaves, 0, count, type);
    for (Layout layout : kLayouts) {
      SCOPED_TRACE(dataTypeName(type) + " nleaves=" + std::to_string(nleaves) +
                   " count=" + std::to_string(count) + " " + layoutName(layout) +
                   (specials ? " with inf/NaN" : ""));
      std::vector<Slab> in = slabsOf(leaves, layout, es);
      // Keys are written one by one: an odd address is fine.
      Slab keys(count * kb, testing::shiftOf(layout, true, 0, 1));
      testing::SerialExecutor e;
      par::localMaxKeys(e, keys.data(), pointersOf(in).data(), nleaves, count, type);
      ASSERT_TRUE(e.status().isOk()) << e.status().toString();
      ASSERT_TRUE(testing::sameKeys(keys.data(), want.data(), count, kb));
      ASSERT_TRUE(keys.guardsIntact()) << "wrote outside keys";
      ASSERT_TRUE(inputsUnchanged(in, leaves));
    }
  });
}

TEST_P(ReduceSerialKeysTest, FoldMaxKeysMatchCpu) {
  const DataType type = GetParam();
  const size_t kb = kernels::exponentKeyBytes(type);
  const uint32_t special = kernels::nonFiniteKey(type);
  uint64_t seed = 0;
  for (int p : kPieceCounts) {
    for (size_t count : kCounts) {
      // Random keys of every value, many zeros and some non-finite keys.
      const std::vector<Buffer> pieces =
          testing::randomKeys(p, count, kb, special, ++seed * 31 + p);
      Buffer want(count * kb);
      kernels::foldMaxKeys(want.data(), pointersOf(pieces).data(), p, count, type);
      const SerialCall keyMax = [&](testing::SerialExecutor& e, uint8_t* out,
                                    const void* const* in) {
        par::foldMaxKeys(e, out, in, p, count, type);
      };
      // The first piece one key off (the output aligned).
      for (int inPlace = -1; inPlace < p; inPlace += std::max(1, p / 2)) {
        ASSERT_TRUE(serialGives(pieces, kb, Layout::kFirstInShifted, inPlace,
                                {want, count, type, kb}, keyMax))
            << dataTypeName(type) << " p=" << p << " count=" << count
            << (inPlace >= 0 ? " out=piece " + std::to_string(inPlace) : " out of place");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, ReduceSerialKeysTest,
                         ::testing::ValuesIn(testing::kFloatTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

// ---- encodings and their decoding ---------------------------------------------------------------

// Leaves [begin, end) of `leaves`.
std::vector<Buffer> slice(const std::vector<Buffer>& leaves, int begin, int end) {
  return std::vector<Buffer>(leaves.begin() + begin, leaves.begin() + end);
}

class ReduceSerialEncodeTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceSerialEncodeTest, EncodingsMatchCpuAndCarryNonFiniteCounts) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  size_t specialElements = 0;
  forEachDraw(type, kPieceCounts, kCounts, nullptr, [&](int total, size_t count, bool specials) {
    const auto all = wideLeaves(type, total, count, ++seed + 300 * total, specials);
    // The keys are those of every leaf (as after the key allreduce); the group is some of them
    // (one rank's leaves).
    const Buffer keys = testing::cpuKeys(all, count, type);
    for (int groupEnd : {total, (total + 1) / 2}) {
      const auto group = slice(all, 0, groupEnd);
      // Where the key is the non-finite key, the serial run carries the packed counts.
      const Buffer want =
          testing::bytesOf(testing::expectedEncoding(group, keys, count, type, &specialElements));
      const SerialCall encode = [&](testing::SerialExecutor& e, uint8_t* out,
                                    const void* const* in) {
        par::encodeLeaves(e, reinterpret_cast<int64_t*>(out), in, groupEnd, keys.data(), count,
                          type);
      };
      for (Layout layout : {Layout::kAligned, Layout::kAllShifted, Layout::kFirstInShifted}) {
        ASSERT_TRUE(serialGives(group, es, layout, -1, {want, count, DataType::kInt64}, encode))
            << dataTypeName(type) << " leaves " << groupEnd << " of " << total << " count=" << count
            << " " << layoutName(layout) << (specials ? " with inf/NaN" : "");
      }
    }
  });
  if (isFloatType(type)) {
    EXPECT_GT(specialElements, 100u) << "the data must exercise the non-finite counts";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceSerialEncodeTest, ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

class ReduceSerialDecodeTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceSerialDecodeTest, DecodedSumsMatchCpuDecodeAndNonFinite) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 0;
  for (int total : {1, 2, 3, 5, 8, 9}) {
    for (int p : {1, 2, 3}) {
      if (p > total) continue;
      for (size_t count : kCounts) {
        for (bool specials : {false, true}) {
          if (specials && !isFloatType(type)) continue;
          ++seed;
          std::mt19937_64 g(seed * 101 + total);
          const auto all = wideLeaves(type, total, count, seed + 700 * total, specials);
          const Buffer keys = testing::cpuKeys(all, count, type);
          const std::vector<int> cuts = testing::groupBoundaries(total, p, g);
          // p pieces: each group's leaves encoded by the serial run (the CPU reference encodes them
          // itself).
          std::vector<std::vector<int64_t>> serialPieces(p, std::vector<int64_t>(count + 1));
          std::vector<const int64_t*> serialPointers;
          for (int j = 0; j < p; ++j) {
            const auto group = slice(all, cuts[j], cuts[j + 1]);
            testing::SerialExecutor e;
            par::encodeLeaves(e, serialPieces[j].data(), pointersOf(group).data(),
                              cuts[j + 1] - cuts[j], keys.data(), count, type);
            ASSERT_TRUE(e.status().isOk()) << e.status().toString();
            serialPointers.push_back(serialPieces[j].data());
          }
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
            const Buffer want = testing::decodedReference(all, cuts, keys, count, type, op);
            for (bool shifted : {false, true}) {
              SCOPED_TRACE(label(type, op) + " leaves=" + std::to_string(total) +
                           " pieces=" + std::to_string(p) + " count=" + std::to_string(count) +
                           (shifted ? " out shifted" : " out aligned") +
                           (specials ? " with inf/NaN" : ""));
              Slab out(count * es, shifted ? es : 0);
              testing::SerialExecutor e;
              par::decodeSums(e, out.data(), serialPointers.data(), p, keys.data(), count, type, op,
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

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceSerialDecodeTest, ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

// ---- the invariant reduction of leaves held in one place ----------------------------------------

class ReduceSerialInvariantLocalTest
    : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceSerialInvariantLocalTest, MatchesCpuOutOfPlaceInPlaceAndPermuted) {
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
        if (specials && !isFloatType(type)) continue;
        const auto leaves = wideLeaves(type, nleaves, count, ++seed + 900 * nleaves, specials);
        Buffer want(count * es);
        kernels::invariantReduceLocal(want.data(), pointersOf(leaves).data(), nleaves, count, type,
                                      op);
        const SerialCall reduce = [&](testing::SerialExecutor& e, uint8_t* out,
                                      const void* const* in) {
          par::invariantReduceLocal(e, out, in, nleaves, count, type, op);
        };
        for (Layout layout : kLayouts) {
          const std::string where = label(type, op) + " nleaves=" + std::to_string(nleaves) +
                                    " count=" + std::to_string(count) + " " + layoutName(layout) +
                                    (specials ? " with inf/NaN" : "");
          ASSERT_TRUE(serialGives(leaves, es, layout, -1, {want, count, type}, reduce))
              << where << " out of place";
          if (layout == Layout::kOutShifted) continue;  // in place: out is a leaf
          const int j = static_cast<int>(seed % nleaves);
          ASSERT_TRUE(serialGives(leaves, es, layout, j, {want, count, type}, reduce))
              << where << " in place over leaf " << j;
        }
        // The result depends on the multiset of leaves only: the leaves in another order.
        std::vector<Buffer> permuted = leaves;
        std::shuffle(permuted.begin(), permuted.end(), std::mt19937_64(seed));
        std::reverse(permuted.begin(), permuted.end());
        SCOPED_TRACE(label(type, op) + " nleaves=" + std::to_string(nleaves) +
                     " count=" + std::to_string(count) + " leaves permuted");
        Buffer out(count * es);
        testing::SerialExecutor e;
        par::invariantReduceLocal(e, out.data(), pointersOf(permuted).data(), nleaves, count, type,
                                  op);
        ASSERT_TRUE(sameBits(out.data(), want.data(), count, type));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceSerialInvariantLocalTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllTypes),
                                            ::testing::ValuesIn(testing::kAllOps)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param), std::get<1>(info.param));
                         });

}  // namespace
}  // namespace detcoll
