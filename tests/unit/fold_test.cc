// kernels/fold.h: the rank-order fold against the independent reference of tests/support.

#include "kernels/fold.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/half.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::makeInputs;
using testing::pointers;
using testing::reference;
using testing::sameBits;

using testing::describeElement;
using testing::firstDifference;
using testing::referenceFold;

Buffer foldOf(const std::vector<Buffer>& inputs, size_t count, DataType type, ReduceOp op,
              int64_t divisor) {
  Buffer out(count * dataTypeSize(type) + 1, 0xa5);
  const auto in = pointers(inputs);
  kernels::foldRankOrder(out.data(), in.data(), static_cast<int>(in.size()), count, type, op,
                         divisor);
  return out;
}

std::string label(DataType type, ReduceOp op) {
  return dataTypeName(type) + "_" + reduceOpName(op);
}

class FoldGridTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(FoldGridTest, MatchesReferenceForEveryRankCountAndLength) {
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  for (int k = 1; k <= 5; ++k) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{4097}}) {
      SCOPED_TRACE("k=" + std::to_string(k) + " count=" + std::to_string(count));
      const auto inputs = makeInputs(type, k, count, 1000 * k + count);
      const Buffer expected = reference(inputs, count, type, op, k);
      const Buffer actual = foldOf(inputs, count, type, op, k);
      ASSERT_TRUE(sameBits(actual.data(), expected.data(), count, type));
      EXPECT_EQ(actual[count * es], 0xa5) << "wrote past the end of out";
    }
  }
}

TEST_P(FoldGridTest, InPlaceOverEveryInput) {
  const auto [type, op] = GetParam();
  const size_t count = 4097;
  for (int k = 1; k <= 5; ++k) {
    const auto inputs = makeInputs(type, k, count, 77 + k);
    const Buffer expected = reference(inputs, count, type, op, k);
    for (int j = 0; j < k; ++j) {
      SCOPED_TRACE("k=" + std::to_string(k) + " out aliases input " + std::to_string(j));
      auto aliased = inputs;
      auto in = pointers(aliased);
      void* out = aliased[j].data();
      kernels::foldRankOrder(out, in.data(), k, count, type, op, k);
      ASSERT_TRUE(sameBits(out, expected.data(), count, type));
      for (int other = 0; other < k; ++other) {
        if (other == j) continue;
        ASSERT_EQ(aliased[other], inputs[other]) << "input " << other << " was modified";
      }
    }
  }
}

TEST_P(FoldGridTest, ElementDependsOnlyOnItsOwnInputs) {
  // Folding a suffix starting at any offset gives the same bits as that part of the whole fold.
  const auto [type, op] = GetParam();
  const size_t es = dataTypeSize(type);
  const size_t count = 3000;
  const int k = 4;
  const auto inputs = makeInputs(type, k, count, 4242);
  const Buffer whole = foldOf(inputs, count, type, op, k);
  for (size_t offset : {size_t{1}, size_t{3}, size_t{1000}, size_t{1025}, size_t{2999}}) {
    std::vector<const void*> in;
    for (const Buffer& b : inputs) in.push_back(b.data() + offset * es);
    Buffer part((count - offset) * es);
    kernels::foldRankOrder(part.data(), in.data(), k, count - offset, type, op, k);
    ASSERT_TRUE(sameBits(part.data(), whole.data() + offset * es, count - offset, type))
        << "offset " << offset;
  }
}

TEST_P(FoldGridTest, DivisorIsIndependentOfTheNumberOfInputs) {
  const auto [type, op] = GetParam();
  const size_t count = 1023;
  const auto inputs = makeInputs(type, 5, count, 99);
  for (int64_t divisor : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{1000}}) {
    const Buffer expected = reference(inputs, count, type, op, divisor);
    const Buffer actual = foldOf(inputs, count, type, op, divisor);
    ASSERT_TRUE(sameBits(actual.data(), expected.data(), count, type)) << "divisor " << divisor;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, FoldGridTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllTypes),
                                            ::testing::ValuesIn(testing::kAllOps)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param), std::get<1>(info.param));
                         });

