// The invariant mode on subnormal values (kernels/codec.h, kernels/fixed_point.h): the rule,
// asserted on every path that computes it (the local reduction, the CPU path at 1 to 4 ranks with
// either transport, the GPU's bodies on the serial executor) against computations written here
// from the rule alone (libm's ilogb, ldexp and nearbyint, long double sums) and against the MPFR
// references of tests/support/exact_reference.h.
//
// The rule: a subnormal leaf's key is 1, the key of the smallest normal binade, so the finest grid
// of any element is 2^(1 - bias - 45): 2^-1067 for float64, 2^-171 for float32 and bfloat16,
// 2^-59 for float16. Every leaf is rounded to its element's grid (nearest, ties to even), the
// rounded leaves are summed exactly, and the sum is rounded once to the dtype with gradual
// underflow (a subnormal result is kept, never flushed; an exact zero is +0). Hence:
//   float64: subnormal leaves are neither flushed nor exact: they are rounded to multiples of
//            2^-1067 = 128 times the smallest subnormal (so |x| <= 2^-1068 contributes 0, and the
//            largest subnormal alone gives DBL_MIN); a sum of leaves on that grid is exact, also
//            where it is subnormal.
//   float32: subnormal leaves are exact while the element's largest leaf is below 2^-103 (key 23,
//            grid 2^-149); above, the grid coarsens by one bit per binade.
//   bfloat16: the same below 2^-87 (key 39, grid 2^-133).
//   float16: always exact (the grid is at most 2^-30, the subnormal spacing 2^-24): the result is
//            the exact sum of the leaves, rounded once.

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "collective/allreduce.h"
#include "collective/comm_exchange.h"
#include "collective/transport/thread_communicator.h"
#include "kernels/fixed_point.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"
#include "tests/support/serial_allreduce.h"
#include "tests/support/wide_bits.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::InvariantTransport;
using collective::transport::Communicator;
using testing::Buffer;
using testing::pointers;
using testing::sameBits;

template <typename T>
std::vector<Buffer> leavesOf(const std::vector<std::vector<T>>& values) {
  std::vector<Buffer> leaves;
  for (const auto& v : values) {
    Buffer b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    leaves.push_back(b);
  }
  return leaves;
}

// Raw 16-bit leaves: leaves[l][i].
std::vector<Buffer> leavesOfBits16(const std::vector<std::vector<uint16_t>>& values) {
  return leavesOf(values);
}

// The result of every path that computes the invariant sum of `leaves` (count elements each):
// the local reduction; the CPU path at 1 to 4 ranks, leaves dealt round-robin, sending encodings;
// one leaf per rank sending the leaves themselves; the GPU's bodies on the serial executor at 3
// ranks. Small segments, so that the schedule runs many rounds.
std::vector<std::pair<std::string, Buffer>> everyPath(const std::vector<Buffer>& leaves,
                                                      size_t count, DataType type, ReduceOp op) {
  const int n = static_cast<int>(leaves.size());
  const size_t bytes = count * dataTypeSize(type);
  std::vector<std::pair<std::string, Buffer>> results;
  {
    Buffer out(bytes);
    const auto in = pointers(leaves);
    kernels::invariantReduceLocal(out.data(), in.data(), n, count, type, op);
    results.emplace_back("invariantReduceLocal", out);
  }
  struct Run {
    int p;
    InvariantTransport transport;
    bool serial;
  };
  std::vector<Run> runs = {
      {1, InvariantTransport::kEncodings, false}, {2, InvariantTransport::kEncodings, false},
      {3, InvariantTransport::kEncodings, false}, {4, InvariantTransport::kEncodings, false},
      {n, InvariantTransport::kLeaves, false},    {3, InvariantTransport::kEncodings, true},
      {n, InvariantTransport::kLeaves, true}};
  for (const Run& run : runs) {
    if (run.p > n) continue;
    std::vector<Buffer> out(run.p, Buffer(bytes));
    std::vector<Status> status(run.p);
    const Status spawned = collective::transport::spawn(run.p, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<const void*> mine;
      for (int l = r; l < n; l += run.p) mine.push_back(leaves[l].data());
      collective::AllreduceOptions o;
      o.mode = Mode::kInvariant;
      o.leaves = mine.data();
      o.nleaves = static_cast<int>(mine.size());
      o.recv = out[r].data();
      o.count = count;
      o.type = type;
      o.op = op;
      o.totalLeaves = n;
      o.segmentBytes = 256;
      o.invariantTransport = run.transport;
      if (run.serial) {
        collective::CommExchange exchange(comm);
        status[r] = testing::serialAllreduce(exchange, o);
      } else {
        status[r] = collective::allreduce(comm, o);
      }
    });
    const std::string what =
        std::string(run.serial ? "GPU bodies" : "CPU path") + " np=" + std::to_string(run.p) +
        (run.transport == InvariantTransport::kLeaves ? " leaves" : " encodings");
    EXPECT_TRUE(spawned.isOk()) << what << ": " << spawned.toString();
    for (int r = 0; r < run.p; ++r) {
      EXPECT_TRUE(status[r].isOk()) << what << " rank " << r << ": " << status[r].toString();
      results.emplace_back(what + " rank " + std::to_string(r), out[r]);
    }
  }
  return results;
}

