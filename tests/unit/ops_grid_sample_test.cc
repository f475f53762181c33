// kernels/ops/grid_sample.h: grid_sample's backward. Its values are checked against torch's in
// tests/python/test_torch_grid_sample.py; here, the serial run of the device formulation
// (bodies/grid_sample.h) against the CPU reference, bit for bit, for every dtype, mode, padding
// and corner alignment in 2-D and 3-D, with points inside and outside the input and many reading
// the same positions; the thread count; a point that reads one pixel exactly; and the same words
// for the same bad arguments.

#include "kernels/ops/grid_sample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

using Bytes = std::vector<uint8_t>;

// Grid values uniform in [-1.6, 1.6] (a fifth of them outside [-1, 1]), in the dtype.
Bytes gridValues(DataType t, int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.6f, 1.6f);
  std::vector<double> x(n);
  for (double& v : x) v = u(g);
  return testing::fromDoubles(x, t);
}

TEST(GridSampleBackward, TheSerialRunHasTheReferenceBitsEverywhere) {
  for (int spatial : {2, 3}) {
    for (int mode = 0; mode < 3; ++mode) {
      if (mode == 2 && spatial == 3) continue;
      for (int padding = 0; padding < 3; ++padding) {
        for (bool align : {false, true}) {
          GridSample s;
          s.spatial = spatial;
          s.batch = 2;
          s.channels = 3;
          s.sizes[0] = 4;
          s.sizes[1] = 5;
          s.sizes[2] = spatial == 3 ? 6 : 1;
          s.positions = spatial == 3 ? 60 : 28;
          s.mode = static_cast<GridMode>(mode);
          s.padding = static_cast<GridPadding>(padding);
          s.alignCorners = align;
          const std::string what = std::to_string(spatial) + "-D mode " + std::to_string(mode) +
                                   " padding " + std::to_string(padding) + " align " +
                                   std::to_string(align);
          for (DataType t : testing::kFloatTypes) {
            const size_t e = dataTypeSize(t);
            const Bytes input = testing::opValues(t, s.batch * s.channels * s.inner(), 111);
            const Bytes up = testing::opValues(t, s.batch * s.channels * s.positions, 112);
            const Bytes grid = gridValues(t, s.batch * s.positions * spatial, 113);
            Bytes refInput(s.batch * s.channels * s.inner() * e, 0xab), refGrid(grid.size(), 0xab);
            Bytes serInput(refInput.size(), 0xcd), serGrid(grid.size(), 0xcd);
            Bytes oneInput(refInput.size(), 0xef), oneGrid(grid.size(), 0xef);
            ASSERT_TRUE(gridSamplerBackward(refInput.data(), refGrid.data(), up.data(),
                                            input.data(), grid.data(), t, s, 3)
                            .isOk())
                << what;
            ASSERT_TRUE(gridSamplerBackward(oneInput.data(), oneGrid.data(), up.data(),
                                            input.data(), grid.data(), t, s, 1)
                            .isOk());
            ASSERT_TRUE(testing::serial::gridSamplerBackward(serInput.data(), serGrid.data(),
                                                             up.data(), input.data(), grid.data(),
                                                             t, s)
                            .isOk());
            EXPECT_EQ(testing::bitsDiffer(serInput, refInput, t, "serial", "reference"), "")
                << what << " input";
            EXPECT_EQ(testing::bitsDiffer(serGrid, refGrid, t, "serial", "reference"), "")
                << what << " grid";
            EXPECT_EQ(oneInput, refInput) << what;
            EXPECT_EQ(oneGrid, refGrid) << what;
          }
        }
      }
    }
  }
}

TEST(GridSampleBackward, APointOnAPixelReadsItAlone) {
  // align_corners: grid value -1 + 2 i / (n - 1) is pixel i exactly; bilinear puts the whole
  // gradient there, and the grid's gradient is the forward difference times (n - 1) / 2.
  GridSample s;
  s.batch = 1;
  s.channels = 1;
  s.sizes[0] = 3;
  s.sizes[1] = 5;
  s.positions = 1;
  s.alignCorners = true;
  const std::vector<double> input{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24};
  const std::vector<double> grid{-1 + 2.0 * 1 / 4, 0.0};  // x = pixel 1, y = row 1
  const std::vector<double> up{2.5};
  std::vector<double> gradInput(15, -1), gradGrid(2, -1);
  ASSERT_TRUE(gridSamplerBackward(gradInput.data(), gradGrid.data(), up.data(), input.data(),
                                  grid.data(), DataType::kFloat64, s, 1)
                  .isOk());
  std::vector<double> expected(15, 0.0);
  expected[1 * 5 + 1] = 2.5;
  EXPECT_EQ(gradInput, expected);
  EXPECT_EQ(gradGrid[0], 2.5 * (12 - 11) * 2.0);  // d/dx: the next column, (5 - 1) / 2
  EXPECT_EQ(gradGrid[1], 2.5 * (21 - 11) * 1.0);  // d/dy: the next row, (3 - 1) / 2
}