TEST(FoldTest, ReferenceDetectsOrderOnTheTestData) {
  // Sanity of the test data itself: with random non-integer inputs, a different fold order gives
  // different bits, so the grid above would notice a kernel that folded out of rank order.
  // (float16 and bfloat16 are accumulated in float and rounded once, so random data hardly ever
  // shows the order for them: HalfTypesFoldInRankOrder below covers them with cancellations.)
  for (DataType type : {DataType::kFloat32, DataType::kFloat64}) {
    const size_t count = 1023;
    const auto inputs = makeInputs(type, 4, count, 5);
    const Buffer ordered = reference(inputs, count, type, ReduceOp::kSum, 4);
    Buffer rotated(count * dataTypeSize(type));
    testing::rotatedFold(rotated.data(), pointers(inputs), count, type, ReduceOp::kSum, 4, 1);
    EXPECT_GE(firstDifference(ordered.data(), rotated.data(), count, type), 0)
        << dataTypeName(type);
    const Buffer actual = foldOf(inputs, count, type, ReduceOp::kSum, 4);
    EXPECT_GE(firstDifference(actual.data(), rotated.data(), count, type), 0) << dataTypeName(type);
  }
}

TEST(FoldTest, CountZeroWritesNothing) {
  for (DataType type : testing::kAllTypes) {
    Buffer out(16, 0x5a);
    const uint8_t in[16] = {1};
    const void* inputs[2] = {in, in};
    kernels::foldRankOrder(out.data(), inputs, 2, 0, type, ReduceOp::kSum, 2);
    EXPECT_EQ(out, Buffer(16, 0x5a)) << dataTypeName(type);
  }
}

// Special values -----------------------------------------------------------------------------

// Raw bit patterns, per float type: NaNs (quiet, negative with payload, signalling), infinities,
// zeros, ordinary values, the largest finite and the smallest subnormal.
std::vector<uint64_t> specialBits(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x00000000u,
              0x80000000u, 0x3fc00000u, 0xc0100000u, 0x7f7fffffu, 0x00000001u, 0xff7fffffu};
    case DataType::kFloat64:
      return {0x7ff8000000000000u, 0xfff8000000000001u, 0x7ff0000000000001u, 0x7ff0000000000000u,
              0xfff0000000000000u, 0x0000000000000000u, 0x8000000000000000u, 0x3ff8000000000000u,
              0xc002000000000000u, 0x7fefffffffffffffu, 0x0000000000000001u, 0xffefffffffffffffu};
    case DataType::kFloat16:
      return {0x7e00u, 0xfe01u, 0x7c01u, 0x7c00u, 0xfc00u, 0x0000u,
              0x8000u, 0x3e00u, 0xc080u, 0x7bffu, 0x0001u, 0xfbffu};
    case DataType::kBFloat16:
      return {0x7fc0u, 0xffc1u, 0x7f81u, 0x7f80u, 0xff80u, 0x0000u,
              0x8000u, 0x3fc0u, 0xc010u, 0x7f7fu, 0x0001u, 0xff7fu};
    default:
      return {};
  }
}

uint64_t canonicalNaN(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 0x7fc00000u;
    case DataType::kFloat64:
      return 0x7ff8000000000000u;
    case DataType::kFloat16:
      return kHalfCanonicalNaN;
    case DataType::kBFloat16:
      return kBFloat16CanonicalNaN;
    default:
      return 0;
  }
}

void putBits(Buffer& buffer, size_t i, uint64_t bits, DataType type) {
  const size_t es = dataTypeSize(type);
  if (buffer.size() < (i + 1) * es) buffer.resize((i + 1) * es);
  std::memcpy(buffer.data() + i * es, &bits, es);  // little endian
}

uint64_t getBits(const void* data, size_t i, DataType type) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(data) + i * dataTypeSize(type), dataTypeSize(type));
  return bits;
}

double valueOf(uint64_t bits, DataType type) {
  switch (type) {
    case DataType::kFloat32: {
      float f;
      const uint32_t u = static_cast<uint32_t>(bits);
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case DataType::kFloat16: {
      _Float16 h;
      const uint16_t u = static_cast<uint16_t>(bits);
      std::memcpy(&h, &u, 2);
      return static_cast<double>(h);
    }
    case DataType::kBFloat16:
      return bitsToFloat(static_cast<uint32_t>(bits) << 16);
    default:
      return 0;
  }
}

class FoldSpecialValuesTest : public ::testing::TestWithParam<DataType> {};

// Every ordered pair and triple of special values, every op: bits equal the reference, and every
// NaN result is the canonical NaN of the dtype.
TEST_P(FoldSpecialValuesTest, AllTuplesMatchReferenceAndNaNIsCanonical) {
  const DataType type = GetParam();
  const auto specials = specialBits(type);
  const size_t n = specials.size();
  for (int k : {2, 3}) {
    std::vector<Buffer> inputs(k);
    size_t count = 0;
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        for (size_t c = 0; c < (k == 3 ? n : 1); ++c) {
          putBits(inputs[0], count, specials[a], type);
          putBits(inputs[1], count, specials[b], type);
          if (k == 3) putBits(inputs[2], count, specials[c], type);
          ++count;
        }
      }
    }
    for (ReduceOp op : testing::kAllOps) {
      SCOPED_TRACE(label(type, op) + " k=" + std::to_string(k));
      const Buffer expected = reference(inputs, count, type, op, k);
      const Buffer actual = foldOf(inputs, count, type, op, k);
      EXPECT_TRUE(sameBits(actual.data(), expected.data(), count, type));
      for (size_t i = 0; i < count; ++i) {
        const uint64_t bits = getBits(actual.data(), i, type);
        if (std::isnan(valueOf(bits, type))) {
          ASSERT_EQ(bits, canonicalNaN(type)) << "element " << i << " is a non-canonical NaN "
                                              << describeElement(actual.data(), i, type);
        }
      }
    }
  }
}

