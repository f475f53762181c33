// Edges of the op families' kernels that once gave a wrong result, undefined behaviour or a crash:
// histc with more bins than float counts exactly, crops of an image taller than float counts,
// grid points that are NaN, infinite or huge, null buffers, sizes whose products overflow, and
// scale factors too small for a finite source position. Each runs the CPU reference and the
// serial run of the device formulation, which must agree (the sanitizer build runs them too).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "kernels/ops/crop.h"
#include "kernels/ops/ctc.h"
#include "kernels/ops/grid_sample.h"
#include "kernels/ops/writes.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

TEST(OpEdges, HistcKeepsTheMaximumWhenBinsPassFloatsIntegers) {
  // bins - 1 = 2^24 + 3 rounds up to bins in float: the maximum must still land in the last bin.
  const int64_t bins = (int64_t{1} << 24) + 4;
  const std::vector<float> x{0.0f, 1.0f, 0.5f};
  std::vector<float> reference(bins, -1.0f), serial(bins, -2.0f);
  ASSERT_TRUE(histc(reference.data(), DataType::kFloat32, x.data(), 3, bins, 0, 1).isOk());
  ASSERT_TRUE(
      testing::serial::histc(serial.data(), DataType::kFloat32, x.data(), 3, bins, 0, 1).isOk());
  EXPECT_EQ(reference[0], 1.0f);
  EXPECT_EQ(reference[bins - 1], 1.0f);
  double total = 0;
  for (float c : reference) total += c;
  EXPECT_EQ(total, 3.0);
  EXPECT_EQ(serial, reference);
}