TEST(GridSampleBackward, ANonFiniteGridValueReadsNothing) {
  // Zeros padding, bilinear: x = NaN or ±inf puts every tap outside, so neither gradient gets
  // anything from that point, as in torch's CUDA kernels and its 3-D CPU kernel (they skip the
  // taps outside; torch's vectorized 2-D CPU kernel multiplies their zeros by NaN weights
  // instead). The serial run agrees, and the other point keeps its finite gradient.
  GridSample s;
  s.batch = 1;
  s.channels = 2;
  s.sizes[0] = 3;
  s.sizes[1] = 4;
  s.positions = 2;
  for (double bad : {std::nan(""), double{INFINITY}, -double{INFINITY}}) {
    const std::vector<double> input = {0.5,  1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21,
                                       0.25, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 22};
    const std::vector<double> grid{bad, 0.1, 0.3, -0.2};
    const std::vector<double> up{1.5, -2.0, 0.75, 3.0};
    std::vector<double> gradInput(24, -1), gradGrid(4, -1), serInput(24, -2), serGrid(4, -2);
    ASSERT_TRUE(gridSamplerBackward(gradInput.data(), gradGrid.data(), up.data(), input.data(),
                                    grid.data(), DataType::kFloat64, s, 1)
                    .isOk());
    ASSERT_TRUE(testing::serial::gridSamplerBackward(serInput.data(), serGrid.data(), up.data(),
                                                     input.data(), grid.data(), DataType::kFloat64,
                                                     s)
                    .isOk());
    EXPECT_EQ(gradGrid[0], 0.0) << bad;
    EXPECT_EQ(gradGrid[1], 0.0) << bad;
    EXPECT_TRUE(std::isfinite(gradGrid[2]) && std::isfinite(gradGrid[3]) && gradGrid[2] != 0.0)
        << bad;
    for (double g : gradInput) EXPECT_TRUE(std::isfinite(g)) << bad;
    EXPECT_EQ(0, std::memcmp(serGrid.data(), gradGrid.data(), 4 * sizeof(double))) << bad;
    EXPECT_EQ(serInput, gradInput) << bad;
  }
}

TEST(GridSampleBackward, BadArgumentsAreRefusedInTheSameWords) {
  GridSample s;
  s.batch = 1;
  s.channels = 1;
  s.sizes[0] = s.sizes[1] = 2;
  s.positions = 1;
  std::vector<float> a(8), b(8);
  auto both = [&](GridSample g, DataType t, const std::string& words) {
    const Status serial = testing::serial::gridSamplerBackward(a.data(), a.data(), a.data(),
                                                               a.data(), a.data(), t, g);
    const Status reference =
        gridSamplerBackward(b.data(), b.data(), b.data(), b.data(), b.data(), t, g, 1);
    EXPECT_EQ(reference.message(), words);
    EXPECT_EQ(serial.message(), words);
  };
  GridSample g = s;
  g.mode = static_cast<GridMode>(5);
  both(g, DataType::kFloat32,
       "grid_sampler_backward: interpolation_mode 5; 0 (bilinear), 1 (nearest) or 2 (bicubic, "
       "2-D)");
  g = s;
  g.padding = static_cast<GridPadding>(-1);
  both(g, DataType::kFloat32,
       "grid_sampler_backward: padding_mode -1; 0 (zeros), 1 (border) or 2 (reflection)");
  g = s;
  g.spatial = 3;
  g.mode = GridMode::kBicubic;
  both(g, DataType::kFloat32, "grid_sampler_backward: bicubic interpolation is 2-D only");
  g = s;
  g.spatial = 1;
  both(g, DataType::kFloat32, "grid_sampler_backward: 1 spatial dimensions; 2 or 3");
  both(s, DataType::kInt64, "grid_sampler_backward: dtype int64; floating point only");
  g = s;
  g.channels = -1;
  both(g, DataType::kFloat32, "grid_sampler_backward: negative size");
}

}  // namespace
}  // namespace detcoll::kernels::ops