TEST_P(FoldSpecialValuesTest, DocumentedSemantics) {
  const DataType type = GetParam();
  const auto s = specialBits(type);
  const uint64_t qnan = s[0], negPayloadNaN = s[1], snan = s[2], inf = s[3], negInf = s[4],
                 zero = s[5], negZero = s[6], x = s[7];
  // One element per case: input 0 and input 1.
  const std::vector<std::pair<uint64_t, uint64_t>> cases = {
      {zero, negZero},    {negZero, zero}, {inf, negInf}, {negInf, inf},
      {negPayloadNaN, x}, {x, snan},       {qnan, inf},   {x, negPayloadNaN}};
  std::vector<Buffer> inputs(2);
  for (size_t i = 0; i < cases.size(); ++i) {
    putBits(inputs[0], i, cases[i].first, type);
    putBits(inputs[1], i, cases[i].second, type);
  }
  const size_t count = cases.size();
  const Buffer sum = foldOf(inputs, count, type, ReduceOp::kSum, 2);
  const Buffer mn = foldOf(inputs, count, type, ReduceOp::kMin, 2);
  const Buffer mx = foldOf(inputs, count, type, ReduceOp::kMax, 2);
  const uint64_t nan = canonicalNaN(type);
  // min/max of -0 and +0: -0 and +0 whatever the order.
  EXPECT_EQ(getBits(mn.data(), 0, type), negZero);
  EXPECT_EQ(getBits(mn.data(), 1, type), negZero);
  EXPECT_EQ(getBits(mx.data(), 0, type), zero);
  EXPECT_EQ(getBits(mx.data(), 1, type), zero);
  // +0 + -0 = +0 (round to nearest).
  EXPECT_EQ(getBits(sum.data(), 0, type), zero);
  EXPECT_EQ(getBits(sum.data(), 1, type), zero);
  // inf + -inf = NaN, canonical.
  EXPECT_EQ(getBits(sum.data(), 2, type), nan);
  EXPECT_EQ(getBits(sum.data(), 3, type), nan);
  // min(inf, -inf) = -inf either way; max likewise.
  EXPECT_EQ(getBits(mn.data(), 2, type), negInf);
  EXPECT_EQ(getBits(mn.data(), 3, type), negInf);
  EXPECT_EQ(getBits(mx.data(), 2, type), inf);
  EXPECT_EQ(getBits(mx.data(), 3, type), inf);
  // Any NaN input: canonical NaN for sum, min and max, in either position.
  for (size_t i = 4; i < count; ++i) {
    EXPECT_EQ(getBits(sum.data(), i, type), nan) << "sum case " << i;
    EXPECT_EQ(getBits(mn.data(), i, type), nan) << "min case " << i;
    EXPECT_EQ(getBits(mx.data(), i, type), nan) << "max case " << i;
  }
}

TEST_P(FoldSpecialValuesTest, MinMaxDoNotDependOnOrder) {
  // min and max are order independent even with NaN and signed zeros: every permutation of three
  // specials gives the same bits.
  const DataType type = GetParam();
  const auto s = specialBits(type);
  const size_t n = s.size();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<Buffer> abc(3), bca(3), cba(3);
    size_t count = 0;
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        for (size_t c = 0; c < n; ++c, ++count) {
          putBits(abc[0], count, s[a], type), putBits(abc[1], count, s[b], type);
          putBits(abc[2], count, s[c], type);
          putBits(bca[0], count, s[b], type), putBits(bca[1], count, s[c], type);
          putBits(bca[2], count, s[a], type);
          putBits(cba[0], count, s[c], type), putBits(cba[1], count, s[b], type);
          putBits(cba[2], count, s[a], type);
        }
      }
    }
    const Buffer r0 = foldOf(abc, count, type, op, 3);
    const Buffer r1 = foldOf(bca, count, type, op, 3);
    const Buffer r2 = foldOf(cba, count, type, op, 3);
    EXPECT_TRUE(sameBits(r1.data(), r0.data(), count, type)) << reduceOpName(op);
    EXPECT_TRUE(sameBits(r2.data(), r0.data(), count, type)) << reduceOpName(op);
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, FoldSpecialValuesTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64,
                                           DataType::kFloat16, DataType::kBFloat16),
                         [](const auto& info) { return dataTypeName(info.param); });

