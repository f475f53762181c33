#pragma once

// The CUDA device as an executor of data-parallel bodies (kernels/ops/bodies/,
// kernels/bodies/): stream-ordered scratch, a grid-stride kernel per body, CUB for sorts
// and min/max. The first CUDA failure is kept and reported by status(). CUDA sources only.

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <string>
#include <vector>

#include "common/status.h"

namespace detcoll::kernels {

constexpr int kThreads = 256;

template <typename Body>
__global__ void runBody(int64_t n, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    body(i);
  }
}

class DeviceExecutor {
 public:
  explicit DeviceExecutor(void* stream) : stream_(static_cast<cudaStream_t>(stream)) {}
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;
  ~DeviceExecutor() { release(0); }

  // Scratch in use now, and a release of what was allocated after that mark (stream-ordered:
  // the memory is reused only by work enqueued after the release).
  size_t mark() const { return buffers_.size(); }
  void release(size_t mark) {
    while (buffers_.size() > mark) {
      cudaFreeAsync(buffers_.back(), stream_);
      buffers_.pop_back();
    }
  }

  template <typename T>
  T* alloc(int64_t n) {
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(T);
    if (note(cudaMallocAsync(&p, bytes, stream_), "cudaMallocAsync")) buffers_.push_back(p);
    return static_cast<T*>(p);
  }

  template <typename Body>
  void launch(int64_t n, const Body& body) {
    if (n <= 0 || !failure_.isOk()) return;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    const unsigned grid = static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));
    runBody<<<grid, kThreads, 0, stream_>>>(n, body);
    note(cudaGetLastError(), "a kernel launch");
  }

  template <typename K, typename V>
  void sortPairs(const K* keysIn, K* keysOut, const V* valuesIn, V* valuesOut, int64_t n,
                 int endBit) {
    if (n <= 0 || !failure_.isOk()) return;
    size_t bytes = 0;
    if (!note(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keysIn, keysOut, valuesIn, valuesOut,
                                              n, 0, endBit, stream_),
              "cub::DeviceRadixSort::SortPairs")) {
      return;
    }
    void* temp = alloc<unsigned char>(static_cast<int64_t>(bytes));
    note(cub::DeviceRadixSort::SortPairs(temp, bytes, keysIn, keysOut, valuesIn, valuesOut, n, 0,
                                         endBit, stream_),
         "cub::DeviceRadixSort::SortPairs");
  }

  void toHost(void* dst, const void* src, size_t bytes) {
    if (!failure_.isOk()) return;
    if (note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync")) {
      note(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
  }

  void toDevice(void* dst, const void* src, size_t bytes) {
    if (!failure_.isOk()) return;
    note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  }

  void minMax(const int64_t* x, int64_t n, int64_t* lo, int64_t* hi) {
    int64_t* result = alloc<int64_t>(2);
    size_t minBytes = 0, maxBytes = 0;
    if (!failure_.isOk()) return;
    note(cub::DeviceReduce::Min(nullptr, minBytes, x, result, n, stream_),
         "cub::DeviceReduce::Min");
    note(cub::DeviceReduce::Max(nullptr, maxBytes, x, result + 1, n, stream_),
         "cub::DeviceReduce::Max");
    void* temp =
        alloc<unsigned char>(static_cast<int64_t>(minBytes > maxBytes ? minBytes : maxBytes));
    if (!failure_.isOk()) return;
    note(cub::DeviceReduce::Min(temp, minBytes, x, result, n, stream_), "cub::DeviceReduce::Min");
    note(cub::DeviceReduce::Max(temp, maxBytes, x, result + 1, n, stream_),
         "cub::DeviceReduce::Max");
    int64_t both[2] = {0, -1};
    toHost(both, result, sizeof(both));
    *lo = both[0];
    *hi = both[1];
  }

  Status status() const { return failure_; }
  void* stream() const { return stream_; }

 private:
  bool note(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (failure_.isOk()) {
      failure_ = Status::backend(std::string(what) + " failed: " + cudaGetErrorString(e));
    }
    return false;
  }

  cudaStream_t stream_;
  std::vector<void*> buffers_;
  Status failure_;
};

}  // namespace detcoll::kernels
