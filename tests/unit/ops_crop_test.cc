// kernels/ops/crop.h: crop_and_resize and its gradients. Values are checked against a loop and
// finite differences in tests/python/test_torch_tf_ops.py; here, the image's gradient in float64
// against a loop written here (every (box, position, corner) in order), the serial run of the
// device formulation (bodies/crop.h) against the CPU reference bit for bit for every dtype and
// both methods, with boxes partly outside the image, and the words for a box index outside the
// batch.

#include "kernels/ops/crop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

using Bytes = std::vector<uint8_t>;

Crop shape(bool nearest) {
  Crop c;
  c.batch = 2;
  c.height = 6;
  c.width = 7;
  c.channels = 3;
  c.boxes = 5;
  c.cropHeight = 4;
  c.cropWidth = 3;
  c.nearest = nearest;
  c.extrapolation = -0.5;
  return c;
}

// Boxes over and past the image, one a single row (y1 == y2).
std::vector<double> boxList() {
  return {0.1, 0.2,  0.8,  0.9, -0.3, 0.0, 0.6, 1.2, 0.5, 0.5,
          0.5, 0.95, 0.25, 0.7, 0.9,  0.1, 0.0, 0.0, 1.0, 1.0};
}

TEST(CropAndResize, TheImageGradientIsTheLoopInFloat64) {
  const Crop c = shape(false);
  const std::vector<double> boxes = boxList();
  const std::vector<int64_t> index{1, 0, 1, 1, 0};
  const Bytes gradBytes = testing::opValues(DataType::kFloat64, 5 * 12 * 3, 181);
  std::vector<double> grads(5 * 12 * 3), expected(2 * 6 * 7 * 3, 0.0);
  std::memcpy(grads.data(), gradBytes.data(), gradBytes.size());
  for (int64_t b = 0; b < 5; ++b) {
    for (int64_t p = 0; p < 12; ++p) {
      const CropPoint<double> q = cropPoint<double, double>(c, boxes.data(), index.data(), b, p);
      for (int k = 0; k < 4; ++k) {
        if (q.pixel[k] < 0) continue;
        for (int64_t ch = 0; ch < 3; ++ch) {
          expected[q.pixel[k] * 3 + ch] += q.weight[k] * grads[(b * 12 + p) * 3 + ch];
        }
      }
    }
  }
  std::vector<double> image(2 * 6 * 7 * 3, 1.0), gradImage(expected.size(), -9.0);
  ASSERT_TRUE(cropAndResizeBackward(gradImage.data(), nullptr, grads.data(), image.data(),
                                    boxes.data(), index.data(), DataType::kFloat64, c, 2)
                  .isOk());
  EXPECT_EQ(gradImage, expected);
}

TEST(CropAndResize, TheSerialRunHasTheReferenceBits) {
  const std::vector<int64_t> index{1, 0, 1, 1, 0};
  for (bool nearest : {false, true}) {
    const Crop c = shape(nearest);
    for (DataType t : testing::kFloatTypes) {
      const Bytes image = testing::opValues(t, 2 * 6 * 7 * 3, 182);
      const Bytes boxes = testing::fromDoubles(boxList(), t);
      const Bytes grads = testing::opValues(t, 5 * 12 * 3, 183);
      const size_t e = dataTypeSize(t);
      Bytes out(5 * 12 * 3 * e, 0xab), outSerial(out.size(), 0xcd);
      Bytes gi(image.size(), 0xab), giSerial(image.size(), 0xcd);
      Bytes gb(5 * 4 * e, 0xab), gbSerial(gb.size(), 0xcd);
      ASSERT_TRUE(
          cropAndResize(out.data(), image.data(), boxes.data(), index.data(), t, c, 2).isOk());
      ASSERT_TRUE(testing::serial::cropAndResize(outSerial.data(), image.data(), boxes.data(),
                                                 index.data(), t, c)
                      .isOk());
      ASSERT_TRUE(cropAndResizeBackward(gi.data(), gb.data(), grads.data(), image.data(),
                                        boxes.data(), index.data(), t, c, 2)
                      .isOk());
      ASSERT_TRUE(testing::serial::cropAndResizeBackward(giSerial.data(), gbSerial.data(),
                                                         grads.data(), image.data(), boxes.data(),
                                                         index.data(), t, c)
                      .isOk());
      const std::string what = dataTypeName(t) + (nearest ? " nearest" : " bilinear");
      EXPECT_EQ(testing::bitsDiffer(outSerial, out, t, "serial", "reference"), "") << what;
      EXPECT_EQ(testing::bitsDiffer(giSerial, gi, t, "serial", "reference"), "") << what;
      EXPECT_EQ(testing::bitsDiffer(gbSerial, gb, t, "serial", "reference"), "") << what;
      // Box 1 runs past the image: its positions there give the extrapolation value.
      EXPECT_EQ(testing::elementAsDouble(out.data(), (1 * 12 + 0) * 3, t), -0.5) << what;
    }
  }
}

TEST(CropAndResize, ABoxIndexOutsideTheBatchIsNamed) {
  const Crop c = shape(false);
  const std::vector<int64_t> index{1, 0, 2, 1, 0};
  const std::vector<float> image(2 * 6 * 7 * 3), boxes(20, 0.5f);
  std::vector<float> a(5 * 12 * 3), b(a.size());
  const std::string words = "crop_and_resize: box_indices[2] = 2 is outside the batch of 2 images";
  EXPECT_EQ(testing::serial::cropAndResize(a.data(), image.data(), boxes.data(), index.data(),
                                           DataType::kFloat32, c)
                .message(),
            words);
  EXPECT_EQ(
      cropAndResize(b.data(), image.data(), boxes.data(), index.data(), DataType::kFloat32, c, 1)
          .message(),
      words);
}

}  // namespace
}  // namespace detcoll::kernels::ops
