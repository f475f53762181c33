#include "kernels/ops/scatter.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/accumulate.h"
#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops {
namespace {

// Per-source weights 1 / count, formed in the accumulation type's precision (float64 for
// float64, float32 otherwise), for the reduction.
class Reciprocals {
 public:
  explicit Reciprocals(DataType type) : wide_(type == DataType::kFloat64) {}
  void push(int64_t count) {
    if (wide_) {
      d_.push_back(1.0 / static_cast<double>(count));
    } else {
      f_.push_back(1.0f / static_cast<float>(count));
    }
  }
  // Makes them the weights of in (they must outlive the reduction).
  void weigh(SegmentSources* in) const {
    in->weights = wide_ ? static_cast<const void*>(d_.data()) : f_.data();
    in->weightType = wide_ ? DataType::kFloat64 : DataType::kFloat32;
  }

 private:
  bool wide_;
  std::vector<float> f_;
  std::vector<double> d_;
};

}  // namespace

Status scatterAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                  const Shape& indexShape, const void* src, const Shape& srcShape, int threads) {
  const char* op = "scatter_add";
  if (selfShape.empty() && indexShape.empty() && srcShape.empty()) {  // 0-d: one element
    return scatterAdd(self, {1}, type, dim, index, {1}, src, {1}, threads);
  }
  DETCOLL_RETURN_IF_ERROR(checkScatterAddShapes(selfShape, &dim, indexShape, srcShape));
  const size_t rank = selfShape.size();
  const int64_t n = product(indexShape);
  if (n == 0) return Status::ok();
  if (index == nullptr) return Status::invalidArgument(std::string(op) + ": index is null");
  // Every index position: its destination (self's flat offset) and its source (src's, kept
  // only where src is shaped differently from index; in one dimension, position p is src[p]).
  const bool sameShape = indexShape == srcShape || rank == 1;
  std::vector<int64_t> destination(rank == 1 ? 0 : n), source(sameShape ? 0 : n);
  std::vector<int64_t> coordinate(rank, 0);
  for (int64_t p = 0; rank > 1 && p < n; ++p) {
    const int64_t v = index[p];
    if (v < 0 || v >= selfShape[dim]) {
      return Status::invalidArgument(std::string(op) + ": index value " + std::to_string(v) +
                                     " at position " + std::to_string(p) + " is out of range [0, " +
                                     std::to_string(selfShape[dim]) + ") of dim " +
                                     std::to_string(dim));
    }
    int64_t to = 0, from = 0;
    for (size_t d = 0; d < rank; ++d) {
      to = to * selfShape[d] + (static_cast<int>(d) == dim ? v : coordinate[d]);
      from = from * srcShape[d] + coordinate[d];
    }
    destination[p] = to;
    if (!sameShape) source[p] = from;
    for (size_t d = rank; d-- > 0;) {  // the next coordinate, row-major
      if (++coordinate[d] < indexShape[d]) break;
      coordinate[d] = 0;
    }
  }
  SegmentSources in;
  in.values = src;
  in.type = type;
  in.rowStride = 1;
  in.rows = sameShape ? nullptr : source.data();
  const SegmentOutput out{self, 1, 1, SegmentInit::kOutput};
  if (rank == 1) {  // the index is the destination, checked as it is added
    return checkAndScatter(index, n, selfShape[0], "index", in, out, threads).prefixed(op);
  }
  return scatterReduce(destination.data(), n, product(selfShape), Skip{}, in, out, threads)
      .prefixed(op);
}

Status indexAdd(void* self, const Shape& selfShape, DataType type, int dim, const int64_t* index,
                int64_t indexCount, const void* source, const Shape& sourceShape, double alpha,
                int threads) {
  const char* op = "index_add";
  DETCOLL_RETURN_IF_ERROR(checkIndexAddShapes(selfShape, &dim, indexCount, sourceShape));
  DETCOLL_RETURN_IF_ERROR(checkAlpha(op, type, alpha));
  const int64_t m = selfShape.empty() ? 1 : selfShape[dim];
  const int64_t outer = product(selfShape, 0, dim), inner = product(selfShape, dim + 1);
  const size_t size = dataTypeSize(type);
  if (outer == 1) {  // one pass: the index checked as it is added
    SegmentSources in;
    in.values = source;
    in.type = type;
    in.rowStride = inner;
    in.scale = alpha;
    return checkAndScatter(index, indexCount, m, "index", in,
                           SegmentOutput{self, inner, inner, SegmentInit::kOutput}, threads)
        .prefixed(op);
  }
  DETCOLL_RETURN_IF_ERROR(checkSegments(index, indexCount, m, "index").prefixed(op));
  for (int64_t o = 0; o < outer; ++o) {
    SegmentSources in;
    in.values = static_cast<const char*>(source) + o * indexCount * inner * size;
    in.type = type;
    in.rowStride = inner;
    in.scale = alpha;
    SegmentOutput out{static_cast<char*>(self) + o * m * inner * size, inner, inner,
                      SegmentInit::kOutput};
    DETCOLL_RETURN_IF_ERROR(
        scatterReduce(index, indexCount, m, Skip{}, in, out, threads).prefixed(op));
  }
  return Status::ok();
}

