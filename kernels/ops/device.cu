#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <string>
#include <vector>

#include "kernels/ops/device.h"
#include "kernels/ops/parallel.h"

namespace detcoll::ops::device {
namespace {

constexpr int kThreads = 256;

template <typename Body>
__global__ void runBody(int64_t n, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    body(i);
  }
}

// The device as an executor (parallel.h): stream-ordered scratch, a grid-stride kernel per body,
// CUB for the sort and the min/max. The first CUDA failure is kept and reported by status().
class DeviceExecutor {
 public:
  explicit DeviceExecutor(void* stream) : stream_(static_cast<cudaStream_t>(stream)) {}
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;
  ~DeviceExecutor() {
    for (void* p : buffers_) cudaFreeAsync(p, stream_);
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

}  // namespace

Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape, void* stream) {
  DeviceExecutor e(stream);
  return parallel::scatterAdd(e, self, selfShape, type, dim, index, indexShape, src, srcShape);
}

Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha,
                void* stream) {
  DeviceExecutor e(stream);
  return parallel::indexAdd(e, self, selfShape, type, dim, index, indexCount, source, sourceShape,
                            alpha);
}

Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean, void* stream) {
  DeviceExecutor e(stream);
  return parallel::unsortedSegmentReduce(e, out, segments, type, data, dataShape, segmentIds,
                                         idDims, mean);
}

Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq, void* stream) {
  DeviceExecutor e(stream);
  return parallel::embeddingBackward(e, gradWeight, numWeights, type, gradOutput, count, dim,
                                     indices, paddingIdx, scaleGradByFreq);
}

Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx,
                            void* stream) {
  DeviceExecutor e(stream);
  return parallel::embeddingBagBackward(e, gradWeight, numWeights, type, gradOutput, bags, dim,
                                        indices, count, offsets, mean, perSampleWeights,
                                        paddingIdx);
}

Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength, void* stream) {
  DeviceExecutor e(stream);
  return parallel::bincount(e, out, outLength, type, input, count, weights, minlength);
}

Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, void* stream) {
  DeviceExecutor e(stream);
  return parallel::sumOverAxes(e, in, shape, type, std::move(axes), out);
}

Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out, void* stream) {
  DeviceExecutor e(stream);
  return parallel::biasAddGrad(e, grad, shape, type, channelsFirst, out);
}

Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& shape, void* stream) {
  DeviceExecutor e(stream);
  return parallel::bilinear2dBackward(e, gradInput, gradOutput, type, shape);
}

Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& pool,
                 void* stream) {
  DeviceExecutor e(stream);
  return parallel::maxPool2d(e, out, indices, in, type, pool);
}

Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& pool, void* stream) {
  DeviceExecutor e(stream);
  return parallel::maxPool2dBackward(e, gradInput, gradOutput, indices, type, pool);
}

}  // namespace detcoll::ops::device
