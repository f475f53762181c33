// kernels/ops/axis_sums.h: sums over axes against the fixed tree written recursively here, on
// random wide-range values in every float dtype; thread counts and layouts (NCHW vs NHWC bias
// gradients of the same data) give the same bits; the argument checks.

#include "kernels/ops/axis_sums.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/ops/op_checks.h"
#include "tests/support/op_data.h"
#include "tests/support/reference.h"

namespace detcoll::kernels::ops {
namespace {

// The definition, recursively: pairs of the level below, an odd last one carried up.
float combine(const std::vector<float>& level) {
  if (level.size() == 1) return level[0];
  std::vector<float> up;
  for (size_t i = 0; i < level.size(); i += 2) {
    up.push_back(i + 1 < level.size() ? level[i] + level[i + 1] : level[i]);
  }
  return combine(up);
}

float tree(const std::vector<float>& x) {
  if (x.empty()) return 0.0f;
  std::vector<float> chunks;
  for (size_t start = 0; start < x.size(); start += kChunk) {
    float s = x[start];
    for (size_t j = start + 1; j < std::min(x.size(), start + static_cast<size_t>(kChunk)); ++j) {
      s += x[j];
    }
    chunks.push_back(s);
  }
  return combine(chunks);
}

TEST(SumOverAxes, MatchesTheRecursiveTreeForEveryAxisSet) {
  std::mt19937_64 g(21);
  const Shape shape{3, 70, 5, 9};
  const std::vector<float> x = testing::wideFloats(3 * 70 * 5 * 9, g);
  for (const std::vector<int>& axes :
       std::vector<std::vector<int>>{{1}, {0, 2, 3}, {-1}, {0, 1, 2, 3}, {1, 3}, {}}) {
    std::vector<bool> reduced(4, false);
    for (int a : axes) reduced[a < 0 ? a + 4 : a] = true;
    // The reference: walk kept positions row-major; gather each sequence row-major.
    std::vector<float> expected;
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < (reduced[0] ? 1 : 3); ++idx[0])
      for (idx[1] = 0; idx[1] < (reduced[1] ? 1 : 70); ++idx[1])
        for (idx[2] = 0; idx[2] < (reduced[2] ? 1 : 5); ++idx[2])
          for (idx[3] = 0; idx[3] < (reduced[3] ? 1 : 9); ++idx[3]) {
            std::vector<float> sequence;
            int64_t r[4];
            for (r[0] = 0; r[0] < (reduced[0] ? 3 : 1); ++r[0])
              for (r[1] = 0; r[1] < (reduced[1] ? 70 : 1); ++r[1])
                for (r[2] = 0; r[2] < (reduced[2] ? 5 : 1); ++r[2])
                  for (r[3] = 0; r[3] < (reduced[3] ? 9 : 1); ++r[3]) {
                    int64_t c[4];
                    for (int d = 0; d < 4; ++d) c[d] = reduced[d] ? r[d] : idx[d];
                    sequence.push_back(x[((c[0] * 70 + c[1]) * 5 + c[2]) * 9 + c[3]]);
                  }
            expected.push_back(tree(sequence));
          }
    for (int threads : {1, 2, 5}) {
      std::vector<float> out(expected.size(), -1.0f);
      ASSERT_TRUE(
          sumOverAxes(x.data(), shape, DataType::kFloat32, axes, out.data(), threads).isOk());
      EXPECT_EQ(0, std::memcmp(out.data(), expected.data(), out.size() * 4))
          << "axes of size " << axes.size() << ", threads " << threads;
    }
  }
}

// The tree of each output's sequence, the sequences gathered by walking the input row-major
// (which visits each output's reduced positions row-major).
std::vector<float> referenceSums(const std::vector<float>& x, const Shape& shape,
                                 const std::vector<int>& axes) {
  const size_t rank = shape.size();
  std::vector<bool> reduced(rank, false);
  for (int a : axes) reduced[a < 0 ? a + rank : a] = true;
  int64_t outputs = 1;
  for (size_t d = 0; d < rank; ++d) outputs *= reduced[d] ? 1 : shape[d];
  std::vector<std::vector<float>> sequences(outputs);
  std::vector<int64_t> c(rank, 0);
  for (float v : x) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d) o = reduced[d] ? o : o * shape[d] + c[d];
    sequences[o].push_back(v);
    for (size_t d = rank; d-- > 0;) {
      if (++c[d] < shape[d]) break;
      c[d] = 0;
    }
  }
  std::vector<float> sums;
  for (const std::vector<float>& sequence : sequences) sums.push_back(tree(sequence));
  return sums;
}

