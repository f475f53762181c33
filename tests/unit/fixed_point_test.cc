// kernels/fixed_point.h: the invariant mode's codec in one process (invariantReduceLocal) against
// the independent MPFR reference of tests/support/exact_reference.h, hand-checked edge cases of
// the stated semantics (also run through the checked collectives on ranks as threads), and
// roundToFloatBits on hand-checked roundings.

#include "kernels/fixed_point.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::describeElement;
using testing::kFloatTypes;
using testing::kSentinel;
using testing::pointers;
using testing::randomBuffer;
using testing::runRanks;
using testing::sameBits;

Buffer localReduce(const std::vector<Buffer>& leaves, size_t count, DataType type, ReduceOp op) {
  Buffer out(count * dataTypeSize(type) + 8, kSentinel);
  const auto in = pointers(leaves);
  kernels::invariantReduceLocal(out.data(), in.data(), static_cast<int>(in.size()), count, type,
                                op);
  return out;
}

Buffer exactReference(const std::vector<Buffer>& leaves, size_t count, DataType type, ReduceOp op) {
  Buffer out(count * dataTypeSize(type) + 8, kSentinel);
  testing::exactInvariantReference(out.data(), pointers(leaves), count, type, op);
  return out;
}

bool tailUntouched(const Buffer& b, size_t count, DataType type) {
  for (size_t i = count * dataTypeSize(type); i < b.size(); ++i) {
    if (b[i] != kSentinel) return false;
  }
  return true;
}

// Raw bits of one value of each dtype.
uint64_t f32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
uint64_t f64(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}
uint64_t f16(float v) {
  const _Float16 h = static_cast<_Float16>(v);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

// One-element leaves from raw bits.
std::vector<Buffer> leavesOf(DataType type, const std::vector<uint64_t>& bits) {
  std::vector<Buffer> leaves;
  for (uint64_t b : bits) {
    Buffer leaf(dataTypeSize(type));
    std::memcpy(leaf.data(), &b, leaf.size());  // little endian: the low bytes
    leaves.push_back(leaf);
  }
  return leaves;
}

Buffer bitsBuffer(DataType type, uint64_t bits) {
  return leavesOf(type, {bits})[0];
}

// Random inputs against the MPFR reference ---------------------------------------------------

class FixedPointLocalTest : public ::testing::TestWithParam<DataType> {};

TEST_P(FixedPointLocalTest, MatchesExactReference) {
  const DataType type = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{4097}}) {
      for (int nleaves : {1, 2, 5, 12}) {
        SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) +
                     " count=" + std::to_string(count) + " nleaves=" + std::to_string(nleaves));
        const auto leaves = testing::makeInputs(type, nleaves, count, count * 31 + nleaves);
        const Buffer got = localReduce(leaves, count, type, op);
        const Buffer want = exactReference(leaves, count, type, op);
        ASSERT_TRUE(sameBits(got.data(), want.data(), count, type));
        ASSERT_TRUE(tailUntouched(got, count, type)) << "wrote past the end";
      }
    }
  }
}

TEST_P(FixedPointLocalTest, InPlaceOverTheFirstLeaf) {
  const DataType type = GetParam();
  const size_t count = 999;
  auto leaves = testing::makeInputs(type, 4, count, 17);
  const Buffer want = exactReference(leaves, count, type, ReduceOp::kSum);
  const auto in = pointers(leaves);
  kernels::invariantReduceLocal(leaves[0].data(), in.data(), 4, count, type, ReduceOp::kSum);
  EXPECT_TRUE(sameBits(leaves[0].data(), want.data(), count, type));
}

