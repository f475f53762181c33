// The C entries of the ops against input that once gave a wrong result as success, a crash or a
// hang: a 0-d index_add reading past its source, an integer index_add given a fractional alpha,
// bincount's largest int64, null buffers with work to do, scale factors too small for a finite
// source position, pooling padding and strides whose loops ran for as many steps as their value,
// and sizes whose products overflow. Each must be refused naming the argument, with the outputs
// as they were, or give the value the definition gives.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings/c/detcoll.h"
#include "kernels/ops/for_each_index.h"

namespace {

void expectRefused(detcoll_status_t status, const std::string& words) {
  EXPECT_EQ(status, DETCOLL_ERR_INVALID_ARGUMENT) << words;
  const std::string message = detcoll_last_error();
  EXPECT_NE(message.find(words), std::string::npos) << message;
}

TEST(CApiOpsChecks, IndexAddOnZeroDimensionsTakesOneIndex) {
  float self = 0.5f;
  const float source[5] = {1, 100, 1000, 10000, 100000};
  const int64_t index[5] = {0, 0, 0, 0, 0};
  expectRefused(
      detcoll_index_add(&self, nullptr, 0, DETCOLL_FLOAT32, 0, index, 5, source, nullptr, 1.0),
      "index_add: source [] must be self [] with dimension 0 of the index's length 5");
  EXPECT_EQ(self, 0.5f);
  ASSERT_EQ(
      detcoll_index_add(&self, nullptr, 0, DETCOLL_FLOAT32, 0, index, 1, source, nullptr, 2.0),
      DETCOLL_SUCCESS);
  EXPECT_EQ(self, 2.5f);
}

TEST(CApiOpsChecks, AnIntegerTensorTakesAlphaAsTorchConvertsIt) {
  // Toward zero (2.9 adds 2 times the source, -0.5 nothing), and refused where it does not fit
  // the dtype or is not a number; the tensor is then as it was.
  const int64_t shape[2] = {3, 2}, sourceShape[2] = {2, 2}, index[2] = {0, 2};
  const int32_t source[4] = {3, 3, 3, 3};
  // torch compares alpha with the range before it truncates: 2147483647.5 does not fit.
  for (double alpha : {std::nan(""), 2147483648.0, 2147483647.5, -2147483648.5,
                       -std::numeric_limits<double>::infinity()}) {
    int32_t self[6] = {1, 2, 3, 4, 5, 6};
    expectRefused(
        detcoll_index_add(self, shape, 2, DETCOLL_INT32, 0, index, 2, source, sourceShape, alpha),
        " does not fit int32");
    EXPECT_EQ(std::vector<int32_t>(self, self + 6), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  }
  for (const auto& [alpha, expected] :
       std::vector<std::pair<double, std::vector<int32_t>>>{{2.9, {7, 8, 3, 4, 11, 12}},
                                                            {-0.5, {1, 2, 3, 4, 5, 6}},
                                                            {-2.0, {-5, -4, 3, 4, -1, 0}}}) {
    int32_t self[6] = {1, 2, 3, 4, 5, 6};
    ASSERT_EQ(
        detcoll_index_add(self, shape, 2, DETCOLL_INT32, 0, index, 2, source, sourceShape, alpha),
        DETCOLL_SUCCESS);
    EXPECT_EQ(std::vector<int32_t>(self, self + 6), expected) << alpha;
  }
  int64_t wide[1] = {5};
  const int64_t one[1] = {1}, zero[1] = {0}, big[1] = {1};
  ASSERT_EQ(
      detcoll_index_add(wide, one, 1, DETCOLL_INT64, 0, zero, 1, big, one, -9223372036854775808.0),
      DETCOLL_SUCCESS);  // INT64_MIN fits int64
  EXPECT_EQ(wide[0], std::numeric_limits<int64_t>::min() + 5);
}

TEST(CApiOpsChecks, BincountRefusesWhatHasNoBinAndLeavesItsOutputs) {
  const int64_t largest[2] = {3, std::numeric_limits<int64_t>::max()};
  int64_t length = -7;
  expectRefused(detcoll_bincount(nullptr, &length, DETCOLL_INT64, largest, 2, nullptr, 0),
                "bincount: input value 9223372036854775807 has no bin");
  EXPECT_EQ(length, -7);
  expectRefused(detcoll_bincount(nullptr, &length, DETCOLL_INT64, nullptr, 3, nullptr, 0),
                "bincount: input is null");
  expectRefused(detcoll_bincount(nullptr, nullptr, DETCOLL_INT64, largest, 1, nullptr, 0),
                "bincount: out_length is null");
  expectRefused(detcoll_bincount(nullptr, &length, DETCOLL_INT64, largest, -1, nullptr, 0),
                "bincount: count is -1");
  float out[4] = {9, 9, 9, 9};
  expectRefused(detcoll_bincount(out, &length, DETCOLL_FLOAT32, largest, 1, nullptr, 0),
                "bincount: counts are int64");
  EXPECT_EQ(length, -7);
  EXPECT_EQ(out[0], 9.0f);
}

TEST(CApiOpsChecks, NullBuffersWithWorkToDoAreRefusedByName) {
  const int64_t shape[2] = {2, 3}, indexShape[2] = {1, 3};
  float self[6] = {}, src[3] = {1, 2, 3};
  expectRefused(
      detcoll_scatter_add(self, shape, 2, DETCOLL_FLOAT32, 0, nullptr, indexShape, src, indexShape),
      "scatter_add: index is null");
  float grad[6] = {}, gradOut[4] = {1, 2, 3, 4};
  const int64_t indices[3] = {0, 1, 2};
  expectRefused(detcoll_embedding_bag_backward(grad, 3, DETCOLL_FLOAT32, gradOut, 2, 2, indices, 3,
                                               nullptr, 0, nullptr, -1),
                "embedding_bag_backward: offsets is null");
  const int axes[1] = {0};
  float sum[3] = {};
  expectRefused(detcoll_sum_over_axes(nullptr, shape, 2, DETCOLL_FLOAT32, axes, 1, sum),
                "sum: the input is null");
  expectRefused(detcoll_sum_over_axes(self, shape, 2, DETCOLL_FLOAT32, axes, 1, nullptr),
                "sum: the output is null");
  expectRefused(detcoll_bias_add_grad(nullptr, shape, 2, DETCOLL_FLOAT32, 0, sum),
                "bias_add_grad: sum: the input is null");
  // Nothing to read: a sum over an empty axis is zeros, whatever the input pointer.
  const int64_t empty[2] = {0, 3};
  float zeros[3] = {7, 7, 7};
  ASSERT_EQ(detcoll_sum_over_axes(nullptr, empty, 2, DETCOLL_FLOAT32, axes, 1, zeros),
            DETCOLL_SUCCESS);
  EXPECT_EQ(std::vector<float>(zeros, zeros + 3), std::vector<float>(3, 0.0f));
}

TEST(CApiOpsChecks, TinyScalesPutTheGradientOnTheLastInputAsTheLinearEntryDoes) {
  // A scale of 1e-30 makes every source position past the input: the last pixel takes it all
  // (no overflowing float-to-integer cast). A scale whose reciprocal is not finite, or NaN, has
  // no source position and is refused.
  std::vector<float> gradOutput(64, 1.0f);
  std::vector<float> bilinear(16, -1.0f), linear(16, -2.0f);
  ASSERT_EQ(detcoll_upsample_bilinear2d_backward(bilinear.data(), gradOutput.data(),
                                                 DETCOLL_FLOAT32, 1, 4, 4, 8, 8, 0, 1e-30, 1e-30),
            DETCOLL_SUCCESS);
  const int64_t in[2] = {4, 4}, out[2] = {8, 8};
  const double scales[2] = {1e-30, 1e-30};
  ASSERT_EQ(detcoll_upsample_linear_backward(linear.data(), gradOutput.data(), DETCOLL_FLOAT32, 1,
                                             in, out, 2, 0, scales),
            DETCOLL_SUCCESS);
  std::vector<float> expected(16, 0.0f);
  expected[15] = 64.0f;
  EXPECT_EQ(bilinear, expected);
  EXPECT_EQ(linear, expected);
  for (double scale : {1e-300, std::nan("")}) {
    expectRefused(
        detcoll_upsample_bilinear2d_backward(bilinear.data(), gradOutput.data(), DETCOLL_FLOAT32, 1,
                                             4, 4, 8, 8, 0, scale, 1.0),
        " gives no finite source position");
  }
  expectRefused(detcoll_upsample_bilinear2d_backward(bilinear.data(), gradOutput.data(),
                                                     DETCOLL_FLOAT32, 1, 4, 4, 8, 8, 0, 1e-300, 1),
                "upsample_bilinear2d_backward: scale factor 1e-300 gives no finite source");
}

TEST(CApiOpsChecks, AHugePaddingIsOneStepNotOneStepPerUnit) {
  // Kernel 2^32 + 1 rows padded by 2^31 (half the kernel, as torch allows): every window covers
  // the whole height, so each output is the largest of its two columns. The first tap inside
  // is found by arithmetic, not by 2^31 steps of the dilation.
  detcoll_pool2d_t pool{};
  pool.kernel[0] = (int64_t{1} << 32) + 1;
  pool.kernel[1] = 2;
  pool.stride[0] = pool.stride[1] = 1;
  pool.padding[0] = int64_t{1} << 31;
  pool.dilation[0] = pool.dilation[1] = 1;
  int64_t outH = 0, outW = 0;
  ASSERT_EQ(detcoll_max_pool2d_output_size(&pool, 4, 4, &outH, &outW), DETCOLL_SUCCESS);
  ASSERT_EQ(outH, 4);
  ASSERT_EQ(outW, 3);
  const std::vector<float> x = {0.5f, 3, -1, 2, 7, 0, 1, -4, -2, 5, 6, 0.25f, 1, 1, 2, 8};
  std::vector<float> out(12, 0.0f);
  std::vector<int64_t> indices(12, -1);
  ASSERT_EQ(
      detcoll_max_pool2d(out.data(), indices.data(), x.data(), DETCOLL_FLOAT32, 1, 4, 4, &pool),
      DETCOLL_SUCCESS);
  for (int64_t oh = 0; oh < 4; ++oh) {
    for (int64_t ow = 0; ow < 3; ++ow) {
      float best = -INFINITY;
      for (int64_t r = 0; r < 4; ++r) best = std::max({best, x[r * 4 + ow], x[r * 4 + ow + 1]});
      EXPECT_EQ(out[oh * 3 + ow], best) << oh << ", " << ow;
      EXPECT_EQ(x[indices[oh * 3 + ow]], best) << oh << ", " << ow;
    }
  }
  pool.kernel[0] = std::numeric_limits<int64_t>::max();
  pool.padding[0] = (int64_t{1} << 62) - 1;
  expectRefused(detcoll_max_pool2d_output_size(&pool, 4, 4, &outH, &outW),
                "overflow 64-bit offsets");
}

TEST(CApiOpsChecks, SizesWhoseProductsOverflowAreRefused) {
  const int64_t big[2] = {int64_t{1} << 32, int64_t{1} << 32}, one[2] = {1, 1};
  float f[16] = {};
  const int64_t index[1] = {0};
  expectRefused(detcoll_scatter_add(f, big, 2, DETCOLL_FLOAT32, 0, index, one, f, one),
                "scatter_add: sizes [4294967296, 4294967296] overflow 64-bit offsets");
  detcoll_pool2d_t pool{};
  pool.kernel[0] = pool.kernel[1] = 2;
  pool.stride[0] = pool.stride[1] = 2;
  pool.dilation[0] = pool.dilation[1] = 1;
  int64_t indices[16] = {};
  expectRefused(detcoll_max_pool2d(f, indices, f, DETCOLL_FLOAT32, int64_t{1} << 62, 4, 4, &pool),
                "max_pool2d: sizes [4611686018427387904, 4, 4] overflow 64-bit offsets");
  expectRefused(detcoll_max_pool_backward(f, f, indices, DETCOLL_FLOAT32, int64_t{1} << 62, 16, 4),
                "max_pool_backward: sizes [4611686018427387904, 16] overflow 64-bit offsets");
  const int64_t data[2] = {2, int64_t{1} << 62};
  expectRefused(detcoll_unsorted_segment_reduce(f, 4, DETCOLL_FLOAT32, f, data, 2, index, 1, 0),
                "unsorted_segment_sum: sizes [2, 4611686018427387904] overflow 64-bit offsets");
}

TEST(OnThreads, AWorkersExceptionReachesTheCallerAfterEveryThreadIsJoined) {
  std::vector<int> ran(4, 0);
  try {
    detcoll::kernels::ops::onThreads(4, [&](int t) {
      ran[t] = 1;
      if (t == 2) throw std::length_error("worker 2");
    });
    FAIL() << "no exception";
  } catch (const std::length_error& e) {
    EXPECT_STREQ(e.what(), "worker 2");
  }
  EXPECT_EQ(ran, std::vector<int>(4, 1));
}

}  // namespace