TEST(OpEdges, HistcNearDoublesMaximumBinsWhereTheValuesAre) {
  // (v - lo) · bins overflows double here: the values and the range are scaled by 2^-64 first,
  // exactly, so each value still lands in its own bin (mid-bin values: 1, 3, 5, 7, 9), not all
  // in the last.
  const double top = std::numeric_limits<double>::max() / 2;
  const std::vector<double> x{0.15 * top, 0.35 * top, 0.55 * top, 0.75 * top, 0.95 * top};
  std::vector<double> reference(10, -1.0), serial(10, -2.0);
  ASSERT_TRUE(histc(reference.data(), DataType::kFloat64, x.data(), 5, 10, 0, top).isOk());
  ASSERT_TRUE(
      testing::serial::histc(serial.data(), DataType::kFloat64, x.data(), 5, 10, 0, top).isOk());
  EXPECT_EQ(reference, (std::vector<double>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(serial, reference);
  // A range as wide as double's: hi - lo itself overflows.
  const double max = std::numeric_limits<double>::max();
  const std::vector<double> wide{-0.75 * max, -0.25 * max, 0.25 * max, 0.75 * max, max};
  std::vector<double> quarters(4, -1.0), serialQuarters(4, -2.0);
  ASSERT_TRUE(histc(quarters.data(), DataType::kFloat64, wide.data(), 5, 4, -max, max).isOk());
  ASSERT_TRUE(testing::serial::histc(serialQuarters.data(), DataType::kFloat64, wide.data(), 5, 4,
                                     -max, max)
                  .isOk());
  EXPECT_EQ(quarters, (std::vector<double>{1, 1, 1, 2}));
  EXPECT_EQ(serialQuarters, quarters);
}

TEST(OpEdges, ACropOfTheLastRowOfAVeryTallImageReadsIt) {
  // height - 1 = 2^24 + 3 rounds up in float, and so does the point y = 1: inside by TensorFlow's
  // test in float, it reads the last row, clamped, not the row past it.
  Crop c;
  c.batch = 1;
  c.height = (int64_t{1} << 24) + 4;
  c.width = 1;
  c.channels = 1;
  c.boxes = 1;
  std::vector<float> image(c.height, 3.0f);
  const std::vector<float> boxes{1.0f, 0.0f, 1.0f, 0.0f};
  const std::vector<int64_t> index{0};
  float out = 0, serialOut = 0;
  ASSERT_TRUE(
      cropAndResize(&out, image.data(), boxes.data(), index.data(), DataType::kFloat32, c, 1)
          .isOk());
  ASSERT_TRUE(testing::serial::cropAndResize(&serialOut, image.data(), boxes.data(), index.data(),
                                             DataType::kFloat32, c)
                  .isOk());
  EXPECT_EQ(out, 3.0f);
  EXPECT_EQ(serialOut, 3.0f);
  std::vector<float> gradImage(c.height, -1.0f), serialGrad(c.height, -2.0f);
  const float up = 1.0f;
  ASSERT_TRUE(cropAndResizeBackward(gradImage.data(), nullptr, &up, image.data(), boxes.data(),
                                    index.data(), DataType::kFloat32, c, 1)
                  .isOk());
  ASSERT_TRUE(testing::serial::cropAndResizeBackward(serialGrad.data(), nullptr, &up, image.data(),
                                                     boxes.data(), index.data(), DataType::kFloat32,
                                                     c)
                  .isOk());
  double total = 0;
  for (float v : gradImage) total += v;
  EXPECT_EQ(total, 1.0);
  EXPECT_EQ(serialGrad, gradImage);
  // Null buffers are refused, not read.
  EXPECT_EQ(
      cropAndResize(&out, nullptr, boxes.data(), index.data(), DataType::kFloat32, c, 1).message(),
      "crop_and_resize: image, boxes, box_indices or the crops is null");
  EXPECT_EQ(
      testing::serial::cropAndResizeBackward(gradImage.data(), nullptr, nullptr, image.data(),
                                             boxes.data(), index.data(), DataType::kFloat32, c)
          .message(),
      "crop_and_resize: image, boxes, box_indices or the crops is null");
}

TEST(OpEdges, GridPointsThatAreNotFiniteOrHugeHaveOneAnswer) {
  // NaN clips to 0 (border, reflection), as torch's forward clips it; infinite and huge points
  // reflect without an integer overflow; the reference and the serial run agree on all of them.
  const std::vector<double> input{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = HUGE_VAL;
  const std::vector<double> points{nan, 0.0, 1e20, -0.3, inf, 0.5, -inf, nan, 5e19, 1e300};
  const std::vector<double> up(5, 1.0);
  for (int mode : {0, 1}) {
    for (int padding : {1, 2}) {
      GridSample s;
      s.batch = 1;
      s.channels = 1;
      s.sizes[0] = 3;
      s.sizes[1] = 4;
      s.positions = 5;
      s.mode = static_cast<GridMode>(mode);
      s.padding = static_cast<GridPadding>(padding);
      std::vector<double> gi(12, -1), gg(10, -1), sgi(12, -2), sgg(10, -2);
      ASSERT_TRUE(gridSamplerBackward(gi.data(), gg.data(), up.data(), input.data(), points.data(),
                                      DataType::kFloat64, s, 1)
                      .isOk());
      ASSERT_TRUE(testing::serial::gridSamplerBackward(sgi.data(), sgg.data(), up.data(),
                                                       input.data(), points.data(),
                                                       DataType::kFloat64, s)
                      .isOk());
      const std::string what =
          "mode " + std::to_string(mode) + " padding " + std::to_string(padding);
      for (size_t i = 0; i < gi.size(); ++i) EXPECT_EQ(gi[i], sgi[i]) << what << " input " << i;
      double total = 0;
      for (double v : gi) total += v;
      EXPECT_EQ(total, 5.0) << what;  // every point lands inside: all the gradient is kept
    }
  }
  // Nearest with border padding: the point (NaN, 0) reads row 1, column 0, as torch's forward.
  GridSample one;
  one.batch = one.channels = one.positions = 1;
  one.sizes[0] = 3;
  one.sizes[1] = 4;
  one.mode = GridMode::kNearest;
  one.padding = GridPadding::kBorder;
  std::vector<double> gi(12, -1), expected(12, 0.0);
  expected[1 * 4 + 0] = 1.0;
  ASSERT_TRUE(gridSamplerBackward(gi.data(), nullptr, up.data(), input.data(), points.data(),
                                  DataType::kFloat64, one, 1)
                  .isOk());
  EXPECT_EQ(gi, expected);
}

TEST(OpEdges, NullTargetsOverflowingSizesAndTinyScalesAreRefused) {
  Ctc c;
  c.steps = 0;
  c.batch = 1;
  c.classes = 3;
  c.targetStride = 2;
  c.alphaWidth = 5;
  const std::vector<int64_t> inputs{0}, lengths{2};
  float f = 0;
  EXPECT_EQ(ctcLossBackward(&f, &f, &f, nullptr, inputs.data(), lengths.data(), &f, &f,
                            DataType::kFloat32, c, 1)
                .message(),
            "ctc_loss_backward: a buffer is null");
  int64_t i = 0;
  const int64_t huge = (int64_t{1} << 62) + 1;
  EXPECT_EQ(maxUnpool(&f, &f, &i, DataType::kFloat32, huge, 0, 4).message(),
            "max_unpool: sizes [" + std::to_string(huge) + ", 4] overflow 64-bit offsets");
  EXPECT_EQ(detcoll_median(&f, &i, &f, DETCOLL_FLOAT32, int64_t{1} << 32, 3, int64_t{1} << 32),
            DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(detcoll_last_error()),
            "median: sizes [4294967296, 3, 4294967296] overflow 64-bit offsets");
  const int64_t in[1] = {4}, out[1] = {9};
  const double tiny[1] = {1e-300};
  std::vector<float> g(9, 1.0f), r(4);
  EXPECT_EQ(
      detcoll_upsample_nearest_backward(r.data(), g.data(), DETCOLL_FLOAT32, 1, in, out, 1, tiny),
      DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(detcoll_last_error()).find("gives no finite source position"),
            std::string::npos);
  EXPECT_EQ(detcoll_upsample_bicubic2d_backward(r.data(), g.data(), DETCOLL_FLOAT32, 1, 2, 2, 3, 3,
                                                0, 1e-300, 0),
            DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      detcoll_upsample_linear_backward(r.data(), g.data(), DETCOLL_FLOAT32, 1, in, out, 1, 0, tiny),
      DETCOLL_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace detcoll::kernels::ops