// Integers -----------------------------------------------------------------------------------

// Average by a power of two multiplies by its inverse (kernels/fold.cc, finishAverage). The bits
// must be the division's for every exponent: raw random bit patterns cover subnormal results,
// results that round to zero, infinities and NaNs, as well as ordinary values.
TEST(FoldTest, AverageByAPowerOfTwoHasTheBitsOfTheDivision) {
  std::mt19937_64 rng(20261126);
  const size_t count = 5000;  // crosses the kernel's blocks, with a ragged tail
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    const size_t es = dataTypeSize(type);
    for (int k : {1, 2, 3}) {
      std::vector<Buffer> inputs(k, Buffer(count * es));
      for (Buffer& input : inputs) {
        for (size_t i = 0; i < count; ++i) putBits(input, i, rng(), type);
      }
      for (int64_t divisor : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{1} << 20,
                              int64_t{1} << 40, int64_t{1} << 62, int64_t{3}, int64_t{12}}) {
        SCOPED_TRACE(dataTypeName(type) + " k=" + std::to_string(k) +
                     " divisor=" + std::to_string(divisor));
        const Buffer expected = reference(inputs, count, type, ReduceOp::kAverage, divisor);
        const Buffer actual = foldOf(inputs, count, type, ReduceOp::kAverage, divisor);
        const long at = firstDifference(actual.data(), expected.data(), count, type);
        ASSERT_LT(at, 0) << "element " << at << ": " << describeElement(actual.data(), at, type)
                         << ", the division gives " << describeElement(expected.data(), at, type);
        // Buffers one byte off their dtype's alignment take the byte-wise loads.
        std::vector<Buffer> shifted(k, Buffer(count * es + 1));
        std::vector<const void*> from(k);
        for (int j = 0; j < k; ++j) {
          std::memcpy(shifted[j].data() + 1, inputs[j].data(), count * es);
          from[j] = shifted[j].data() + 1;
        }
        Buffer unaligned(count * es + 1);
        kernels::foldRankOrder(unaligned.data() + 1, from.data(), k, count, type,
                               ReduceOp::kAverage, divisor);
        ASSERT_LT(firstDifference(unaligned.data() + 1, expected.data(), count, type), 0)
            << "unaligned";
      }
    }
  }
}

TEST(FoldIntegerTest, Int32SumWrapsButAverageUsesTheExactSum) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  const std::vector<std::vector<int32_t>> columns = {
      {kMax, 1, 0}, {kMax, kMax, kMax}, {kMin, kMin, kMin}, {kMin, -1, 0},
      {-7, 0, 0},   {7, 0, 0},          {kMax, kMax, 2},    {-5, -5, -6}};
  const size_t count = columns.size();
  std::vector<std::vector<int32_t>> in(3, std::vector<int32_t>(count));
  for (size_t i = 0; i < count; ++i) {
    for (int j = 0; j < 3; ++j) in[j][i] = columns[i][j];
  }
  const void* inputs[3] = {in[0].data(), in[1].data(), in[2].data()};
  std::vector<int32_t> sum(count), average(count), expected(count);
  kernels::foldRankOrder(sum.data(), inputs, 3, count, DataType::kInt32, ReduceOp::kSum, 3);
  kernels::foldRankOrder(average.data(), inputs, 3, count, DataType::kInt32, ReduceOp::kAverage, 3);
  for (size_t i = 0; i < count; ++i) {
    const int64_t exact = int64_t{columns[i][0]} + columns[i][1] + columns[i][2];
    EXPECT_EQ(sum[i], static_cast<int32_t>(static_cast<uint32_t>(exact))) << "column " << i;
    EXPECT_EQ(average[i], static_cast<int32_t>(exact / 3)) << "column " << i;
  }
  const std::vector<const void*> ptrs(inputs, inputs + 3);
  testing::referenceFold(expected.data(), ptrs, count, DataType::kInt32, ReduceOp::kSum, 3);
  EXPECT_TRUE(sameBits(sum.data(), expected.data(), count, DataType::kInt32));
  testing::referenceFold(expected.data(), ptrs, count, DataType::kInt32, ReduceOp::kAverage, 3);
  EXPECT_TRUE(sameBits(average.data(), expected.data(), count, DataType::kInt32));
  EXPECT_EQ(sum[0], kMin);      // kMax + 1 wraps
  EXPECT_EQ(average[1], kMax);  // 3 * kMax / 3, not a wrapped sum
  EXPECT_EQ(average[4], -2);    // -7 / 3 truncates toward zero
}

