// kernels/ops/taps.h: the backward of padding and of linear upsampling as taps and
// weightedScatter, against loops written here (each output position's gradient added into the
// input position(s) it read, in output order, float accumulation), equal bits for 1 and 3 threads,
// and the argument checks. The serial run of the device formulation is in ops_serial_test.cc.

#include "kernels/ops/taps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(PadBackward, ReflectionAndReplicationMatchTheLoop) {
  std::mt19937_64 g(61);
  const int64_t planes = 3, h = 5, w = 7;
  for (bool reflect : {true, false}) {
    // (left, right, top, bottom); replication also crops (a negative value).
    const std::vector<int64_t> pad =
        reflect ? std::vector<int64_t>{2, 3, 4, 1} : std::vector<int64_t>{-2, 3, 4, 1};
    const int64_t oh = h + pad[2] + pad[3], ow = w + pad[0] + pad[1];
    const std::vector<float> up = testing::wideFloats(planes * oh * ow, g);
    std::vector<float> expected(planes * h * w, 0.0f);
    auto source = [&](int64_t o, int64_t lo, int64_t n) {
      int64_t i = o - lo;
      if (reflect) {
        i = std::abs(i);
        return i >= n ? 2 * (n - 1) - i : i;
      }
      return std::min(std::max<int64_t>(i, 0), n - 1);
    };
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          float& acc = expected[(p * h + source(y, pad[2], h)) * w + source(x, pad[0], w)];
          acc = acc + up[(p * oh + y) * ow + x];
        }
      }
    }
    for (int threads : {1, 3}) {
      std::vector<float> out(planes * h * w, 9.0f);
      ASSERT_TRUE(padBackward(out.data(), up.data(), DataType::kFloat32, planes, {h, w}, pad,
                              reflect, threads)
                      .isOk());
      EXPECT_TRUE(sameBits(out, expected)) << (reflect ? "reflect" : "replicate");
    }
  }
}

TEST(UpsampleNearestBackward, MatchesTheLoopAndTheSerialRun) {
  std::mt19937_64 g(63);
  const int64_t planes = 3;
  // Axes equal, doubled, and neither (with and without a scale factor).
  const Shape in{4, 5, 6}, out{4, 10, 13};
  const std::vector<double> scales{0.0, 0.0, 2.3};
  const std::vector<float> up = testing::wideFloats(planes * 4 * 10 * 13, g);
  std::vector<float> expected(planes * 120, 0.0f);
  const float step = static_cast<float>(1.0 / 2.3);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t d = 0; d < 4; ++d) {
      for (int64_t y = 0; y < 10; ++y) {
        for (int64_t x = 0; x < 13; ++x) {
          const int64_t xi =
              std::min(static_cast<int64_t>(std::floor(static_cast<float>(x) * step)), int64_t{5});
          float& acc = expected[((p * 4 + d) * 5 + y / 2) * 6 + xi];
          acc = acc + up[((p * 4 + d) * 10 + y) * 13 + x];
        }
      }
    }
  }
  std::vector<float> out3(planes * 120, 9.0f), serial(planes * 120, 8.0f);
  ASSERT_TRUE(upsampleNearestBackward(out3.data(), up.data(), DataType::kFloat32, planes, in, out,
                                      scales, 3)
                  .isOk());
  ASSERT_TRUE(testing::serial::upsampleNearestBackward(serial.data(), up.data(), DataType::kFloat32,
                                                       planes, in, out, scales)
                  .isOk());
  EXPECT_TRUE(sameBits(out3, expected));
  EXPECT_TRUE(sameBits(serial, expected));
  EXPECT_EQ(upsampleNearestBackward(out3.data(), up.data(), DataType::kFloat32, planes, {4, 0},
                                    {4, 10}, {}, 1)
                .message(),
            "upsample_nearest_backward: a spatial size is 0 or negative");
}