Status unsortedSegmentReduce(void* out, int64_t segments, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean, int threads) {
  const char* op = mean ? "unsorted_segment_mean" : "unsorted_segment_sum";
  DETCOLL_RETURN_IF_ERROR(checkSegmentShapes(op, segments, dataShape, idDims));
  const int64_t n = product(dataShape, 0, idDims), row = product(dataShape, idDims);
  Skip negative;
  negative.negative = true;
  DETCOLL_RETURN_IF_ERROR(
      checkSegments(segmentIds, n, segments, "segment_ids", negative).prefixed(op));
  SegmentSources in;
  in.values = data;
  in.type = type;
  in.rowStride = row;
  return scatterReduce(segmentIds, n, segments, negative, in,
                       SegmentOutput{out, row, row, SegmentInit::kZero, mean}, threads)
      .prefixed(op);
}

Status embeddingBackward(void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq, int threads) {
  const char* op = "embedding_backward";
  Skip padding;
  DETCOLL_RETURN_IF_ERROR(
      checkEmbedding(op, type, numWeights, count, dim, indices, paddingIdx, &padding));
  SegmentSources in;
  in.values = gradOutput;
  in.type = type;
  in.rowStride = dim;
  Reciprocals reciprocal(type);
  if (scaleGradByFreq) {
    std::vector<int64_t> frequency(numWeights, 0);
    for (int64_t i = 0; i < count; ++i) {
      if (!padding(indices[i])) ++frequency[indices[i]];
    }
    for (int64_t i = 0; i < count; ++i) {
      reciprocal.push(padding(indices[i]) ? 1 : frequency[indices[i]]);
    }
    reciprocal.weigh(&in);
  }
  return scatterReduce(indices, count, numWeights, padding, in,
                       SegmentOutput{gradWeight, dim, dim, SegmentInit::kZero}, threads)
      .prefixed(op);
}

Status embeddingBagBackward(void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx,
                            int threads) {
  const char* op = "embedding_bag_backward";
  Skip padding;
  DETCOLL_RETURN_IF_ERROR(
      checkEmbedding(op, type, numWeights, count, dim, indices, paddingIdx, &padding));
  if (bags < 0)
    return Status::invalidArgument(std::string(op) + ": bags is " + std::to_string(bags));
  if (mean && perSampleWeights != nullptr) {
    return Status::invalidArgument(std::string(op) +
                                   ": per_sample_weights need mode sum, as in PyTorch");
  }
  std::vector<int64_t> bagOf(count);
  DETCOLL_RETURN_IF_ERROR(checkBagOffsets(offsets, bags, count).prefixed(op));
  for (int64_t b = 0; b < bags; ++b) {
    std::fill(bagOf.begin() + offsets[b], bagOf.begin() + (b + 1 < bags ? offsets[b + 1] : count),
              b);
  }
  if (bags == 0 && count > 0) {
    return Status::invalidArgument(std::string(op) + ": indices but no bags");
  }
  SegmentSources in;
  in.values = gradOutput;
  in.type = type;
  in.rowStride = dim;
  in.rows = bagOf.data();
  Reciprocals reciprocal(type);
  if (mean) {
    std::vector<int64_t> size(bags, 0);
    for (int64_t k = 0; k < count; ++k) size[bagOf[k]] += padding(indices[k]) ? 0 : 1;
    for (int64_t k = 0; k < count; ++k) reciprocal.push(std::max<int64_t>(1, size[bagOf[k]]));
    reciprocal.weigh(&in);
  } else if (perSampleWeights != nullptr) {
    in.weights = perSampleWeights;
    in.weightType = type;
  }
  return scatterReduce(indices, count, numWeights, padding, in,
                       SegmentOutput{gradWeight, dim, dim, SegmentInit::kZero}, threads)
      .prefixed(op);
}