TEST_P(FixedPointLocalTest, InPlaceOverALeafWithNonFiniteValues) {
  // The output aliases a leaf that holds infinities and NaNs: their results must be found before
  // the block that holds them is written.
  const DataType type = GetParam();
  const size_t count = 2500;  // several blocks
  for (int nleaves : {2, 3}) {
    auto leaves = testing::makeInputs(type, nleaves, count, 23 + nleaves);
    const uint64_t inf = type == DataType::kFloat32   ? 0x7f800000u
                         : type == DataType::kFloat64 ? 0x7ff0000000000000u
                         : type == DataType::kFloat16 ? 0x7c00u
                                                      : 0x7f80u;
    const size_t es = dataTypeSize(type);
    const uint64_t sign = uint64_t{1} << (8 * es - 1);
    const uint64_t nan = inf | (inf >> 1 & ~inf);  // the top fraction bit set
    for (size_t i = 0; i < count; i += 97) {
      const uint64_t pattern[3] = {inf, sign | inf, nan};
      std::memcpy(leaves[0].data() + i * es, &pattern[i % 3], es);  // the aliased leaf
      if (i % 2) std::memcpy(leaves[1].data() + i * es, &inf, es);  // meets -inf: NaN
    }
    const Buffer want = exactReference(leaves, count, type, ReduceOp::kSum);
    const auto in = pointers(leaves);
    kernels::invariantReduceLocal(leaves[0].data(), in.data(), nleaves, count, type,
                                  ReduceOp::kSum);
    EXPECT_TRUE(sameBits(leaves[0].data(), want.data(), count, type)) << "nleaves=" << nleaves;
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, FixedPointLocalTest, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

TEST(FixedPointTest, LargeCountMatchesExactReference) {
  const size_t count = (size_t{1} << 18) + 3;
  const DataType type = DataType::kFloat16;
  const auto leaves = testing::makeInputs(type, 3, count, 99);
  const Buffer got = localReduce(leaves, count, type, ReduceOp::kAverage);
  const Buffer want = exactReference(leaves, count, type, ReduceOp::kAverage);
  EXPECT_TRUE(sameBits(got.data(), want.data(), count, type));
}

TEST(FixedPointTest, FloatThirtyTwoAroundTheDoublePathLimit) {
  // float32 with up to 64 leaves is reduced in double arithmetic, with more by the general code:
  // both sides of the limit, power-of-two divisors and others, against the reference.
  const DataType type = DataType::kFloat32;
  const size_t count = 1500;
  for (int nleaves : {3, 4, 48, 63, 64, 65, 100}) {
    const auto leaves = testing::makeInputs(type, nleaves, count, 1000 + nleaves);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const Buffer got = localReduce(leaves, count, type, op);
      const Buffer want = exactReference(leaves, count, type, op);
      EXPECT_TRUE(sameBits(got.data(), want.data(), count, type))
          << reduceOpName(op) << " nleaves=" << nleaves;
    }
  }
}

TEST(FixedPointTest, ReferenceSeesTheGridOnTheTestData) {
  // The MPFR reference with the grid differs from the plain exact sum on float64 random data (the
  // grid keeps 46 bits below the largest leaf, fewer than float64's 53) and agrees on float32
  // (whose 24 bits are kept whole): the bit comparisons above can tell the grid apart.
  const size_t count = 4096;
  for (DataType type : {DataType::kFloat64, DataType::kFloat32}) {
    const auto leaves = testing::makeInputs(type, 5, count, 5);
    const Buffer grid = exactReference(leaves, count, type, ReduceOp::kSum);
    Buffer plain(count * dataTypeSize(type));
    testing::exactSumRounded(plain.data(), pointers(leaves), count, type, ReduceOp::kSum);
    size_t differ = 0;
    for (size_t i = 0; i < count; ++i) {
      const size_t es = dataTypeSize(type);
      differ += std::memcmp(grid.data() + i * es, plain.data() + i * es, es) != 0;
    }
    if (type == DataType::kFloat64) {
      EXPECT_GT(differ, count / 4) << "float64: the grid should change many sums";
    } else {
      // float32 leaves within 22 binades of the largest are exact; randomBuffer spans 40, so a
      // few elements may still differ, but not many.
      EXPECT_LT(differ, count / 20) << "float32";
    }
  }
}

// Hand-checked edge cases ----------------------------------------------------------------------

struct EdgeCase {
  const char* what;
  DataType type;
  ReduceOp op;
  std::vector<uint64_t> leaves;  // raw bits, one element each
  uint64_t expected;
};

constexpr uint64_t kF32NaN = 0x7fc00000u;
constexpr uint64_t kF64NaN = 0x7ff8000000000000ull;
constexpr uint64_t kF16NaN = 0x7e00u;
constexpr uint64_t kBF16NaN = 0x7fc0u;

std::vector<EdgeCase> edgeCases() {
  const DataType F32 = DataType::kFloat32, F64 = DataType::kFloat64, F16 = DataType::kFloat16,
                 BF16 = DataType::kBFloat16, I32 = DataType::kInt32, I64 = DataType::kInt64;
  const ReduceOp SUM = ReduceOp::kSum, AVG = ReduceOp::kAverage, MIN = ReduceOp::kMin,
                 MAX = ReduceOp::kMax;
  const uint64_t inf32 = f32(INFINITY), ninf32 = f32(-INFINITY);
  const uint64_t inf64 = f64(INFINITY), ninf64 = f64(-INFINITY);
  const uint64_t z32 = f32(0.0f), nz32 = f32(-0.0f);
  const uint64_t tiny32 = 1;  // 2^-149
  const auto i32 = [](int32_t v) { return static_cast<uint64_t>(static_cast<uint32_t>(v)); };
  const auto i64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  return {
      // Zeros: an exact zero is +0, whatever the signs of the zeros or of the cancelling values.
      {"all +0", F32, SUM, {z32, z32, z32}, z32},
      {"all -0", F32, SUM, {nz32, nz32, nz32}, z32},
      {"-0 average", F32, AVG, {nz32, nz32}, z32},
      {"-0 and +0", F64, SUM, {f64(-0.0), f64(0.0)}, f64(0.0)},
      {"x + -x", F32, SUM, {f32(-1.5f), f32(1.5f)}, z32},
      {"x + -x + -0", F16, SUM, {f16(-3.0f), f16(3.0f), f16(-0.0f)}, 0},
      {"bfloat16 -0", BF16, SUM, {0x8000, 0x8000}, 0},
      // Subnormals are summed exactly and rounded once, carries into the normal range included.
      {"subnormal sum", F32, SUM, {tiny32, tiny32}, 2},
      {"largest subnormal + smallest", F32, SUM, {0x007fffff, tiny32}, 0x00800000},
      {"subnormal cancellation", F32, SUM, {f32(-0x1p-149f), 3}, 2},
      {"subnormal average, tie to even 0", F32, AVG, {tiny32, z32}, z32},
      {"subnormal average, tie to even 2", F32, AVG, {3, z32}, 2},
      {"subnormal average rounds up", F32, AVG, {tiny32, tiny32, tiny32, z32}, 1},
      // A nonzero average below half the smallest subnormal rounds (IEEE) to a signed zero.
      {"negative average underflows to -0", F32, AVG, {0x80000001u, z32, z32, z32}, nz32},
      // float64's grid at the bottom of the range is 2^(-1022 + 1 - 46) = 2^-1067, coarser than its
      // subnormal spacing 2^-1074.
      {"float64 subnormals below the grid", F64, SUM, {1, 1, 1}, 0},
      {"float64 subnormals on the grid",
       F64,
       SUM,
       {f64(0x1p-1067), f64(0x1p-1067), f64(0x1p-1066)},
       f64(0x1p-1065)},
      {"float64 subnormal half steps tie to even",
       F64,
       SUM,
       {f64(0x1p-1068), f64(0x1.8p-1067)},
       f64(0x1p-1066)},
      {"float16 subnormals", F16, SUM, {0x0001, 0x0001, 0x03ff}, 0x0401},
      {"bfloat16 subnormals", BF16, SUM, {0x0001, 0x0001}, 0x0002},
      // Overflow: a finite exact sum beyond the range is infinite; exact sums that come back are
      // finite.
      {"FLT_MAX + FLT_MAX", F32, SUM, {f32(FLT_MAX), f32(FLT_MAX)}, inf32},
      {"-FLT_MAX - FLT_MAX", F32, SUM, {f32(-FLT_MAX), f32(-FLT_MAX)}, ninf32},
      {"FLT_MAX twice, back", F32, SUM, {f32(FLT_MAX), f32(FLT_MAX), f32(-FLT_MAX)}, f32(FLT_MAX)},
      {"FLT_MAX average", F32, AVG, {f32(FLT_MAX), f32(FLT_MAX)}, f32(FLT_MAX)},
      {"float16 65504 + 15", F16, SUM, {0x7bff, f16(15.0f)}, 0x7bff},
      {"float16 65504 + 16: tie to even is inf", F16, SUM, {0x7bff, f16(16.0f)}, 0x7c00},
      {"bfloat16 max + max", BF16, SUM, {0x7f7f, 0x7f7f}, 0x7f80},
      {"float64 max + max/2", F64, SUM, {f64(DBL_MAX), f64(DBL_MAX / 2)}, inf64},
      // float64 keeps 46 bits below the largest leaf: DBL_MAX = (2^53 - 1) 2^971 lies on no grid
      // point of 2^978 and rounds up to 2^1024, beyond the range, even alone.
      {"float64 DBL_MAX alone rounds to the grid: inf", F64, SUM, {f64(DBL_MAX)}, inf64},
      {"float64 1 + 2^-52 alone rounds to the grid", F64, SUM, {f64(1 + 0x1p-52)}, f64(1.0)},
      {"float64 1 + 2^-45 alone is on the grid", F64, SUM, {f64(1 + 0x1p-45)}, f64(1 + 0x1p-45)},
      // One huge leaf among tiny ones: the grid of the huge one swallows what lies below half a
      // step (2^-45 for 1.0 in float64; 2^-25 for 2^20 in float32), ties to even.
      {"float64 huge among quarter steps",
       F64,
       SUM,
       {f64(1.0), f64(0x1p-47), f64(0x1p-47), f64(0x1p-47), f64(0x1p-47)},
       f64(1.0)},
      {"float64 huge among half steps (ties to even 0)",
       F64,
       SUM,
       {f64(0x1p-46), f64(1.0), f64(0x1p-46), f64(0x1p-46)},
       f64(1.0)},
      {"float64 huge among 3/4 steps (round up)",
       F64,
       SUM,
       {f64(0x1.8p-46), f64(1.0), f64(0x1.8p-46), f64(0x1.8p-46)},
       f64(1 + 0x1.8p-44)},
      {"float32 huge cancels, tiny lost",
       F32,
       SUM,
       {f32(0x1p20f), f32(0x1.8p-29f), f32(-0x1p20f)},
       z32},
      {"float32 huge cancels, tiny kept",
       F32,
       SUM,
       {f32(0x1p20f), f32(0x1.4p-20f), f32(-0x1p20f)},
       f32(0x1.4p-20f)},
      // The float32 grid of 2^20 is 2^-25: 1.25 * 2^-26 is 0.625 of a step, 2^-26 a half (ties to
      // even 0), 1.5 * 2^-25 one and a half (ties to even 2).
      {"float32 tiny rounded to the grid",
       F32,
       SUM,
       {f32(0x1p20f), f32(0x1.4p-26f), f32(-0x1p20f)},
       f32(0x1p-25f)},
      {"float32 half step ties to even 0",
       F32,
       SUM,
       {f32(0x1p20f), f32(0x1p-26f), f32(-0x1p20f)},
       z32},
      {"float32 step and a half ties to even 2",
       F32,
       SUM,
       {f32(-0x1p20f), f32(0x1.8p-25f), f32(0x1p20f)},
       f32(0x1p-24f)},
      // bfloat16: the grid of 2^16 is 2^-29; 1.25 * 2^-30 rounds up to it.
      {"bfloat16 tiny rounded to the grid", BF16, SUM, {0x4780, 0x30a0, 0xc780}, 0x3100},
      {"float32 huge among tiny",
       F32,
       SUM,
       {f32(0x1p-30f), f32(0x1p20f), f32(0x1p-30f)},
       f32(0x1p20f)},
      // Non-finite: NaN if any NaN or both infinities (canonical bits), else the infinity.
      {"NaN", F32, SUM, {f32(1.0f), kF32NaN}, kF32NaN},
      {"NaN payload", F32, SUM, {0x7fc00001u, f32(1.0f)}, kF32NaN},
      {"negative NaN", F32, AVG, {0xffc00000u, f32(1.0f)}, kF32NaN},
      {"signalling NaN", F32, SUM, {0x7f800001u, f32(2.0f)}, kF32NaN},
      {"+inf", F32, SUM, {f32(1.0f), inf32, f32(FLT_MAX)}, inf32},
      {"-inf", F32, AVG, {ninf32, f32(-FLT_MAX), f32(-FLT_MAX)}, ninf32},
      {"+inf +inf", F32, SUM, {inf32, inf32}, inf32},
      {"+inf -inf", F32, SUM, {inf32, f32(1.0f), ninf32}, kF32NaN},
      {"-inf NaN", F32, SUM, {ninf32, kF32NaN}, kF32NaN},
      {"float64 +inf -inf", F64, SUM, {inf64, ninf64}, kF64NaN},
      {"float64 -inf", F64, SUM, {f64(5.0), ninf64}, ninf64},
      {"float64 NaN payload", F64, AVG, {0xfff0000000000001ull, f64(1.0)}, kF64NaN},
      {"float16 NaN", F16, SUM, {0x7c01, 0x3c00}, kF16NaN},
      {"float16 -inf", F16, SUM, {0xfc00, 0x3c00}, 0xfc00},
      {"float16 both infinities", F16, AVG, {0xfc00, 0x7c00}, kF16NaN},
      {"bfloat16 NaN", BF16, SUM, {0xffc1, 0x3f80}, kBF16NaN},
      {"bfloat16 +inf", BF16, SUM, {0x7f80, 0x3f80}, 0x7f80},
      {"bfloat16 both infinities", BF16, SUM, {0x7f80, 0xff80}, kBF16NaN},
      // Integers: exact wrapping sums, averages of the exact sum truncated toward zero.
      {"int32 wraps", I32, SUM, {i32(INT32_MAX), i32(1)}, i32(INT32_MIN)},
      {"int32 wraps back",
       I32,
       SUM,
       {i32(INT32_MAX), i32(INT32_MAX), i32(-INT32_MAX)},
       i32(INT32_MAX)},
      {"int32 average of the exact sum",
       I32,
       AVG,
       {i32(INT32_MAX), i32(INT32_MAX)},
       i32(INT32_MAX)},
      {"int32 average truncates negative", I32, AVG, {i32(-7), i32(0)}, i32(-3)},
      {"int32 average truncates positive", I32, AVG, {i32(7), i32(0), i32(1)}, i32(2)},
      {"int64 wraps", I64, SUM, {i64(INT64_MAX), i64(1)}, i64(INT64_MIN)},
      {"int64 exact",
       I64,
       SUM,
       {i64(int64_t{1} << 62), i64(-1), i64(int64_t{1} << 61)},
       i64((int64_t{3} << 61) - 1)},
      {"int64 average truncates", I64, AVG, {i64(-9), i64(0), i64(0), i64(0)}, i64(-2)},
      // Min and max: NaN wins, -0 below +0, whatever the order.
      {"min -0 +0", F32, MIN, {z32, f32(1.0f), nz32, f32(3.0f)}, nz32},
      {"max +0 -0", F32, MAX, {nz32, z32, nz32}, z32},
      {"max", F32, MAX, {f32(-5.0f), f32(2.5f), f32(2.0f)}, f32(2.5f)},
      {"min NaN", F32, MIN, {f32(1.0f), 0xffc00001u}, kF32NaN},
      {"max inf", F64, MAX, {f64(1.0), inf64, f64(DBL_MAX)}, inf64},
      {"min -inf", F64, MIN, {f64(1.0), ninf64}, ninf64},
      {"float16 min subnormal", F16, MIN, {0x0002, 0x0001, 0x3c00}, 0x0001},
      {"bfloat16 max NaN", BF16, MAX, {0x3f80, 0x7f81}, kBF16NaN},
      {"int32 min", I32, MIN, {i32(4), i32(INT32_MIN), i32(-1)}, i32(INT32_MIN)},
      {"int64 max", I64, MAX, {i64(-4), i64(INT64_MAX), i64(0)}, i64(INT64_MAX)},
  };
}

std::string caseName(const EdgeCase& c) {
  return std::string(c.what) + " (" + dataTypeName(c.type) + " " + reduceOpName(c.op) + ")";
}

::testing::AssertionResult hasBits(const Buffer& got, const EdgeCase& c) {
  const Buffer want = bitsBuffer(c.type, c.expected);
  if (std::memcmp(got.data(), want.data(), want.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << caseName(c) << ": got " << describeElement(got.data(), 0, c.type) << ", expected "
         << describeElement(want.data(), 0, c.type);
}

TEST(FixedPointEdgeTest, LocalReductionFollowsTheStatedSemantics) {
  for (const EdgeCase& c : edgeCases()) {
    const auto leaves = leavesOf(c.type, c.leaves);
    EXPECT_TRUE(hasBits(localReduce(leaves, 1, c.type, c.op), c)) << "invariantReduceLocal";
  }
}

TEST(FixedPointEdgeTest, ReferenceFollowsTheStatedSemantics) {
  // The same table checks the MPFR reference, so that the random comparisons rest on a reference
  // that is itself right on the corners.
  for (const EdgeCase& c : edgeCases()) {
    const auto leaves = leavesOf(c.type, c.leaves);
    EXPECT_TRUE(hasBits(exactReference(leaves, 1, c.type, c.op), c)) << "exact reference";
  }
}

TEST(FixedPointEdgeTest, DistributedReductionFollowsTheStatedSemantics) {
  // Each case's leaves spread over ranks (leaf l on rank l % p; all on one rank for p = 1), so
  // that non-finite values, zeros and overflowing values sit on various ranks.
  for (const EdgeCase& c : edgeCases()) {
    const auto leaves = leavesOf(c.type, c.leaves);
    const int n = static_cast<int>(leaves.size());
    for (int p : {1, 2, 3}) {
      if (p > n) continue;  // every rank needs a leaf
      std::vector<Buffer> out(p, Buffer(dataTypeSize(c.type), kSentinel));
      std::vector<Status> status(p);
      runRanks(p, [&](collective::Collectives& coll, int r) {
        std::vector<const void*> mine;
        for (int l = r; l < n; l += p) mine.push_back(leaves[l].data());
        status[r] = coll.allreduceLeaves(Mode::kInvariant, mine.data(),
                                         static_cast<int>(mine.size()), out[r].data(), 1,
                                         static_cast<int>(c.type), static_cast<int>(c.op), "edge");
      });
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(status[r].isOk())
            << caseName(c) << " rank " << r << ": " << status[r].toString();
        EXPECT_TRUE(hasBits(out[r], c)) << "np=" << p << " rank " << r;
      }
    }
  }
}

TEST(FixedPointEdgeTest, FloatSixtyFourAverageOfManyLeavesRoundsOnce) {
  // The exact sum is one grid step (2^-45 for leaves near 1) and there are thousands of leaves:
  // the quotient 2^-45 / N must still be rounded once, correctly. Checked against the MPFR
  // reference and against long double (64-bit significand: 2^-45 / N is correctly rounded there,
  // and rounding that to 53 bits again is a double rounding only when the 64-bit value is a tie,
  // which these N do not give).
  for (int n : {3, 6144, 12288, 49152, 65535}) {
    std::vector<Buffer> leaves = leavesOf(DataType::kFloat64, {f64(1.0), f64(-1.0 + 0x1p-45)});
    while (static_cast<int>(leaves.size()) < n) leaves.push_back(bitsBuffer(DataType::kFloat64, 0));
    const Buffer got = localReduce(leaves, 1, DataType::kFloat64, ReduceOp::kAverage);
    const Buffer want = exactReference(leaves, 1, DataType::kFloat64, ReduceOp::kAverage);
    const double expected = static_cast<double>(0x1p-45L / n);
    const Buffer hand = bitsBuffer(DataType::kFloat64, f64(expected));
    EXPECT_TRUE(sameBits(want.data(), hand.data(), 1, DataType::kFloat64)) << "reference, N=" << n;
    EXPECT_TRUE(sameBits(got.data(), want.data(), 1, DataType::kFloat64))
        << "invariantReduceLocal, N=" << n;
  }
}

TEST(FixedPointEdgeTest, SubnormalAveragesRoundOnce) {
  // Averages of many subnormal leaves that land just above, on, or just below a tie of the
  // subnormal grid: u the smallest subnormal, the average of (k + 1/2) N +- 1 units over N leaves
  // lies within N^-1 units of the tie, closer than the dtype's precision can see. Rounding to the
  // dtype's precision first and then to the subnormal grid would make every one of them a tie.
  struct Case {
    const char* what;
    DataType type;
    std::vector<std::pair<uint64_t, int>> leaves;  // bits, how many
    uint64_t expected;
  };
  const DataType F16 = DataType::kFloat16, BF16 = DataType::kBFloat16, F32 = DataType::kFloat32;
  const Case cases[] = {
      // Around u / 2: above rounds to u, the tie and below to 0.
      {"float16 u/2 + u/N", F16, {{0x0001, 4097}, {0, 4095}}, 0x0001},
      {"float16 u/2", F16, {{0x0001, 4096}, {0, 4096}}, 0},
      {"float16 u/2 - u/N", F16, {{0x0001, 4095}, {0, 4097}}, 0},
      {"bfloat16 u/2 + u/N", BF16, {{0x0001, 513}, {0, 511}}, 0x0001},
      {"bfloat16 u/2", BF16, {{0x0001, 512}, {0, 512}}, 0},
      {"bfloat16 u/2 - u/N", BF16, {{0x0001, 511}, {0, 513}}, 0},
      // Around 2.5 u: 20481 = 20 * 1023 + 21 units over 8192 leaves (float16), 2561 = 20 * 127 +
      // 21 over 1024 (bfloat16); the tie goes to even 2 u.
      {"float16 2.5u + u/N", F16, {{0x03ff, 20}, {0x0001, 21}, {0, 8151}}, 0x0003},
      {"float16 2.5u", F16, {{0x03ff, 20}, {0x0001, 20}, {0, 8152}}, 0x0002},
      {"float16 2.5u - u/N", F16, {{0x03ff, 20}, {0x0001, 19}, {0, 8153}}, 0x0002},
      {"bfloat16 2.5u + u/N", BF16, {{0x007f, 20}, {0x0001, 21}, {0, 983}}, 0x0003},
      {"bfloat16 2.5u", BF16, {{0x007f, 20}, {0x0001, 20}, {0, 984}}, 0x0002},
      {"bfloat16 2.5u - u/N", BF16, {{0x007f, 20}, {0x0001, 19}, {0, 985}}, 0x0002},
      {"bfloat16 -2.5u - u/N", BF16, {{0x807f, 20}, {0x8001, 21}, {0, 983}}, 0x8003},
      // float32 with few leaves (the double path): quotients by 3, 5 and 6 in the subnormal
      // range, and ties over a power of two.
      {"float32 2u/3", F32, {{0x1, 2}, {0, 1}}, 0x1},
      {"float32 u/3", F32, {{0x1, 1}, {0, 2}}, 0},
      {"float32 -5u/6", F32, {{0x80000001, 5}, {0, 1}}, 0x80000001},
      {"float32 3 * (2^23 - 1)u / 5", F32, {{0x7fffff, 3}, {0, 2}}, 0x4ccccc},
      {"float32 u/2 over 64", F32, {{0x1, 32}, {0, 32}}, 0},
      {"float32 3u/2 over 64", F32, {{0x3, 32}, {0, 32}}, 0x2},
      {"float32 5u/2 over 2", F32, {{0x5, 1}, {0, 1}}, 0x2},
  };
  for (const Case& c : cases) {
    std::vector<Buffer> leaves;
    for (auto [bits, n] : c.leaves) leaves.insert(leaves.end(), n, bitsBuffer(c.type, bits));
    const Buffer want = bitsBuffer(c.type, c.expected);
    const Buffer reference = exactReference(leaves, 1, c.type, ReduceOp::kAverage);
    const Buffer got = localReduce(leaves, 1, c.type, ReduceOp::kAverage);
    EXPECT_TRUE(sameBits(reference.data(), want.data(), 1, c.type)) << "reference, " << c.what;
    EXPECT_TRUE(sameBits(got.data(), want.data(), 1, c.type)) << "invariantReduceLocal, " << c.what;
  }
}

// roundToFloatBits -------------------------------------------------------------------------------

using u128 = unsigned __int128;

struct Rounding {
  const char* what;
  DataType type;
  bool negative;
  u128 magnitude;
  int exponent;
  bool sticky;
  uint64_t expected;
};

TEST(FixedPointRoundTest, HandCheckedRoundings) {
  const DataType F32 = DataType::kFloat32, F64 = DataType::kFloat64, F16 = DataType::kFloat16,
                 BF16 = DataType::kBFloat16;
  const u128 two24 = u128{1} << 24;
  const Rounding cases[] = {
      {"one", F32, false, 1, 0, false, 0x3f800000},
      {"minus one, scaled", F32, true, 8, -3, false, 0xbf800000},
      {"zero", F32, false, 0, 5, false, 0},
      // 2^24 + 1 is a tie between 2^24 (even) and 2^24 + 2.
      {"tie to even down", F32, false, two24 + 1, 0, false, 0x4b800000},
      {"tie to even up", F32, false, two24 + 3, 0, false, 0x4b800002},
      {"sticky breaks the tie", F32, false, two24 + 1, 0, true, 0x4b800001},
      {"below the tie", F32, false, 4 * two24 + 3, -2, false, 0x4b800000},
      {"above the tie", F32, false, 4 * two24 + 5, -2, false, 0x4b800001},
      // 2^25 - 1 rounds up to 2^25: the carry moves into the next binade.
      {"carry into the next binade", F32, false, 2 * two24 - 1, 0, false, 0x4c000000},
      {"carry, negative", F32, true, 2 * two24 - 1, -30, false, 0xbd000000},
      // Subnormals: the last bit is fixed at 2^-149.
      {"smallest subnormal", F32, false, 1, -149, false, 0x00000001},
      {"half the smallest subnormal: tie to 0", F32, false, 1, -150, false, 0},
      {"half the smallest, sticky", F32, false, 1, -150, true, 0x00000001},
      {"negative quarter: -0", F32, true, 1, -151, false, 0x80000000},
      {"three quarters of the smallest", F32, false, 3, -151, false, 0x00000001},
      {"1.5 smallest: tie to even 2", F32, false, 3, -150, false, 0x00000002},
      {"largest subnormal", F32, false, two24 / 2 - 1, -149, false, 0x007fffff},
      {"largest subnormal + half: tie carries to normal", F32, false, two24 - 1, -150, false,
       0x00800000},
      {"smallest normal", F32, false, 1, -126, false, 0x00800000},
      {"subnormal from a wide magnitude", F32, false, u128{7} << 100, -251, false, 0x00000002},
      // Overflow: beyond the largest finite value, rounding to nearest, gives infinity.
      {"largest finite", F32, false, two24 - 1, 104, false, 0x7f7fffff},
      {"largest + quarter ulp", F32, false, 4 * two24 - 3, 102, false, 0x7f7fffff},
      {"largest + half ulp: tie to even is inf", F32, false, 2 * two24 - 1, 103, false, 0x7f800000},
      {"2^128", F32, false, 1, 128, false, 0x7f800000},
      {"-2^200", F32, true, 1, 200, false, 0xff800000},
      // float64, float16, bfloat16.
      {"float64 tie to even", F64, false, (u128{1} << 53) + 1, 0, false, 0x4340000000000000ull},
      {"float64 wide magnitude", F64, false, (u128{1} << 100) + 1, 0, false, 0x4630000000000000ull},
      {"float64 all 128 bits set", F64, false, ~u128{0}, -127, false, 0x4000000000000000ull},
      {"float64 smallest subnormal", F64, false, 1, -1074, false, 1},
      {"float64 overflow", F64, true, (u128{1} << 54) - 1, 970, false, 0xfff0000000000000ull},
      {"float16 smallest subnormal", F16, false, 1, -24, false, 0x0001},
      {"float16 half of it: tie to 0", F16, false, 1, -25, false, 0},
      {"float16 65504", F16, false, 2047, 5, false, 0x7bff},
      {"float16 65519", F16, false, 65519, 0, false, 0x7bff},
      {"float16 65520: tie to even is inf", F16, false, 4095, 4, false, 0x7c00},
      {"bfloat16 257: tie to even 256", BF16, false, 257, 0, false, 0x4380},
      {"bfloat16 259: tie to even 260", BF16, false, 259, 0, false, 0x4382},
      {"bfloat16 smallest subnormal", BF16, true, 1, -133, false, 0x8001},
      {"bfloat16 overflow", BF16, false, 511, 119, false, 0x7f80},
  };
  for (const Rounding& c : cases) {
    const uint64_t got =
        kernels::roundToFloatBits(c.negative, c.magnitude, c.exponent, c.sticky, c.type);
    const Buffer g = bitsBuffer(c.type, got), w = bitsBuffer(c.type, c.expected);
    EXPECT_EQ(got, c.expected) << c.what << " (" << dataTypeName(c.type) << "): got "
                               << describeElement(g.data(), 0, c.type) << ", expected "
                               << describeElement(w.data(), 0, c.type);
  }
}

}  // namespace
}  // namespace detcoll