void expectEveryPathGives(const std::vector<Buffer>& leaves, size_t count, DataType type,
                          ReduceOp op, const Buffer& expected, const std::string& what) {
  for (const auto& [path, got] : everyPath(leaves, count, type, op)) {
    EXPECT_TRUE(sameBits(got.data(), expected.data(), count, type)) << what << ", " << path;
  }
}

Buffer mpfrInvariant(const std::vector<Buffer>& leaves, size_t count, DataType type, ReduceOp op) {
  Buffer out(count * dataTypeSize(type));
  testing::exactInvariantReference(out.data(), pointers(leaves), count, type, op);
  return out;
}

Buffer mpfrExactSum(const std::vector<Buffer>& leaves, size_t count, DataType type, ReduceOp op) {
  Buffer out(count * dataTypeSize(type));
  testing::exactSumRounded(out.data(), pointers(leaves), count, type, op);
  return out;
}

// ---- float64 ------------------------------------------------------------------------------------

// The rule for float64, written from its statement: the grid is 2^(e - 45), e the exponent of the
// largest leaf but at least -1022; each leaf rounded to it, ties to even (nearbyint in the default
// rounding mode); the integer sum scaled back. Exact for the tiny values used here: every step is
// a scaling by a power of two of a value that stays representable, and |sum| < 2^53.
double float64Rule(const std::vector<double>& xs) {
  int e = -1022;
  bool nonzero = false;
  for (double x : xs) {
    if (x == 0) continue;
    nonzero = true;
    e = std::max(e, std::ilogb(x));
  }
  if (!nonzero) return 0.0;
  const int grid = e - 45;
  int64_t sum = 0;
  for (double x : xs) sum += static_cast<int64_t>(std::nearbyint(std::ldexp(x, -grid)));
  if (sum == 0) return 0.0;  // +0
  EXPECT_LT(std::llabs(sum), int64_t{1} << 53);
  return std::ldexp(static_cast<double>(sum), grid);
}