TEST(UpsampleLinearBackward, OneDimensionMatchesTheLoopAndThreeIsCloseToFloat64) {
  std::mt19937_64 g(62);
  const int64_t planes = 4, n = 7, m = 11;
  const std::vector<float> up = testing::wideFloats(planes * m, g);
  for (bool align : {false, true}) {
    std::vector<float> expected(planes * n, 0.0f);
    const float ratio = align ? static_cast<float>(n - 1) / static_cast<float>(m - 1)
                              : static_cast<float>(n) / static_cast<float>(m);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t o = 0; o < m; ++o) {
        float r =
            align ? ratio * static_cast<float>(o) : ratio * (static_cast<float>(o) + 0.5f) - 0.5f;
        if (r < 0) r = 0;
        const int64_t i0 = static_cast<int64_t>(r), i1 = i0 + (i0 < n - 1 ? 1 : 0);
        const float l1 = std::min(std::max(r - static_cast<float>(i0), 0.0f), 1.0f);
        expected[p * n + i0] = expected[p * n + i0] + (1.0f - l1) * up[p * m + o];
        expected[p * n + i1] = expected[p * n + i1] + l1 * up[p * m + o];
      }
    }
    std::vector<float> out(planes * n);
    ASSERT_TRUE(upsampleLinearBackward(out.data(), up.data(), DataType::kFloat32, planes, {n}, {m},
                                       align, {}, 2)
                    .isOk());
    EXPECT_TRUE(sameBits(out, expected)) << "align " << align;
  }
  // 3-D: the same gradient in float64 (the weights' products differ only by rounding).
  const Shape in{2, 3, 4}, out{5, 4, 7};
  const std::vector<float> up3 = testing::wideFloats(planes * 140, g);
  std::vector<double> up64(up3.begin(), up3.end());
  std::vector<float> narrow(planes * 24);
  std::vector<double> wide(planes * 24);
  ASSERT_TRUE(upsampleLinearBackward(narrow.data(), up3.data(), DataType::kFloat32, planes, in, out,
                                     false, {2.5, 0, 0}, 1)
                  .isOk());
  ASSERT_TRUE(upsampleLinearBackward(wide.data(), up64.data(), DataType::kFloat64, planes, in, out,
                                     false, {2.5, 0, 0}, 1)
                  .isOk());
  double scale = 0;
  for (float v : up3) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < wide.size(); ++i) {
    EXPECT_NEAR(narrow[i], wide[i], 1e-5 * scale) << i;
  }
}

TEST(AvgPoolBackward, PlainAndAdaptiveMatchTheLoop) {
  std::mt19937_64 g(63);
  const int64_t planes = 2, h = 7, w = 8;
  AvgPool pool;
  pool.kernel = {3, 2};
  pool.stride = {2, 2};
  pool.padding = {1, 1};
  pool.ceilMode = true;
  for (int variant = 0; variant < 3; ++variant) {  // padded divisor, counted divisor, override
    pool.countIncludePad = variant == 0;
    pool.divisorOverride = variant == 2 ? -3 : 0;
    const int64_t oh = 4, ow = 5;  // ceil((7 + 2 - 3) / 2) + 1, ceil((8 + 2 - 2) / 2) + 1
    const std::vector<float> up = testing::wideFloats(planes * oh * ow, g);
    std::vector<float> expected(planes * h * w, 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t y0 = y * 2 - 1, y1 = std::min(y0 + 3, h + 1), x0 = x * 2 - 1,
                        x1 = std::min(x0 + 2, w + 1);
          const int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y1, h),
                        xa = std::max<int64_t>(x0, 0), xb = std::min(x1, w);
          const int64_t divisor = variant == 2   ? -3
                                  : variant == 0 ? (y1 - y0) * (x1 - x0)
                                                 : std::max<int64_t>((yb - ya) * (xb - xa), 1);
          const float share = up[(p * oh + y) * ow + x] / static_cast<float>(divisor);
          for (int64_t i = ya; i < yb; ++i) {
            for (int64_t j = xa; j < xb; ++j) {
              float& acc = expected[(p * h + i) * w + j];
              acc = acc + share;
            }
          }
        }
      }
    }
    std::vector<float> out(planes * h * w, 5.0f);
    ASSERT_TRUE(
        avgPoolBackward(out.data(), up.data(), DataType::kFloat32, planes, {h, w}, pool, 1).isOk());
    EXPECT_TRUE(sameBits(out, expected)) << "variant " << variant;
  }
  // Adaptive, 3-D: each output's gradient divided by its windows' lengths in turn.
  const Shape in{3, 5, 7}, out{2, 4, 3};
  const std::vector<float> up = testing::wideFloats(planes * 24, g);
  std::vector<float> expected(planes * 105, 0.0f);
  auto lo = [](int64_t o, int64_t n, int64_t m) { return o * n / m; };
  auto hi = [](int64_t o, int64_t n, int64_t m) { return ((o + 1) * n + m - 1) / m; };
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 4; ++b) {
        for (int64_t c = 0; c < 3; ++c) {
          float share = up[((p * 2 + a) * 4 + b) * 3 + c];
          share = share / static_cast<float>(hi(a, 3, 2) - lo(a, 3, 2));
          share = share / static_cast<float>(hi(b, 5, 4) - lo(b, 5, 4));
          share = share / static_cast<float>(hi(c, 7, 3) - lo(c, 7, 3));
          for (int64_t i = lo(a, 3, 2); i < hi(a, 3, 2); ++i) {
            for (int64_t j = lo(b, 5, 4); j < hi(b, 5, 4); ++j) {
              for (int64_t k = lo(c, 7, 3); k < hi(c, 7, 3); ++k) {
                float& acc = expected[((p * 3 + i) * 5 + j) * 7 + k];
                acc = acc + share;
              }
            }
          }
        }
      }
    }
  }
  std::vector<float> result(planes * 105, 5.0f);
  ASSERT_TRUE(
      adaptiveAvgPoolBackward(result.data(), up.data(), DataType::kFloat32, planes, in, out, 2)
          .isOk());
  EXPECT_TRUE(sameBits(result, expected));
}