TEST(SumOverAxes, LongRunsOutputBlocksAndEmptyAxesMatchTheRecursiveTree) {
  // Long sequences (chunks taken several at a time, with a partial last chunk), contiguous
  // outputs in blocks and a partial block, adjacent reduced axes merged into one stride, size-1
  // axes, two separate runs, and empty axes.
  std::mt19937_64 g(24);
  const std::vector<std::pair<Shape, std::vector<int>>> cases = {
      {{2, 600, 3}, {1}},    {{3, 11, 700}, {2}},   {{5, 300, 2, 7}, {1, 2}}, {{40, 3, 20}, {0, 2}},
      {{1, 513, 1}, {0, 1}}, {{9, 1, 260}, {1, 2}}, {{4, 0, 5}, {1}},         {{4, 0, 5}, {0}},
      {{2000}, {0}},         {{17, 1, 3}, {1}}};
  for (const auto& [shape, axes] : cases) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const std::vector<float> x = testing::wideFloats(n, g);
    const std::vector<float> expected = referenceSums(x, shape, axes);
    for (int threads : {1, 3}) {
      std::vector<float> out(expected.size(), -1.0f);
      ASSERT_TRUE(
          sumOverAxes(x.data(), shape, DataType::kFloat32, axes, out.data(), threads).isOk());
      EXPECT_TRUE(out.empty() || std::memcmp(out.data(), expected.data(), out.size() * 4) == 0)
          << "shape " << show(shape) << ", " << axes.size() << " axes, threads " << threads;
    }
  }
}

TEST(SumsAsMade, EachIsTheTreeOfItsValuesForEveryLength) {
  // Lengths around a chunk (32) and a block of chunks (256); the values are asked for in pieces,
  // two sequences at once.
  std::mt19937_64 g(25);
  for (int64_t k : {0, 1, 31, 32, 33, 255, 256, 257, 1000, 4099}) {
    const std::vector<float> x = testing::wideFloats(k, g), y = testing::wideFloats(k, g);
    int64_t asked = 0;
    const std::array<float, 2> sums =
        sumsAsMade<float, 2>(k, [&](int64_t start, int64_t count, float* const* into) {
          EXPECT_EQ(start, asked);  // in order, each value once
          asked += count;
          std::copy(x.begin() + start, x.begin() + start + count, into[0]);
          std::copy(y.begin() + start, y.begin() + start + count, into[1]);
        });
    EXPECT_EQ(asked, k);
    const float expected[2] = {tree(x), tree(y)};
    EXPECT_EQ(0, std::memcmp(sums.data(), expected, 8)) << "k " << k;
    float viaAxes = -1.0f;
    ASSERT_TRUE(sumOverAxes(y.data(), {k}, DataType::kFloat32, {0}, &viaAxes, 1).isOk());
    EXPECT_EQ(0, std::memcmp(&sums[1], &viaAxes, 4)) << "k " << k;
  }
}

TEST(SumOverAxes, TheTreeIsNotASequentialSum) {
  // 70 values: a sequential float sum differs from the tree somewhere on wide-range data.
  std::mt19937_64 g(22);
  int differ = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> x = testing::wideFloats(70, g);
    float sequential = 0.0f;
    for (float v : x) sequential += v;
    float out = 0.0f;
    ASSERT_TRUE(sumOverAxes(x.data(), {70}, DataType::kFloat32, {0}, &out, 1).isOk());
    EXPECT_EQ(out, tree(x));
    differ += out != sequential;
  }
  EXPECT_GT(differ, 0);
}

TEST(BiasAddGrad, ChannelsFirstAndLastOfTheSameDataAgreeBitForBit) {
  std::mt19937_64 g(23);
  const int64_t n = 4, c = 6, h = 9, w = 11;
  const std::vector<float> nchw = testing::wideFloats(n * c * h * w, g);
  std::vector<float> nhwc(nchw.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          nhwc[((a * h + y) * w + x) * c + b] = nchw[((a * c + b) * h + y) * w + x];
  std::vector<float> first(c), last(c);
  ASSERT_TRUE(
      biasAddGrad(nchw.data(), {n, c, h, w}, DataType::kFloat32, true, first.data(), 2).isOk());
  ASSERT_TRUE(
      biasAddGrad(nhwc.data(), {n, h, w, c}, DataType::kFloat32, false, last.data(), 1).isOk());
  EXPECT_EQ(0, std::memcmp(first.data(), last.data(), c * 4));
  for (int64_t b = 0; b < c; ++b) {
    double exact = 0.0, magnitude = 0.0;
    for (int64_t a = 0; a < n; ++a)
      for (int64_t p = 0; p < h * w; ++p) {
        exact += nchw[(a * c + b) * h * w + p];
        magnitude += std::fabs(nchw[(a * c + b) * h * w + p]);
      }
    EXPECT_NEAR(first[b], exact, 1e-5 * magnitude);
  }
}

TEST(SumOverAxes, HalfAccumulatesInFloatAndChecksArguments) {
  std::mt19937_64 g(24);
  const std::vector<float> values = testing::wideFloats(1000, g);
  std::vector<Half> x(values.size());
  std::vector<float> exact(values.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = floatToHalf(values[i] * 1e-3f);
    exact[i] = halfToFloat(x[i]);
  }
  Half out{};
  ASSERT_TRUE(sumOverAxes(x.data(), {1000}, DataType::kFloat16, {0}, &out, 1).isOk());
  EXPECT_EQ(out.bits, floatToHalf(tree(exact)).bits);
  EXPECT_FALSE(sumOverAxes(x.data(), {1000}, DataType::kFloat16, {1}, &out, 1).isOk());
  EXPECT_FALSE(sumOverAxes(x.data(), {10, 100}, DataType::kFloat16, {0, -2}, &out, 1).isOk());
  const Status s = biasAddGrad(x.data(), {1000}, DataType::kFloat16, false, &out, 1);
  EXPECT_NE(s.message().find("at least 2 dimensions"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace detcoll::kernels::ops