double subnormal64(uint64_t fraction, bool negative) {
  const uint64_t bits = (negative ? uint64_t{1} << 63 : 0) | fraction;
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

TEST(InvariantSubnormalTest, Float64SubnormalLeavesAreRoundedToMultiplesOfTwoToTheMinus1067) {
  const double u = std::numeric_limits<double>::denorm_min();  // 2^-1074
  const double largestSubnormal = subnormal64((uint64_t{1} << 52) - 1, false);
  struct Case {
    const char* what;
    std::vector<double> leaves;
    double expected;
  };
  const Case cases[] = {
      {"the smallest subnormal vanishes", {u}, 0.0},
      {"so does its negative, to +0", {-u}, 0.0},
      {"64 u is half a step: ties to even 0", {64 * u}, 0.0},
      {"65 u rounds up to a step", {65 * u}, 0x1p-1067},
      {"192 u is a step and a half: ties to even 2", {192 * u}, 0x1p-1066},
      {"one step is kept: a subnormal result", {0x1p-1067}, 0x1p-1067},
      {"a step plus u", {0x1p-1067 + u}, 0x1p-1067},
      {"the largest subnormal alone becomes DBL_MIN", {largestSubnormal}, DBL_MIN},
      {"DBL_MIN minus the largest subnormal is u exactly, but 0 here",
       {DBL_MIN, -largestSubnormal},
       0.0},
      {"a hundred u, a hundred times", std::vector<double>(100, 100 * u), 0x1p-1067 * 100},
      {"normals cancelling to a subnormal on the grid",
       {DBL_MIN * (1 + 0x1p-45), -DBL_MIN},
       0x1p-1067},
      {"and to a subnormal off it", {DBL_MIN * (1 + 0x1p-50), -DBL_MIN}, 0.0},
  };
  for (const Case& c : cases) {
    const double rule = float64Rule(c.leaves);
    ASSERT_EQ(std::memcmp(&rule, &c.expected, 8), 0)
        << c.what << ": the rule as written here gives " << rule << ", the case says "
        << c.expected;
    std::vector<std::vector<double>> values;
    for (double x : c.leaves) values.push_back({x});
    const auto leaves = leavesOf(values);
    Buffer expected(8);
    std::memcpy(expected.data(), &c.expected, 8);
    EXPECT_TRUE(sameBits(mpfrInvariant(leaves, 1, DataType::kFloat64, ReduceOp::kSum).data(),
                         expected.data(), 1, DataType::kFloat64))
        << c.what << ": MPFR reference";
    expectEveryPathGives(leaves, 1, DataType::kFloat64, ReduceOp::kSum, expected, c.what);
  }
}

TEST(InvariantSubnormalTest, Float64RandomSubnormalsFollowTheRuleOnEveryPath) {
  // Leaves in the subnormal range and the smallest normal binade (key 1), random signs and
  // fractions, a quarter of the elements with fractions below 256 (around the grid's step), some
  // all zero.
  const size_t count = 1500;
  const int n = 5;
  std::mt19937_64 g(20261201);
  std::vector<std::vector<double>> values(n, std::vector<double>(count));
  for (size_t i = 0; i < count; ++i) {
    const int kind = static_cast<int>(g() % 8);
    for (int l = 0; l < n; ++l) {
      uint64_t fraction = g() & ((uint64_t{1} << 52) - 1);
      if (kind < 2) fraction &= 0xff;
      if (kind == 2) fraction = 0;
      uint64_t bits = fraction | (g() % 4 == 0 ? uint64_t{1} << 52 : 0);  // 1 in 4 normal
      if (kind == 2) bits = 0;
      values[l][i] = subnormal64(bits, g() & 1);
    }
  }
  const auto leaves = leavesOf(values);
  Buffer expected(count * 8);
  size_t subnormalResults = 0, inexact = 0;
  const Buffer exact = mpfrExactSum(leaves, count, DataType::kFloat64, ReduceOp::kSum);
  for (size_t i = 0; i < count; ++i) {
    std::vector<double> xs;
    for (int l = 0; l < n; ++l) xs.push_back(values[l][i]);
    const double r = float64Rule(xs);
    std::memcpy(expected.data() + 8 * i, &r, 8);
    subnormalResults += r != 0 && std::fabs(r) < DBL_MIN;
    inexact += std::memcmp(&r, exact.data() + 8 * i, 8) != 0;
  }
  EXPECT_TRUE(sameBits(mpfrInvariant(leaves, count, DataType::kFloat64, ReduceOp::kSum).data(),
                       expected.data(), count, DataType::kFloat64))
      << "MPFR reference";
  expectEveryPathGives(leaves, count, DataType::kFloat64, ReduceOp::kSum, expected, "random");
  // Subnormal results come back (not flushed), and the grid does change most exact sums.
  EXPECT_GT(subnormalResults, count / 4);
  EXPECT_GT(inexact, count / 2);
}

TEST(InvariantSubnormalTest, Float64SubnormalSumsOfLeavesOnTheGridAreExact) {
  // Leaves of the two smallest normal binades and the subnormal range, on the grid of 2^-1065
  // (low bits cleared), cancelling into the subnormal range: every leaf lies below 2^-1019, so the
  // key is at most 3 and the grid at most 2^-1065, and the result is the exact sum (MPFR, no
  // grid), a subnormal, whatever the spread over ranks.
  const size_t count = 700;
  const int n = 4;
  std::mt19937_64 g(77);
  std::vector<std::vector<double>> values(n, std::vector<double>(count));
  size_t subnormal = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int l = 0; l + 1 < n; ++l) {
      const uint64_t field = g() % 3;  // below 2^-1020
      const uint64_t bits = (field << 52) | (g() & ((uint64_t{1} << 52) - 1) & ~uint64_t{0x1ff});
      values[l][i] = subnormal64(bits, l % 2 == 1);
      sum += values[l][i];  // exact: multiples of 2^-1065 below 2^-1019
    }
    // The last leaf cancels all but a few hundred grid steps of the sum: exact, on the grid.
    const double rest = std::ldexp(static_cast<double>(g() % 2000) - 1000, -1065);
    values[n - 1][i] = rest - sum;
  }
  const auto leaves = leavesOf(values);
  const Buffer exact = mpfrExactSum(leaves, count, DataType::kFloat64, ReduceOp::kSum);
  for (size_t i = 0; i < count; ++i) {
    double r;
    std::memcpy(&r, exact.data() + 8 * i, 8);
    subnormal += r != 0 && std::fabs(r) < DBL_MIN;
  }
  EXPECT_GT(subnormal, count * 9 / 10);
  expectEveryPathGives(leaves, count, DataType::kFloat64, ReduceOp::kSum, exact,
                       "on the grid, cancelling");
}

