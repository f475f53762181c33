// kernels/ops/losses.h: nll_loss with fixed sums. Its values are checked against torch's
// per-sample losses in tests/python/test_torch_nll_loss.py; here, against a loop for few samples
// (one chunk of the fixed tree: a sum in order), the serial run of the device formulation
// (bodies/losses.h) against the CPU reference for every dtype and reduction over many samples,
// and the same words, with the output untouched, for a target outside the classes.

#include "kernels/ops/losses.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

using Bytes = std::vector<uint8_t>;

TEST(NllLoss, FewSamplesSumInOrder) {
  NllLoss l;
  l.outer = 4;
  l.classes = 3;
  l.inner = 5;
  l.ignoreIndex = 1;
  const Bytes x = testing::opValues(DataType::kFloat64, 60, 141);
  const std::vector<double> weight{0.75, 2.5, -1.25};
  const std::vector<int64_t> target = testing::opIndices(20, 0, 3, 142);
  std::vector<double> input(60);
  std::memcpy(input.data(), x.data(), x.size());
  double sum = 0, total = 0;
  std::vector<double> each(20);
  for (int64_t k = 0; k < 20; ++k) {
    const int64_t t = target[k], n = k / 5, i = k % 5;
    each[k] = t == 1 ? 0.0 : -input[(n * 3 + t) * 5 + i] * weight[t];
    sum += each[k];
    total += t == 1 ? 0.0 : weight[t];
  }
  for (int reduction : {0, 1, 2}) {
    l.reduction = reduction;
    std::vector<double> out(reduction == 0 ? 20 : 1, -7.0);
    double totalWeight = -7.0;
    ASSERT_TRUE(nllLoss(out.data(), &totalWeight, input.data(), target.data(), weight.data(),
                        DataType::kFloat64, l, 1)
                    .isOk());
    EXPECT_EQ(totalWeight, total);
    if (reduction == 0) EXPECT_EQ(out, each);
    if (reduction == 1) EXPECT_EQ(out[0], sum / total);
    if (reduction == 2) EXPECT_EQ(out[0], sum);
  }
}

TEST(NllLoss, TheSerialRunHasTheReferenceBits) {
  NllLoss l;
  l.outer = 37;
  l.classes = 11;
  l.inner = 29;  // 1073 samples: many chunks of the tree
  l.ignoreIndex = 4;
  const std::vector<int64_t> target = testing::opIndices(37 * 29, 0, 11, 143);
  for (DataType t : testing::kFloatTypes) {
    const Bytes input = testing::opValues(t, 37 * 11 * 29, 144),
                weight = testing::opValues(t, 11, 145);
    for (int reduction : {0, 1, 2}) {
      for (bool weighted : {false, true}) {
        l.reduction = reduction;
        const size_t outputs = reduction == 0 ? 37 * 29 : 1;
        Bytes ref(outputs * dataTypeSize(t), 0xab), serial(ref.size(), 0xcd);
        Bytes refTotal(dataTypeSize(t), 0xab), serialTotal(dataTypeSize(t), 0xcd);
        const void* w = weighted ? weight.data() : nullptr;
        ASSERT_TRUE(
            nllLoss(ref.data(), refTotal.data(), input.data(), target.data(), w, t, l, 3).isOk());
        ASSERT_TRUE(testing::serial::nllLoss(serial.data(), serialTotal.data(), input.data(),
                                             target.data(), w, t, l)
                        .isOk());
        const std::string what = dataTypeName(t) + " reduction " + std::to_string(reduction) +
                                 " weighted " + std::to_string(weighted);
        EXPECT_EQ(testing::bitsDiffer(serial, ref, t, "serial", "reference"), "") << what;
        EXPECT_EQ(testing::bitsDiffer(serialTotal, refTotal, t, "serial", "reference"), "") << what;
      }
    }
  }
}

TEST(NllLoss, ATargetOutsideTheClassesIsNamedWithTheOutputUntouched) {
  NllLoss l;
  l.outer = 2;
  l.classes = 3;
  l.inner = 2;
  l.reduction = 0;
  const std::vector<int64_t> target{0, -100, 3, 2};
  const std::vector<float> input(12, 0.5f);
  std::vector<float> a(4, 9.0f), b(4, 9.0f);
  const Status serial = testing::serial::nllLoss(a.data(), nullptr, input.data(), target.data(),
                                                 nullptr, DataType::kFloat32, l);
  const Status reference =
      nllLoss(b.data(), nullptr, input.data(), target.data(), nullptr, DataType::kFloat32, l, 1);
  const std::string words =
      "nll_loss: target[2] = 3 is out of range for 3 classes (ignore_index -100)";
  EXPECT_EQ(reference.message(), words);
  EXPECT_EQ(serial.message(), words);
  EXPECT_EQ(a, std::vector<float>(4, 9.0f));
  EXPECT_EQ(b, std::vector<float>(4, 9.0f));
  l.reduction = 3;
  EXPECT_EQ(
      nllLoss(b.data(), b.data(), input.data(), target.data(), nullptr, DataType::kFloat32, l, 1)
          .message(),
      "nll_loss: reduction 3; 0 (none), 1 (mean) or 2 (sum)");
}

}  // namespace
}  // namespace detcoll::kernels::ops
