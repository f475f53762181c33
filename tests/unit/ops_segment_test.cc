// kernels/ops/segment.h: the scatter family's engine against a reference that needs no sort
// (every source added to its destination's accumulator in source order, one pass), on random
// wide-range values with heavy duplication, in every dtype; bit equality across thread counts;
// the argument checks.

#include "kernels/ops/segment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

template <typename T>
constexpr DataType typeOf() {
  if constexpr (std::is_same_v<T, float>) return DataType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DataType::kFloat64;
  if constexpr (std::is_same_v<T, Half>) return DataType::kFloat16;
  if constexpr (std::is_same_v<T, BFloat16>) return DataType::kBFloat16;
  if constexpr (std::is_same_v<T, int32_t>) return DataType::kInt32;
  return DataType::kInt64;
}

// Wide-range, non-integer values of T (integers in [-2^20, 2^20]; tests/support), seeded from g.
template <typename T>
std::vector<T> randomOf(size_t n, std::mt19937_64& g) {
  const std::vector<uint8_t> bytes = testing::randomBuffer(typeOf<T>(), n, g());
  std::vector<T> v(n);
  std::memcpy(v.data(), bytes.data(), n * sizeof(T));
  return v;
}

template <typename T>
double toDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return halfToFloat(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bfloat16ToFloat(v);
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
bool sameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The reference: one pass over the sources in order, each added to its destination's
// accumulator; the accumulator types written out here, not taken from the engine.
template <typename T, typename A>
std::vector<T> reference(const std::vector<int64_t>& dest, const std::vector<T>& values,
                         const std::vector<float>* weights, int64_t m, int64_t columns,
                         const std::vector<T>* init, bool mean) {
  std::vector<A> acc(m * columns, A{});
  std::vector<int64_t> count(m, 0);
  if (init != nullptr) {
    for (int64_t i = 0; i < m * columns; ++i) acc[i] = static_cast<A>(toDouble((*init)[i]));
  }
  for (size_t s = 0; s < dest.size(); ++s) {
    const int64_t d = dest[s];
    if (d < 0) continue;  // skipped
    ++count[d];
    for (int64_t c = 0; c < columns; ++c) {
      A v = static_cast<A>(toDouble(values[s * columns + c]));
      if (weights != nullptr) v = static_cast<A>((*weights)[s]) * v;
      acc[d * columns + c] = acc[d * columns + c] + v;
    }
  }
  std::vector<T> out(m * columns);
  for (int64_t d = 0; d < m; ++d) {
    for (int64_t c = 0; c < columns; ++c) {
      A r = acc[d * columns + c];
      if (mean) r = count[d] == 0 ? A{} : r / static_cast<A>(count[d]);
      if (init != nullptr && count[d] == 0) {
        out[d * columns + c] = (*init)[d * columns + c];
      } else if constexpr (std::is_same_v<T, Half>) {
        out[d * columns + c] = floatToHalf(static_cast<float>(r));
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        out[d * columns + c] = floatToBFloat16(static_cast<float>(r));
      } else {
        out[d * columns + c] = static_cast<T>(r);
      }
    }
  }
  return out;
}

template <typename T, typename A>
void checkType(uint64_t seed) {
  std::mt19937_64 g(seed);
  for (const auto& [n, m, columns] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {1000, 3, 1}, {5000, 17, 4}, {200000, 50, 1}, {20000, 1000, 3}}) {
    std::vector<int64_t> dest(n);
    std::uniform_int_distribution<int64_t> pick(0, m - 1);
    for (int64_t& d : dest) d = pick(g);
    const std::vector<T> values = randomOf<T>(n * columns, g);
    const std::vector<T> init = randomOf<T>(m * columns, g);
    std::vector<float> weights(n);
    for (float& w : weights) w = static_cast<float>(std::ldexp(1.0 + (g() % 1000) / 997.0, -3));
    SegmentPlan plan;
    ASSERT_TRUE(planSegments(dest.data(), n, m, "index", &plan).isOk());
    for (int variant = 0; variant < 3; ++variant) {
      const bool fromInit = variant == 1, weighted = variant == 2, mean = variant == 0;
      const std::vector<T> expected = reference<T, A>(dest, values, weighted ? &weights : nullptr,
                                                      m, columns, fromInit ? &init : nullptr, mean);
      for (int threads : {1, 2, 7}) {
        std::vector<T> out = fromInit ? init : std::vector<T>(m * columns);
        SegmentSources in;
        in.values = values.data();
        in.type = typeOf<T>();
        in.rowStride = columns;
        if (weighted) in.weights = weights.data();
        SegmentOutput o{out.data(), columns, columns,
                        fromInit ? SegmentInit::kOutput : SegmentInit::kZero, mean};
        ASSERT_TRUE(reduceSegments(plan, in, o, threads).isOk());
        EXPECT_TRUE(sameBits(out, expected)) << "n " << n << " m " << m << " columns " << columns
                                             << " variant " << variant << " threads " << threads;
        // The one-pass formulation gives the same bits.
        std::vector<T> direct = fromInit ? init : std::vector<T>(m * columns);
        o.values = direct.data();
        ASSERT_TRUE(scatterReduce(dest.data(), n, m, Skip{}, in, o, threads).isOk());
        EXPECT_TRUE(sameBits(direct, expected)) << "one pass: n " << n << " m " << m << " variant "
                                                << variant << " threads " << threads;
      }
    }
  }
}