TEST(FoldIntegerTest, Int64SumWrapsAndMinMaxAreExact) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> a = {kMax, kMin, -3, 5};
  const std::vector<int64_t> b = {1, -1, 4, kMin};
  const void* inputs[2] = {a.data(), b.data()};
  std::vector<int64_t> out(4), mn(4), mx(4);
  kernels::foldRankOrder(out.data(), inputs, 2, 4, DataType::kInt64, ReduceOp::kSum, 2);
  kernels::foldRankOrder(mn.data(), inputs, 2, 4, DataType::kInt64, ReduceOp::kMin, 2);
  kernels::foldRankOrder(mx.data(), inputs, 2, 4, DataType::kInt64, ReduceOp::kMax, 2);
  EXPECT_EQ(out[0], kMin);
  EXPECT_EQ(out[1], kMax);
  EXPECT_EQ(out[2], 1);
  EXPECT_EQ(mn, (std::vector<int64_t>{1, kMin, -3, kMin}));
  EXPECT_EQ(mx, (std::vector<int64_t>{kMax, -1, 4, 5}));
}

TEST(FoldTest, HalfTypesAccumulateInFloatAndRoundOnce) {
  // 2048 + 1 + 1 in float16: rounding each step would give 2048 (2049 is a tie, to even), the
  // float accumulation gives 2050 exactly.
  const uint16_t a[1] = {0x6800};  // 2048
  const uint16_t one[1] = {0x3c00};
  const void* inputs[3] = {a, one, one};
  uint16_t out[1];
  kernels::foldRankOrder(out, inputs, 3, 1, DataType::kFloat16, ReduceOp::kSum, 3);
  EXPECT_EQ(out[0], 0x6801u) << "2050 in float16";
  // bfloat16: 256 + 1 + 1 -> 258 (one rounding), not 256.
  const uint16_t b[1] = {0x4380};     // 256
  const uint16_t bone[1] = {0x3f80};  // 1
  const void* binputs[3] = {b, bone, bone};
  kernels::foldRankOrder(out, binputs, 3, 1, DataType::kBFloat16, ReduceOp::kSum, 3);
  EXPECT_EQ(out[0], 0x4381u) << "258 in bfloat16";
}

TEST(FoldTest, HalfTypesFoldInRankOrder) {
  // x0 = 2^e, x1 = 2^(e-24) (half an ulp of x0 in float), x2 = -x0. In rank order, x0 + x1 is a
  // tie that rounds back to x0 and the sum is 0; any rotation keeps x1 (exact in float).
  struct Case {
    DataType type;
    uint16_t big, tiny, negBig, tinyResult;
  };
  const Case cases[] = {
      {DataType::kFloat16, 0x6800, 0x0800, 0xe800, 0x0800},   // 2048, 2^-13, -2048
      {DataType::kBFloat16, 0x4b80, 0x3f80, 0xcb80, 0x3f80},  // 2^24, 1, -2^24
  };
  for (const Case& c : cases) {
    const uint16_t x0[1] = {c.big}, x1[1] = {c.tiny}, x2[1] = {c.negBig};
    const void* inputs[3] = {x0, x1, x2};
    const std::vector<const void*> in(inputs, inputs + 3);
    uint16_t out[1] = {0xffff}, expected[1] = {0xffff}, rotated[1] = {0xffff};
    kernels::foldRankOrder(out, inputs, 3, 1, c.type, ReduceOp::kSum, 3);
    testing::referenceFold(expected, in, 1, c.type, ReduceOp::kSum, 3);
    EXPECT_EQ(out[0], 0x0000u) << dataTypeName(c.type);
    EXPECT_EQ(expected[0], 0x0000u) << dataTypeName(c.type) << " (reference)";
    for (int start : {1, 2}) {
      testing::rotatedFold(rotated, in, 1, c.type, ReduceOp::kSum, 3, start);
      EXPECT_EQ(rotated[0], c.tinyResult) << dataTypeName(c.type) << " start " << start;
    }
  }
}

}  // namespace
}  // namespace detcoll
