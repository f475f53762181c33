// kernels/ops/ctc.h: ctc_loss's backward. Its values are checked against torch's and a float64
// loop in tests/python/test_torch_ctc.py; here, the serial run of the device formulation
// (bodies/ctc.h) against the CPU reference, bit for bit, in every dtype with repeated labels,
// empty targets and short inputs; a one-step input whose gradient is softmax minus the one-hot
// blank; and the same words for the same bad arguments.

#include "kernels/ops/ctc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/support/op_data.h"
#include "tests/support/serial_ops.h"

namespace detcoll::kernels::ops {
namespace {

using Bytes = std::vector<uint8_t>;

TEST(CtcLossBackward, TheSerialRunHasTheReferenceBits) {
  Ctc c;
  c.steps = 9;
  c.batch = 4;
  c.classes = 5;
  c.blank = 0;
  c.targetStride = 4;
  c.alphaWidth = 9;
  const std::vector<int64_t> inputs{9, 7, 0, 5}, lengths{4, 2, 0, 3};
  // Repeated labels (1, 1) force the path through a blank; padding past a length is garbage.
  const std::vector<int64_t> targets{1, 1, 3, 2, 4, 2, -7, 99, 42, 42, 42, 42, 3, 3, 3, 8};
  std::mt19937_64 g(131);
  std::normal_distribution<double> normal(-1.7, 0.9);
  for (bool zeroInfinity : {false, true}) {
    for (DataType t : testing::kFloatTypes) {
      std::vector<double> lp(c.steps * c.batch * c.classes), alpha(c.batch * c.steps * 9);
      for (double& v : lp) v = normal(g);
      for (double& v : alpha) v = normal(g) * 3;
      alpha[5] = -HUGE_VAL;  // an impossible prefix
      std::vector<double> nll{4.5, HUGE_VAL, 0.0, 7.25}, up{0.5, 1.5, -2.0, 1.0};
      const Bytes lpBytes = testing::fromDoubles(lp, t),
                  alphaBytes = testing::fromDoubles(alpha, t),
                  nllBytes = testing::fromDoubles(nll, t), upBytes = testing::fromDoubles(up, t);
      Ctc cz = c;
      cz.zeroInfinity = zeroInfinity;
      Bytes reference(lpBytes.size(), 0xab), serial(lpBytes.size(), 0xcd), one(lpBytes.size());
      ASSERT_TRUE(ctcLossBackward(reference.data(), upBytes.data(), lpBytes.data(), targets.data(),
                                  inputs.data(), lengths.data(), nllBytes.data(), alphaBytes.data(),
                                  t, cz, 3)
                      .isOk());
      ASSERT_TRUE(ctcLossBackward(one.data(), upBytes.data(), lpBytes.data(), targets.data(),
                                  inputs.data(), lengths.data(), nllBytes.data(), alphaBytes.data(),
                                  t, cz, 1)
                      .isOk());
      ASSERT_TRUE(testing::serial::ctcLossBackward(serial.data(), upBytes.data(), lpBytes.data(),
                                                   targets.data(), inputs.data(), lengths.data(),
                                                   nllBytes.data(), alphaBytes.data(), t, cz)
                      .isOk());
      EXPECT_EQ(testing::bitsDiffer(serial, reference, t, "serial", "reference"), "")
          << dataTypeName(t) << " zero_infinity " << zeroInfinity;
      EXPECT_EQ(one, reference);
      // Past an input's length, and for element 1 (infinite loss) with zero_infinity, 0.
      const std::vector<double> grads = [&] {
        std::vector<double> v(lp.size());
        for (size_t i = 0; i < v.size(); ++i)
          v[i] = testing::elementAsDouble(reference.data(), i, t);
        return v;
      }();
      for (int64_t step = 0; step < c.steps; ++step) {
        for (int64_t k = 0; k < c.classes; ++k) {
          EXPECT_EQ(grads[(step * c.batch + 2) * c.classes + k], 0.0);
          if (step >= 7) EXPECT_EQ(grads[(step * c.batch + 1) * c.classes + k], 0.0);
          if (zeroInfinity) EXPECT_EQ(grads[(step * c.batch + 1) * c.classes + k], 0.0);
        }
      }
    }
  }
}

TEST(CtcLossBackward, OneStepAndAnEmptyTargetGiveSoftmaxMinusTheBlank) {
  Ctc c;
  c.steps = 1;
  c.batch = 1;
  c.classes = 3;
  c.blank = 2;
  c.targetStride = 0;
  c.alphaWidth = 1;
  const std::vector<double> lp{-1.25, -0.5, -2.0};
  const std::vector<double> alpha{lp[2]}, nll{-lp[2]}, up{1.0};
  const std::vector<int64_t> inputs{1}, lengths{0};
  std::vector<double> grad(3, 7.0);
  ASSERT_TRUE(ctcLossBackward(grad.data(), up.data(), lp.data(), nullptr, inputs.data(),
                              lengths.data(), nll.data(), alpha.data(), DataType::kFloat64, c, 1)
                  .isOk());
  EXPECT_EQ(grad[0], std::exp(lp[0]));
  EXPECT_EQ(grad[1], std::exp(lp[1]));
  EXPECT_EQ(grad[2], std::exp(lp[2]) - 1.0);
}

TEST(CtcLossBackward, BadArgumentsAreRefusedInTheSameWords) {
  Ctc c;
  c.steps = 2;
  c.batch = 2;
  c.classes = 3;
  c.targetStride = 2;
  c.alphaWidth = 5;
  std::vector<float> a(64), b(64);
  auto both = [&](Ctc k, const std::vector<int64_t>& targets, const std::vector<int64_t>& inputs,
                  const std::vector<int64_t>& lengths, const std::string& words) {
    const Status serial = testing::serial::ctcLossBackward(
        a.data(), a.data(), a.data(), targets.data(), inputs.data(), lengths.data(), a.data(),
        a.data(), DataType::kFloat32, k);
    const Status reference =
        ctcLossBackward(b.data(), b.data(), b.data(), targets.data(), inputs.data(), lengths.data(),
                        b.data(), b.data(), DataType::kFloat32, k, 1);
    EXPECT_EQ(reference.message(), words);
    EXPECT_EQ(serial.message(), words);
  };
  both(c, {1, 2, 1, 3}, {2, 2}, {2, 2},
       "ctc_loss_backward: targets[1][1] = 3 is not one of 3 classes");
  both(c, {1, 2, 1, 3}, {2, 2}, {2, 1}, "");  // past its length, 3 is not read
  both(c, {1, 2, 1, 1}, {2, 3}, {2, 1},
       "ctc_loss_backward: batch element 1: input length 3 must lie in [0, 2] and target length 1 "
       "in [0, 2]");
  Ctc narrow = c;
  narrow.alphaWidth = 4;
  both(narrow, {1, 2, 1, 1}, {2, 2}, {2, 1},
       "ctc_loss_backward: log_alpha holds 4 positions per step; the targets need 5");
  Ctc blank = c;
  blank.blank = 3;
  both(blank, {1, 2, 1, 1}, {2, 2}, {2, 1}, "ctc_loss_backward: blank 3 is not one of 3 classes");
}

}  // namespace
}  // namespace detcoll::kernels::ops
