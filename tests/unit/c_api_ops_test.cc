// The C entries of the deterministic ops added for torch's patched families (detcoll_ops.h): each
// refuses an unknown dtype naming itself, and a call on host memory gives the kernel's result
// (the kernels' own tests check the values).

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "kernels/ops/writes.h"

namespace {

const auto kBad = static_cast<detcoll_dtype_t>(99);

void expectRefused(detcoll_status_t status, const std::string& op) {
  EXPECT_EQ(status, DETCOLL_ERR_INVALID_ARGUMENT) << op;
  const std::string message = detcoll_last_error();
  EXPECT_EQ(message.rfind(op + ": unknown dtype 99", 0), 0u) << message;
}

TEST(CApiOps, EveryNewEntryRefusesAnUnknownDtypeByName) {
  float f[64] = {};
  int64_t i[64] = {};
  const int64_t sizes[3] = {2, 2, 2};
  expectRefused(detcoll_upsample_bicubic2d_backward(f, f, kBad, 1, 2, 2, 3, 3, 0, 0, 0),
                "upsample_bicubic2d_backward");
  expectRefused(detcoll_write_last(f, 2, 1, kBad, i, 1, f), "write_last");
  expectRefused(detcoll_max_unpool(f, f, i, kBad, 1, 1, 2), "max_unpool");
  expectRefused(detcoll_embedding_bag_max_backward(f, 2, kBad, f, 1, 1, i, i, -1),
                "embedding_bag_max_backward");
  expectRefused(detcoll_sparse_dense_matmul(f, 1, kBad, i, i, f, 1, f, 1, 1),
                "sparse_dense_matmul");
  expectRefused(detcoll_histc(f, 4, 0, 1, f, 4, kBad), "histc");
  expectRefused(detcoll_grid_sampler_backward(f, f, f, f, f, kBad, 1, 1, sizes, 2, 1, 0, 0, 0),
                "grid_sampler_backward");
  expectRefused(detcoll_ctc_loss_backward(f, f, f, i, 1, i, i, f, f, 3, kBad, 1, 1, 2, 0, 0),
                "ctc_loss_backward");
  expectRefused(detcoll_nll_loss(f, f, f, i, nullptr, kBad, 1, 2, 1, -100, 1), "nll_loss");
  expectRefused(detcoll_kthvalue(f, i, f, kBad, 1, 4, 1, 1), "kthvalue");
  expectRefused(detcoll_median(f, i, f, kBad, 1, 4, 1), "median");
  expectRefused(detcoll_crop_and_resize(f, f, f, i, kBad, 1, 2, 2, 1, 1, 1, 1, 0, 0),
                "crop_and_resize");
  expectRefused(detcoll_crop_and_resize_backward(f, f, f, f, f, i, kBad, 1, 2, 2, 1, 1, 1, 1, 0),
                "crop_and_resize_backward");
}

TEST(CApiOps, SpatialArraysAreCheckedAfterTheDtypeAndBeforeTheyAreRead) {
  float f[4] = {};
  const int64_t sizes[4] = {2, 2, 2, 2};
  EXPECT_EQ(detcoll_pad_backward(f, f, DETCOLL_FLOAT32, 1, sizes, 4, sizes, 1),
            DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(detcoll_last_error()),
            "reflection_pad_backward: 1 to 3 spatial dimensions, with their sizes and padding");
  EXPECT_EQ(detcoll_adaptive_avg_pool_backward(f, f, DETCOLL_FLOAT32, 1, sizes, nullptr, 2),
            DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(detcoll_last_error()),
            "adaptive_avg_pool_backward: 2 or 3 spatial dimensions, with their sizes");
  expectRefused(detcoll_adaptive_avg_pool_backward(f, f, kBad, 1, sizes, nullptr, 2),
                "adaptive_avg_pool_backward");
  EXPECT_EQ(
      detcoll_grid_sampler_backward(f, f, f, f, f, DETCOLL_FLOAT32, 1, 1, nullptr, 2, 1, 0, 0, 0),
      DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(detcoll_last_error()),
            "grid_sampler_backward: 2 or 3 spatial dimensions, with sizes");
}

TEST(CApiOps, HostCallsGiveTheKernelsResults) {
  // histc through C and through the kernel.
  const std::vector<float> x{0.5f, 1.5f, 2.5f, 2.75f, NAN, -1.0f, 3.0f};
  std::vector<float> viaC(3, -1), viaKernel(3, -2);
  ASSERT_EQ(detcoll_histc(viaC.data(), 3, 0, 3, x.data(), 7, DETCOLL_FLOAT32), DETCOLL_SUCCESS)
      << detcoll_last_error();
  ASSERT_TRUE(detcoll::kernels::ops::histc(viaKernel.data(), detcoll::DataType::kFloat32, x.data(),
                                           7, 3, 0, 3)
                  .isOk());
  EXPECT_EQ(viaC, viaKernel);
  EXPECT_EQ(viaC, (std::vector<float>{1, 1, 3}));
  // kthvalue and median: ties by position, NaN last; median NaN at the first NaN.
  const std::vector<double> v{2.0, -0.0, 0.0, NAN, 2.0};
  double value = 0;
  int64_t index = -1;
  ASSERT_EQ(detcoll_kthvalue(&value, &index, v.data(), DETCOLL_FLOAT64, 1, 5, 1, 2),
            DETCOLL_SUCCESS);
  EXPECT_EQ(index, 2);  // -0 and +0 tie: the later one is second
  ASSERT_EQ(detcoll_kthvalue(&value, &index, v.data(), DETCOLL_FLOAT64, 1, 5, 1, 4),
            DETCOLL_SUCCESS);
  EXPECT_EQ(index, 4);
  ASSERT_EQ(detcoll_median(&value, &index, v.data(), DETCOLL_FLOAT64, 1, 5, 1), DETCOLL_SUCCESS);
  EXPECT_TRUE(std::isnan(value));
  EXPECT_EQ(index, 3);
  EXPECT_EQ(detcoll_median(&value, &index, v.data(), DETCOLL_FLOAT64, 1, 0, 1),
            DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(detcoll_last_error()), "median: a dimension of 0 elements has no median");
}

}  // namespace
