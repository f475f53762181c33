// The cuDNN helper on a GPU: the deterministic algorithms it returns exist for a common problem
// in every direction, each forward algorithm gives the same bits twice and the direct
// convolution's values (computed here in double) within 1e-4, and max-pool backward in
// deterministic mode equals detcoll's gather bit for bit where windows do not overlap. Skips,
// saying so, when no GPU is present.

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops/cudnn_select.h"
#include "kernels/ops/resample.h"

#include "tests/gpu/gpu_test.h"

namespace detcoll::kernels::ops::cudnn {
namespace {

std::vector<float> randomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

float* upload(const std::vector<float>& v) {
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), v.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

std::vector<float> download(const float* p, size_t n) {
  std::vector<float> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(CudnnGpu, DeterministicConvolutionAlgorithmsRepeatTheirBits) {
  DETCOLL_SKIP_WITHOUT_GPU("the cuDNN helper is");
  cudnnHandle_t handle;
  ASSERT_EQ(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS);
  ConvProblem p;
  p.n = 4;
  p.c = 16;
  p.h = p.w = 20;
  p.k = 24;
  p.r = p.s = 3;
  p.padH = p.padW = 1;
  for (ConvDirection d :
       {ConvDirection::kForward, ConvDirection::kBackwardData, ConvDirection::kBackwardFilter}) {
    std::vector<ConvAlgorithm> algorithms;
    ASSERT_TRUE(deterministicConvolutionAlgorithms(handle, p, d, &algorithms).isOk());
    EXPECT_FALSE(algorithms.empty()) << "direction " << static_cast<int>(d);
  }
  std::vector<ConvAlgorithm> forward;
  ASSERT_TRUE(
      deterministicConvolutionAlgorithms(handle, p, ConvDirection::kForward, &forward).isOk());
  const std::vector<float> x = randomFloats(4 * 16 * 20 * 20, 1), w = randomFloats(24 * 16 * 9, 2);
  // The direct convolution in double.
  std::vector<double> expected(4 * 24 * 20 * 20, 0.0);
  for (int n = 0; n < 4; ++n)
    for (int k = 0; k < 24; ++k)
      for (int i = 0; i < 20; ++i)
        for (int j = 0; j < 20; ++j) {
          double s = 0;
          for (int c = 0; c < 16; ++c)
            for (int r = 0; r < 3; ++r)
              for (int q = 0; q < 3; ++q) {
                const int y = i + r - 1, z = j + q - 1;
                if (y < 0 || y >= 20 || z < 0 || z >= 20) continue;
                s +=
                    double(x[((n * 16 + c) * 20 + y) * 20 + z]) * w[((k * 16 + c) * 3 + r) * 3 + q];
              }
          expected[((n * 24 + k) * 20 + i) * 20 + j] = s;
        }
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&wd);
  cudnnCreateConvolutionDescriptor(&cd);
  cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 4, 16, 20, 20);
  cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 4, 24, 20, 20);
  cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 24, 16, 3, 3);
  cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  float* dx = upload(x);
  float* dw = upload(w);
  float* dy = upload(std::vector<float>(expected.size()));
  const float one = 1.0f, zero = 0.0f;
  for (const ConvAlgorithm& a : forward) {
    if (a.tensorOps) continue;  // TF32 math rounds its inputs: checked for repeatability only
    void* workspace = nullptr;
    ASSERT_EQ(cudaMalloc(&workspace, a.workspace + 1), cudaSuccess);
    std::vector<float> runs[2];
    for (auto& run : runs) {
      ASSERT_EQ(cudnnConvolutionForward(handle, &one, xd, dx, wd, dw, cd,
                                        static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm),
                                        workspace, a.workspace, &zero, yd, dy),
                CUDNN_STATUS_SUCCESS)
          << "algorithm " << a.algorithm;
      run = download(dy, expected.size());
    }
    cudaFree(workspace);
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4), 0)
        << "algorithm " << a.algorithm;
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(runs[0][i], expected[i], 1e-4 * (1 + std::fabs(expected[i])))
          << "algorithm " << a.algorithm << " element " << i;
    }
  }
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroy(handle);
}

TEST(CudnnGpu, DeterministicMaxPoolBackwardEqualsTheGather) {
  DETCOLL_SKIP_WITHOUT_GPU("the cuDNN helper is");
  cudnnHandle_t handle;
  ASSERT_EQ(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS);
  Pool2d pool;
  pool.planes = 6 * 8;
  pool.inHeight = pool.inWidth = 32;
  pool.kernelHeight = pool.kernelWidth = 2;
  pool.strideHeight = pool.strideWidth = 2;
  const std::vector<float> x = randomFloats(48 * 32 * 32, 3);  // distinct values: no ties
  const std::vector<float> dyHost = randomFloats(48 * 16 * 16, 4);
  std::vector<float> y(48 * 16 * 16), expected(x.size());
  std::vector<int64_t> indices(y.size());
  ASSERT_TRUE(maxPool2d(y.data(), indices.data(), x.data(), DataType::kFloat32, pool, 1).isOk());
  ASSERT_TRUE(
      maxPool2dBackward(expected.data(), dyHost.data(), indices.data(), DataType::kFloat32, pool, 1)
          .isOk());
  PoolProblem p;
  p.n = 6;
  p.c = 8;
  p.h = p.w = 32;
  p.windowH = p.windowW = p.strideH = p.strideW = 2;
  float* dx = upload(x);
  float* dy = upload(y);
  float* ddy = upload(dyHost);
  float* ddx = upload(std::vector<float>(x.size()));
  ASSERT_TRUE(maxPoolBackward(handle, p, dx, dy, ddy, ddx).isOk());
  const std::vector<float> got = download(ddx, x.size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * 4), 0);
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(ddy);
  cudaFree(ddx);
  cudnnDestroy(handle);
}

}  // namespace
}  // namespace detcoll::kernels::ops::cudnn