TEST(MaxPoolBackward, EachOutputAddsIntoItsPlanesIndexInOrder) {
  std::mt19937_64 g(64);
  const int64_t planes = 3, inner = 20, outputs = 50;
  std::uniform_int_distribution<int64_t> pick(0, inner - 1);
  std::vector<int64_t> indices(planes * outputs);
  for (int64_t& i : indices) i = pick(g);  // many outputs name the same input
  const std::vector<float> up = testing::wideFloats(planes * outputs, g);
  std::vector<float> expected(planes * inner, 0.0f);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t o = 0; o < outputs; ++o) {
      float& acc = expected[p * inner + indices[p * outputs + o]];
      acc = acc + up[p * outputs + o];
    }
  }
  std::vector<float> out(planes * inner, 4.0f);
  ASSERT_TRUE(maxPoolBackward(out.data(), up.data(), indices.data(), DataType::kFloat32, planes,
                              inner, outputs, 2)
                  .isOk());
  EXPECT_TRUE(sameBits(out, expected));
  indices[77] = inner;
  std::vector<float> untouched(planes * inner, 4.0f);
  EXPECT_EQ(maxPoolBackward(untouched.data(), up.data(), indices.data(), DataType::kFloat32, planes,
                            inner, outputs, 1)
                .message(),
            "max_pool_backward: indices[77] = 20 is out of range [0, 20)");
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == 4.0f; }));
}

TEST(TapsChecks, BadShapesAreNamed) {
  std::vector<float> out(10), up(40);
  EXPECT_EQ(
      padBackward(out.data(), up.data(), DataType::kFloat32, 1, {5}, {5, 1}, true, 1).message(),
      "reflection_pad_backward: padding (5, 1) does not fit an input of 5");
  EXPECT_EQ(padBackward(out.data(), up.data(), DataType::kFloat32, 1, {5}, {1, 1, 1, 1}, false, 1)
                .message(),
            "replication_pad_backward: 4 padding values for 1 spatial dimensions");
  EXPECT_EQ(upsampleLinearBackward(out.data(), up.data(), DataType::kFloat32, 1, {2, 2, 2, 2},
                                   {4, 4, 4, 4}, false, {}, 1)
                .message(),
            "upsample_linear_backward: 4 spatial dimensions; 1 to 3");
  EXPECT_EQ(
      upsampleLinearBackward(out.data(), up.data(), DataType::kInt32, 1, {5}, {10}, false, {}, 1)
          .message(),
      "upsample_linear_backward: weighted_scatter: dtype int32; floating point only");
  AvgPool pool;
  pool.kernel = {5, 5};
  pool.stride = {1, 1};
  pool.padding = {3, 0};
  EXPECT_EQ(
      avgPoolBackward(out.data(), up.data(), DataType::kFloat32, 1, {4, 4}, pool, 1).message(),
      "avg_pool_backward: kernel 5, stride 1 and padding 3 are not a pooling window of 4");
  pool.padding = {0, 0};
  EXPECT_EQ(
      avgPoolBackward(out.data(), up.data(), DataType::kFloat32, 1, {4, 4}, pool, 1).message(),
      "avg_pool_backward: kernel 5 with padding 0 is larger than the input of 4");
  EXPECT_EQ(adaptiveAvgPoolBackward(out.data(), up.data(), DataType::kInt64, 1, {4, 4}, {2, 2}, 1)
                .message(),
            "adaptive_avg_pool_backward: dtype int64; floating point only");
}

}  // namespace
}  // namespace detcoll::kernels::ops