TEST(SegmentReduce, Float32MatchesTheOnePassReference) {
  checkType<float, float>(1);
}
TEST(SegmentReduce, Float64MatchesTheOnePassReference) {
  checkType<double, double>(2);
}
TEST(SegmentReduce, Float16AccumulatesInFloat) {
  checkType<Half, float>(3);
}
TEST(SegmentReduce, BFloat16AccumulatesInFloat) {
  checkType<BFloat16, float>(4);
}
TEST(SegmentReduce, Int64IsExact) {
  checkType<int64_t, int64_t>(5);
}
TEST(SegmentReduce, Int32AccumulatesInInt64) {
  checkType<int32_t, int64_t>(6);
}

TEST(SegmentReduce, SourceOrderMattersAndIsKept) {
  // 1 + 2^-24 + 2^-24 in float: left to right gives 1, while (2^-24 + 2^-24) + 1 gives 1 + 2^-23.
  const std::vector<int64_t> dest{0, 0, 0};
  for (const auto& [values, expected] : std::vector<std::pair<std::vector<float>, float>>{
           {{1.0f, 0x1p-24f, 0x1p-24f}, 1.0f}, {{0x1p-24f, 0x1p-24f, 1.0f}, 1.0f + 0x1p-23f}}) {
    SegmentPlan plan;
    ASSERT_TRUE(planSegments(dest.data(), 3, 1, "index", &plan).isOk());
    float out = -7.0f;
    SegmentSources in;
    in.values = values.data();
    in.rowStride = 1;
    ASSERT_TRUE(reduceSegments(plan, in, SegmentOutput{&out, 1, 1}, 1).isOk());
    EXPECT_EQ(out, expected);
  }
}

TEST(SegmentReduce, GatheredRowsAndSkippedSources) {
  // Sources read rows[s] of a small table; destination -1 (the skip value) contributes nothing.
  const std::vector<int64_t> dest{2, -1, 0, 2, -1, 2};
  const std::vector<int64_t> rows{1, 0, 1, 0, 1, 1};
  const std::vector<double> table{0.25, 0.5, 1.5, 3.0};  // 2 rows x 2 columns
  SegmentPlan plan;
  ASSERT_TRUE(planSegments(dest.data(), 6, 3, "indices", &plan, Skip{true, -1, false}).isOk());
  EXPECT_EQ(plan.order, (std::vector<int64_t>{2, 0, 3, 5}));
  std::vector<double> out(6, 9.0);
  SegmentSources in;
  in.values = table.data();
  in.type = DataType::kFloat64;
  in.rowStride = 2;
  in.rows = rows.data();
  ASSERT_TRUE(reduceSegments(plan, in, SegmentOutput{out.data(), 2, 2}, 1).isOk());
  EXPECT_EQ(out, (std::vector<double>{1.5, 3.0, 0.0, 0.0, 1.5 + 0.25 + 1.5, 3.0 + 0.5 + 3.0}));
}

TEST(SegmentPlanChecks, OutOfRangeIndicesAreNamed) {
  SegmentPlan plan;
  const std::vector<int64_t> dest{0, 4, 1};
  Status s = planSegments(dest.data(), 3, 4, "index", &plan);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("index[1] = 4 is out of range [0, 4)"), std::string::npos)
      << s.message();
  const std::vector<int64_t> negative{0, -3};
  s = planSegments(negative.data(), 2, 4, "segment_ids", &plan);
  EXPECT_NE(s.message().find("segment_ids[1] = -3"), std::string::npos) << s.message();
  EXPECT_FALSE(planSegments(nullptr, 2, 4, "index", &plan).isOk());
  EXPECT_TRUE(planSegments(nullptr, 0, 4, "index", &plan).isOk());
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace detcoll::kernels::ops
