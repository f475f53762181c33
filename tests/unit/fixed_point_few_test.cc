// The one-pass invariant reduction of a few leaves (kernels/fixed_point_few.cc) against the MPFR
// reference of the invariant definition: every float dtype, 1 to 8 leaves, sum and power-of-two
// averages, in place and at unaligned addresses, on random bit patterns over every exponent with
// inf and NaN, leaves close together (ties), float64 keys around the two-factor scalings, 16-bit
// sums past the format's range, and averages whose result rounds to a signed zero.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/fixed_point.h"
#include "kernels/fixed_point_formats.h"
#include "tests/support/exact_reference.h"
#include "tests/support/wide_bits.h"

namespace detcoll {
namespace {

using kernels::codec::Format;
using kernels::codec::formatOf;

const DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                                DataType::kFloat64};

enum class Data { kAnyBits, kClose, kLowKeys, kHighKeys, kTinyNegative };

const char* dataName(Data d) {
  switch (d) {
    case Data::kAnyBits:
      return "any bits";
    case Data::kClose:
      return "close";
    case Data::kLowKeys:
      return "low keys";
    case Data::kHighKeys:
      return "high keys";
    default:
      return "tiny negative";
  }
}

// One element's leaves: random sign and fraction, an exponent field drawn as `data` says.
uint64_t value(std::mt19937_64& rng, const Format& f, Data data, uint64_t center) {
  const uint64_t special = (uint64_t{1} << f.exponentBits) - 1;
  const uint64_t fraction = rng() & ((uint64_t{1} << f.mantissaBits) - 1);
  uint64_t sign = rng() & 1;
  uint64_t exponent = 0;
  switch (data) {
    case Data::kAnyBits:  // every field, a tenth zero, one in 40 inf or NaN
      exponent = rng() % 40 == 0 ? special : rng() % special;
      if (rng() % 10 == 0) exponent = 0;
      break;
    case Data::kClose:  // within 3 binades of the element's center: carries and ties
      exponent = center - std::min<uint64_t>(center, rng() % 4);
      break;
    case Data::kLowKeys:  // float64's keys below 120 cross both two-factor scalings
    case Data::kHighKeys:
      exponent = center - std::min<uint64_t>(center, rng() % 30);
      break;
    case Data::kTinyNegative:  // the smallest subnormals and zeros, mostly negative
      exponent = 0;
      sign = rng() % 4 != 0;
      return (sign << (f.exponentBits + f.mantissaBits)) | (rng() % 3);
  }
  return (sign << (f.exponentBits + f.mantissaBits)) | (exponent << f.mantissaBits) | fraction;
}

std::vector<std::vector<uint8_t>> leavesOf(DataType type, int k, size_t n, Data data, size_t offset,
                                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Format f = formatOf(type);
  const uint64_t special = (uint64_t{1} << f.exponentBits) - 1;
  std::vector<std::vector<uint8_t>> leaves(k, std::vector<uint8_t>(offset + n * f.bytes));
  for (size_t i = 0; i < n; ++i) {
    uint64_t center = 1 + rng() % (special - 1);
    if (data == Data::kLowKeys) center = 1 + rng() % 120;
    if (data == Data::kHighKeys) center = special - 1 - rng() % 3;
    for (int l = 0; l < k; ++l) {
      const uint64_t v = value(rng, f, data, center);
      std::memcpy(leaves[l].data() + offset + i * f.bytes, &v, f.bytes);
    }
  }
  return leaves;
}

TEST(FixedPointFewTest, OnePassMatchesTheExactReference) {
  const size_t n = 1000;  // three blocks and a partial one
  for (DataType type : kFloatTypes) {
    for (int k = 1; k <= kernels::formats::kFewLeaves; ++k) {
      for (Data data :
           {Data::kAnyBits, Data::kClose, Data::kLowKeys, Data::kHighKeys, Data::kTinyNegative}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          for (size_t offset : {size_t{0}, size_t{1}}) {
            const auto leaves = leavesOf(type, k, n, data, offset, k * 100 + int(data) * 7);
            std::vector<const void*> in;
            for (const auto& l : leaves) in.push_back(l.data() + offset);
            const size_t bytes = n * dataTypeSize(type);
            std::vector<uint8_t> got(bytes + offset), want(bytes);
            testing::exactInvariantReference(want.data(), in, n, type, op);
            const std::string what = std::string(dataTypeName(type)) + ", " + std::to_string(k) +
                                     " leaves, " + dataName(data) + ", " + reduceOpName(op) +
                                     ", offset " + std::to_string(offset);
            const bool applies = op == ReduceOp::kSum || (k & (k - 1)) == 0;
            EXPECT_EQ(
                kernels::formats::reduceFewLeaves(got.data() + offset, in.data(), k, n, type, op),
                applies)
                << what;
            if (applies)
              EXPECT_TRUE(testing::sameBits(got.data() + offset, want.data(), n, type)) << what;
            // In place: the output is the first leaf, through the public entry.
            std::vector<uint8_t> first = leaves[0];
            in[0] = first.data() + offset;
            kernels::invariantReduceLocal(first.data() + offset, in.data(), k, n, type, op);
            EXPECT_TRUE(testing::sameBits(first.data() + offset, want.data(), n, type))
                << what << ", in place";
          }
        }
      }
    }
  }
}

TEST(FixedPointFewTest, LeavesItDoesNotApplyToAreLeftAlone) {
  std::vector<float> a(16, 1.5f), out(16, -7.0f);
  std::vector<const void*> in(9, a.data());
  const auto untouched = [&] {
    for (float v : out)
      if (v != -7.0f) return false;
    return true;
  };
  using kernels::formats::reduceFewLeaves;
  EXPECT_FALSE(reduceFewLeaves(out.data(), in.data(), 9, 16, DataType::kFloat32, ReduceOp::kSum));
  EXPECT_FALSE(
      reduceFewLeaves(out.data(), in.data(), 3, 16, DataType::kFloat32, ReduceOp::kAverage));
  EXPECT_FALSE(reduceFewLeaves(out.data(), in.data(), 2, 16, DataType::kFloat32, ReduceOp::kMax));
  EXPECT_FALSE(reduceFewLeaves(out.data(), in.data(), 2, 8, DataType::kInt64, ReduceOp::kSum));
  EXPECT_FALSE(reduceFewLeaves(out.data(), in.data(), 0, 16, DataType::kFloat32, ReduceOp::kSum));
  EXPECT_TRUE(untouched());
  EXPECT_TRUE(
      reduceFewLeaves(out.data(), in.data(), 8, 16, DataType::kFloat32, ReduceOp::kAverage));
  EXPECT_EQ(out[3], 1.5f);
}

}  // namespace
}  // namespace detcoll