Status bincount(void* out, int64_t* outLength, DataType type, const int64_t* input, int64_t count,
                const void* weights, int64_t minlength, int threads) {
  const char* op = "bincount";
  DETCOLL_RETURN_IF_ERROR(checkBincount(type, input, count, weights, minlength, outLength, out));
  // Four independent chains and no early exit, so the scan runs at memory speed.
  int64_t most[4] = {-1, -1, -1, -1}, least[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    for (int l = 0; l < 4; ++l) {
      most[l] = std::max(most[l], input[i + l]);
      least[l] = std::min(least[l], input[i + l]);
    }
  }
  for (; i < count; ++i) {
    most[0] = std::max(most[0], input[i]);
    least[0] = std::min(least[0], input[i]);
  }
  const int64_t largest = std::max({most[0], most[1], most[2], most[3]});
  const int64_t smallest = std::min({least[0], least[1], least[2], least[3]});
  for (i = 0; smallest < 0 && i < count; ++i) {
    if (input[i] < 0) {
      return Status::invalidArgument(std::string(op) + ": input[" + std::to_string(i) +
                                     "] = " + std::to_string(input[i]) + " is negative");
    }
  }
  int64_t length = 0;
  DETCOLL_RETURN_IF_ERROR(bincountLength(largest, minlength, &length));
  *outLength = length;
  if (out == nullptr) return Status::ok();
  SegmentSources in;
  in.type = type;
  if (weights != nullptr) {
    in.values = weights;
    in.rowStride = 1;
  } else {  // counts: every source is 1
    static const int64_t one = 1;
    in.values = &one;
    in.type = DataType::kInt64;
    in.rowStride = 0;
    if (count == 0) in.type = type;  // no input: null weights may be empty ones; zeros out
  }
  return scatterReduce(input, count, *outLength, Skip{}, in,
                       SegmentOutput{out, 1, 1, SegmentInit::kZero}, threads)
      .prefixed(op);
}

Status checkSparseDense(void* out, int64_t outRows, DataType type, const int64_t* rows,
                        const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                        int64_t denseRows, int64_t columns) {
  const std::string op = "sparse_dense_matmul: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  if (outRows < 0 || nnz < 0 || denseRows < 0 || columns < 0) {
    return Status::invalidArgument(op + "negative size");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit("sparse_dense_matmul", {outRows, columns}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("sparse_dense_matmul", {denseRows, columns}));
  if ((outRows * columns > 0 && out == nullptr) ||
      (nnz > 0 && (rows == nullptr || cols == nullptr || values == nullptr)) ||
      (nnz > 0 && denseRows * columns > 0 && dense == nullptr)) {
    return Status::invalidArgument(op + "out, rows, cols, values or dense is null");
  }
  return Status::ok();
}

Status sparseDenseMatmul(void* out, int64_t outRows, DataType type, const int64_t* rows,
                         const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                         int64_t denseRows, int64_t columns, int threads) {
  const char* op = "sparse_dense_matmul";
  DETCOLL_RETURN_IF_ERROR(
      checkSparseDense(out, outRows, type, rows, cols, values, nnz, dense, denseRows, columns));
  DETCOLL_RETURN_IF_ERROR(checkSegments(rows, nnz, outRows, "rows").prefixed(op));
  DETCOLL_RETURN_IF_ERROR(checkSegments(cols, nnz, denseRows, "cols").prefixed(op));
  SegmentSources in;
  in.values = dense;
  in.type = type;
  in.rowStride = columns;
  in.rows = cols;
  in.weights = values;
  in.weightType = type;
  return scatterReduce(rows, nnz, outRows, Skip{}, in,
                       SegmentOutput{out, columns, columns, SegmentInit::kZero}, threads)
      .prefixed(op);
}

Status weightedScatter(void* out, int64_t planes, int64_t outInner, DataType type,
                       const int64_t* destination, int64_t n, const void* values,
                       int64_t valuesInner, const int64_t* rows, const void* weights, int threads) {
  const char* op = "weighted_scatter";
  DETCOLL_RETURN_IF_ERROR(checkWeightedScatter(op, out, planes, outInner, type, destination, n,
                                               values, valuesInner, rows));
  DETCOLL_RETURN_IF_ERROR(checkSegments(destination, n, outInner, "destination").prefixed(op));
  if (rows != nullptr) {
    DETCOLL_RETURN_IF_ERROR(checkSegments(rows, n, valuesInner, "rows").prefixed(op));
  }
  // Each plane in one pass over the sources in order, into accumulators (the output itself
  // where the dtype is its own accumulation type): the bits of the segment engine's contract,
  // which the device formulation computes by its sort. Threads take whole planes.
  visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename Traits<T>::Acc;
    constexpr bool kInPlace = std::is_same_v<T, A>;
    const A* w = static_cast<const A*>(weights);
    auto run = [&](int64_t first, int64_t last) {
      std::vector<A> buffer(kInPlace ? 0 : static_cast<size_t>(outInner));
      for (int64_t p = first; p < last; ++p) {
        const T* in = static_cast<const T*>(values) + p * valuesInner;
        T* plane = static_cast<T*>(out) + p * outInner;
        A* acc = kInPlace ? reinterpret_cast<A*>(plane) : buffer.data();
        std::fill(acc, acc + outInner, A{});
        for (int64_t s = 0; s < n; ++s) {
          const A v = Traits<T>::load(in[rows != nullptr ? rows[s] : s]);
          A& a = acc[destination[s]];
          a = w != nullptr ? wrapAdd(a, wrapMultiply(w[s], v)) : wrapAdd(a, v);
        }
        // Every NaN becomes the dtype's canonical one (Traits::store), as on the device.
        for (int64_t d = 0; d < outInner; ++d) plane[d] = Traits<T>::store(acc[d]);
      }
    };
    forEachRange(planes, threads, 1 + planes * (n + outInner) / (256 << 10), run);
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