// ---- float32, bfloat16, float16
// ------------------------------------------------------------------

float float32Bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(InvariantSubnormalTest, Float32SubnormalsAreExactBelowTwoToTheMinus103) {
  // Random subnormal leaves with one leaf per element of magnitude up to the largest below 2^-103
  // (key 23 at most: grid 2^-149, the subnormal spacing): the result is the exact sum rounded
  // once, here checked against a long double sum (exact: 6 values within 2^-103 .. 2^-149) and
  // one conversion to float, and against MPFR.
  const size_t count = 1200;
  const int n = 6;
  std::mt19937_64 g(31);
  std::vector<std::vector<float>> values(n, std::vector<float>(count));
  Buffer expected(count * 4);
  for (size_t i = 0; i < count; ++i) {
    long double sum = 0;
    for (int l = 0; l < n; ++l) {
      uint32_t bits = static_cast<uint32_t>(g()) & 0x7fffffu;  // subnormal or zero
      if (l == 0) bits = static_cast<uint32_t>((1 + g() % 23) << 23) | (bits & 0x7fffffu);
      if (l == 0 && (bits >> 23) == 23) bits |= 0x7fffffu;  // the largest below 2^-103
      if (g() & 1) bits |= 0x80000000u;
      values[l][i] = float32Bits(bits);
      sum += values[l][i];
    }
    const float r = sum == 0 ? 0.0f : static_cast<float>(sum);
    std::memcpy(expected.data() + 4 * i, &r, 4);
  }
  const auto leaves = leavesOf(values);
  EXPECT_TRUE(sameBits(mpfrExactSum(leaves, count, DataType::kFloat32, ReduceOp::kSum).data(),
                       expected.data(), count, DataType::kFloat32))
      << "MPFR exact sum";
  expectEveryPathGives(leaves, count, DataType::kFloat32, ReduceOp::kSum, expected,
                       "float32 subnormals below 2^-103");
}

