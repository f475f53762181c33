#include "kernels/ops/twin.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

#include "kernels/ops/parallel.h"

namespace detcoll::ops::twin {
namespace {

// The host as an executor: scratch from the heap, a body called for each index in turn (so the
// grid's indices run in an order no GPU would use, which the bits must not notice: the indices
// run backwards), a stable sort.
class HostExecutor {
 public:
  template <typename T>
  T* alloc(int64_t n) {
    buffers_.push_back(std::make_unique<unsigned char[]>(std::max<int64_t>(n, 1) * sizeof(T)));
    return reinterpret_cast<T*>(buffers_.back().get());
  }

  template <typename Body>
  void launch(int64_t n, const Body& body) {
    for (int64_t i = n; i-- > 0;) body(i);
  }

  template <typename K, typename V>
  void sortPairs(const K* keysIn, K* keysOut, const V* valuesIn, V* valuesOut, int64_t n,
                 int endBit) {
    const K mask =
        endBit >= static_cast<int>(8 * sizeof(K)) ? ~K{0} : static_cast<K>((K{1} << endBit) - 1);
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return (keysIn[a] & mask) < (keysIn[b] & mask); });
    for (int64_t i = 0; i < n; ++i) {
      keysOut[i] = keysIn[order[i]];
      valuesOut[i] = valuesIn[order[i]];
    }
  }

  void toHost(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void toDevice(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

  void minMax(const int64_t* x, int64_t n, int64_t* lo, int64_t* hi) {
    const auto [a, b] = std::minmax_element(x, x + n);
    *lo = *a;
    *hi = *b;
  }

  Status status() const { return Status::ok(); }

 private:
  std::vector<std::unique_ptr<unsigned char[]>> buffers_;
};

}  // namespace

Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape) {
  HostExecutor e;
  return parallel::scatterAdd(e, self, selfShape, type, dim, index, indexShape, src, srcShape);
}

Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha) {
  HostExecutor e;
  return parallel::indexAdd(e, self, selfShape, type, dim, index, indexCount, source, sourceShape,
                            alpha);
}

Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean) {
  HostExecutor e;
  return parallel::unsortedSegmentReduce(e, out, segments, type, data, dataShape, segmentIds,
                                         idDims, mean);
}

Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq) {
  HostExecutor e;
  return parallel::embeddingBackward(e, gradWeight, numWeights, type, gradOutput, count, dim,
                                     indices, paddingIdx, scaleGradByFreq);
}

Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx) {
  HostExecutor e;
  return parallel::embeddingBagBackward(e, gradWeight, numWeights, type, gradOutput, bags, dim,
                                        indices, count, offsets, mean, perSampleWeights,
                                        paddingIdx);
}

Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength) {
  HostExecutor e;
  return parallel::bincount(e, out, outLength, type, input, count, weights, minlength);
}

Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out) {
  HostExecutor e;
  return parallel::sumOverAxes(e, in, shape, type, std::move(axes), out);
}

Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out) {
  HostExecutor e;
  return parallel::biasAddGrad(e, grad, shape, type, channelsFirst, out);
}

Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& shape) {
  HostExecutor e;
  return parallel::bilinear2dBackward(e, gradInput, gradOutput, type, shape);
}

Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& pool) {
  HostExecutor e;
  return parallel::maxPool2d(e, out, indices, in, type, pool);
}

Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& pool) {
  HostExecutor e;
  return parallel::maxPool2dBackward(e, gradInput, gradOutput, indices, type, pool);
}

}  // namespace detcoll::ops::twin
