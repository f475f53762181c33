#include <cuda_runtime.h>

#include <string>

#include "kernels/rng/distributions.h"
#include "kernels/rng/fill_cuda.h"

namespace detcoll::kernels::rng {
namespace {

constexpr int kThreads = 256;

// One thread per Philox block: block b covers elements [E b, E b + E); those inside
// [offset, offset + count) are written.
template <int E, typename T, typename Convert>
__global__ void fillBlocksKernel(Key key, uint64_t offset, uint64_t count, T* out,
                                 Convert convert) {
  const uint64_t first = offset / E;
  const uint64_t blocks = (offset + count - 1) / E + 1 - first;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < blocks;
       t += stride) {
    const uint64_t b = first + t;
    const Block words = streamBlock(key, b);
#pragma unroll
    for (int lane = 0; lane < E; ++lane) {
      const uint64_t i = b * E + lane;
      if (i >= offset && i - offset < count) out[i - offset] = convert(words, lane, i);
    }
  }
}

template <typename T>
__global__ void randintKernel(Key key, uint64_t offset, uint64_t count, uint64_t n, T* out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count;
       j += stride) {
    out[j] = static_cast<T>(randint(key, offset + j, n));
  }
}

struct Uniform32 {
  __device__ float operator()(const Block& b, int lane, uint64_t) const {
    return uniformFloat32FromWord(b.v[lane]);
  }
};
struct Uniform64 {
  __device__ double operator()(const Block& b, int lane, uint64_t) const {
    return uniformFloat64FromBits(wordPair(b, lane));
  }
};
struct Normal32 {
  double mean, stddev;
  __device__ float operator()(const Block& b, int, uint64_t i) const {
    return static_cast<float>(dAdd(mean, dMul(stddev, normalFloat32Z(b, i))));
  }
};
struct Normal64 {
  double mean, stddev;
  __device__ double operator()(const Block& b, int, uint64_t i) const {
    return dAdd(mean, dMul(stddev, normalFloat64Z(b, i)));
  }
};
template <typename T>
struct Bernoulli {
  uint64_t threshold;
  T one;
  __device__ T operator()(const Block& b, int lane, uint64_t) const {
    return b.v[lane] < threshold ? one : T(0);
  }
};

unsigned gridFor(uint64_t work) {
  const uint64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

template <int E, typename T, typename Convert>
void launchBlocks(const Key& key, uint64_t offset, uint64_t count, void* out, Convert convert,
                  cudaStream_t stream) {
  const uint64_t blocks = (offset + count - 1) / E + 1 - offset / E;
  fillBlocksKernel<E, T>
      <<<gridFor(blocks), kThreads, 0, stream>>>(key, offset, count, static_cast<T*>(out), convert);
}

}  // namespace

Status fillDevice(const Key& key, const FillSpec& spec, uint64_t offset, size_t count, void* out,
                  void* streamHandle) {
  DETCOLL_RETURN_IF_ERROR(checkFill("fill", spec, offset, count, out));
  if (count == 0) return Status::ok();
  auto stream = static_cast<cudaStream_t>(streamHandle);
  const bool f32 = spec.type == DataType::kFloat32;
  switch (spec.distribution) {
    case Distribution::kUniform:
      if (f32) {
        launchBlocks<4, float>(key, offset, count, out, Uniform32{}, stream);
      } else {
        launchBlocks<2, double>(key, offset, count, out, Uniform64{}, stream);
      }
      break;
    case Distribution::kNormal:
      if (f32) {
        launchBlocks<4, float>(key, offset, count, out, Normal32{spec.mean, spec.stddev}, stream);
      } else {
        launchBlocks<2, double>(key, offset, count, out, Normal64{spec.mean, spec.stddev}, stream);
      }
      break;
    case Distribution::kBernoulli: {
      const uint64_t t = bernoulliThreshold(spec.p);
      switch (spec.type) {
        case DataType::kFloat32:
          launchBlocks<4, float>(key, offset, count, out, Bernoulli<float>{t, 1.0f}, stream);
          break;
        case DataType::kFloat64:
          launchBlocks<4, double>(key, offset, count, out, Bernoulli<double>{t, 1.0}, stream);
          break;
        case DataType::kInt32:
          launchBlocks<4, int32_t>(key, offset, count, out, Bernoulli<int32_t>{t, 1}, stream);
          break;
        case DataType::kInt64:
          launchBlocks<4, int64_t>(key, offset, count, out, Bernoulli<int64_t>{t, 1}, stream);
          break;
        case DataType::kFloat16:
          launchBlocks<4, uint16_t>(key, offset, count, out, Bernoulli<uint16_t>{t, 0x3c00},
                                    stream);
          break;
        case DataType::kBFloat16:
          launchBlocks<4, uint16_t>(key, offset, count, out, Bernoulli<uint16_t>{t, 0x3f80},
                                    stream);
          break;
      }
      break;
    }
    case Distribution::kRandint:
      if (spec.type == DataType::kInt32) {
        randintKernel<int32_t><<<gridFor(count), kThreads, 0, stream>>>(key, offset, count, spec.n,
                                                                        static_cast<int32_t*>(out));
      } else {
        randintKernel<int64_t><<<gridFor(count), kThreads, 0, stream>>>(key, offset, count, spec.n,
                                                                        static_cast<int64_t*>(out));
      }
      break;
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return Status::backend(std::string("fill: CUDA launch failed: ") + cudaGetErrorString(error));
  }
  return Status::ok();
}

}  // namespace detcoll::kernels::rng