TEST(InvariantSubnormalTest, TheGridCoarsensAboveTheLimit) {
  // x, a tiny leaf, -x: the tiny leaf survives exactly while x is below the limit, and is rounded
  // to the coarser grid above it (the exact sum would be the tiny leaf in every case).
  struct Case {
    const char* what;
    DataType type;
    uint64_t x;       // bits of the large leaf
    uint64_t tiny;    // bits of the subnormal leaf
    uint64_t result;  // bits
  };
  const uint64_t f32Sign = 0x80000000u, bf16Sign = 0x8000u;
  const Case cases[] = {
      // float32: 2^-104 has key 23 (grid 2^-149), 2^-103 key 24 (grid 2^-148).
      {"float32 u below the limit", DataType::kFloat32, 0x0b800000u, 1, 1},
      {"float32 u at the limit: half a step, to 0", DataType::kFloat32, 0x0c000000u, 1, 0},
      {"float32 3u at the limit: ties to even 4u", DataType::kFloat32, 0x0c000000u, 3, 4},
      {"float32 -3u at the limit", DataType::kFloat32, 0x0c000000u, f32Sign | 3, f32Sign | 4},
      {"float32 5u two binades above: to 4u", DataType::kFloat32, 0x0c800000u, 5, 4},
      // bfloat16: 2^-88 has key 39 (grid 2^-133), 2^-87 key 40 (grid 2^-132).
      {"bfloat16 u below the limit", DataType::kBFloat16, 0x1380u, 1, 1},
      {"bfloat16 u at the limit: to 0", DataType::kBFloat16, 0x1400u, 1, 0},
      {"bfloat16 -3u at the limit", DataType::kBFloat16, 0x1400u, bf16Sign | 3, bf16Sign | 4},
      // float16: the largest finite value leaves the smallest subnormal exact.
      {"float16 u beside 65504", DataType::kFloat16, 0x7bffu, 1, 1},
      {"float16 -u beside 65504", DataType::kFloat16, 0x7bffu, 0x8001u, 0x8001u},
  };
  for (const Case& c : cases) {
    const size_t es = dataTypeSize(c.type);
    const uint64_t sign = uint64_t{1} << (8 * es - 1);
    std::vector<Buffer> leaves;
    for (uint64_t bits : {c.x, c.tiny, c.x ^ sign}) {
      Buffer b(es);
      std::memcpy(b.data(), &bits, es);
      leaves.push_back(b);
    }
    Buffer expected(es);
    std::memcpy(expected.data(), &c.result, es);
    EXPECT_TRUE(sameBits(mpfrInvariant(leaves, 1, c.type, ReduceOp::kSum).data(), expected.data(),
                         1, c.type))
        << c.what << ": MPFR reference";
    expectEveryPathGives(leaves, 1, c.type, ReduceOp::kSum, expected, c.what);
  }
}

TEST(InvariantSubnormalTest, Float16IsAlwaysTheExactSumRoundedOnce) {
  // Random finite float16 leaves over the whole range, subnormals included, sums that overflow
  // included: the result is the exact sum rounded once (MPFR), for sum and for average.
  const size_t count = 1000;
  const int n = 7;
  std::mt19937_64 g(5);
  std::vector<std::vector<uint16_t>> values(n, std::vector<uint16_t>(count));
  for (size_t i = 0; i < count; ++i) {
    const bool tiny = g() % 2 == 0;  // half the elements: subnormals and the smallest normals
    for (int l = 0; l < n; ++l) {
      uint16_t bits = static_cast<uint16_t>(g());
      if (tiny) bits &= 0x87ffu;
      if (((bits >> 10) & 0x1f) == 0x1f) bits &= 0xfbffu;  // finite
      values[l][i] = bits;
    }
  }
  const auto leaves = leavesOfBits16(values);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    const Buffer exact = mpfrExactSum(leaves, count, DataType::kFloat16, op);
    expectEveryPathGives(leaves, count, DataType::kFloat16, op, exact,
                         std::string("float16 ") + reduceOpName(op));
  }
}

}  // namespace
}  // namespace detcoll
