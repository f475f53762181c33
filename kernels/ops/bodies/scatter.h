#pragma once

// The scatter family (kernels/ops/scatter.h) on an executor: each op checks its arguments as the
// CPU reference does (op_checks.h, the same words), works out each source's destination, row and
// weight with the bodies below, and reduces them with the segment engine (bodies/segment.h).

#include <cstdint>
#include <limits>
#include <string>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/bodies/segment.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops::bodies {

constexpr int kMaxRank = 16;

template <typename T>
struct FillZeroBody {
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = T{}; }
};

// bincount's counts: every source is the int64 1.
struct FillOneBody {
  int64_t* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = 1; }
};

// scatter_add of rank > 1, index position p: its destination (self's flat offset) and source
// (src's flat offset); an index value out of range goes to *bad.
struct ScatterPlaceBody {
  int rank, dim;
  int64_t indexShape[kMaxRank], selfStride[kMaxRank], srcStride[kMaxRank];
  int64_t dimSize;
  const int64_t* index;
  int64_t* destination;
  int64_t* source;  // null when src is shaped as index
  int64_t* bad;

  DETCOLL_HOST_DEVICE void operator()(int64_t p) const {
    const int64_t v = index[p];
    if (v < 0 || v >= dimSize) recordFirst(bad, p);
    int64_t rest = p, to = 0, from = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t coordinate = rest % indexShape[d];
      rest /= indexShape[d];
      to += (d == dim ? (v < 0 || v >= dimSize ? 0 : v) : coordinate) * selfStride[d];
      from += coordinate * srcStride[d];
    }
    destination[p] = to;
    if (source != nullptr) source[p] = from;
  }
};

// Bag b of embedding_bag: rowOf[k] = b for its positions; with weightOf set (mean mode), every
// position's weight 1 / (the bag's non-padding size, at least 1), in the accumulation type.
template <typename A>
struct BagBody {
  const int64_t* offsets;
  int64_t bags, count;
  const int64_t* indices;
  Skip padding;
  int64_t* rowOf;
  A* weightOf;

  DETCOLL_HOST_DEVICE void operator()(int64_t b) const {
    const int64_t begin = offsets[b], end = b + 1 < bags ? offsets[b + 1] : count;
    int64_t size = 0;
    for (int64_t k = begin; k < end; ++k) {
      rowOf[k] = b;
      const int64_t i = indices[k];
      size += (padding.value && i == padding.which) ? 0 : 1;
    }
    if (weightOf == nullptr) return;
    const A w = A(1) / static_cast<A>(size > 1 ? size : 1);
    for (int64_t k = begin; k < end; ++k) weightOf[k] = w;
  }
};

// embedding_bag's offsets: the first bag breaking 0 = offsets[0] <= ... <= count goes to *bad.
struct BagOffsetsCheckBody {
  const int64_t* offsets;
  int64_t bags, count;
  int64_t* bad;
  DETCOLL_HOST_DEVICE void operator()(int64_t b) const {
    const int64_t at = bagOffsetBreak(offsets, bags, count, b);
    if (at >= 0) recordFirst(bad, at);
  }
};

template <typename E>
Status scatterAdd(E& e, void* self, const Shape& selfShape, DataType type, int dim,
                  const int64_t* index, const Shape& indexShape, const void* src,
                  const Shape& srcShape) {
  const char* op = "scatter_add";
  if (selfShape.empty() && indexShape.empty() && srcShape.empty()) {
    return scatterAdd(e, self, {1}, type, dim, index, {1}, src, {1});
  }
  DETCOLL_RETURN_IF_ERROR(checkScatterAddShapes(selfShape, &dim, indexShape, srcShape));
  const int rank = static_cast<int>(selfShape.size());
  if (rank > kMaxRank) {
    return Status::invalidArgument(std::string(op) + ": more than " + std::to_string(kMaxRank) +
                                   " dimensions");
  }
  const int64_t n = product(indexShape);
  if (n == 0) return Status::ok();
  if (index == nullptr) return Status::invalidArgument(std::string(op) + ": index is null");
  SegmentJob job;
  job.n = n;
  job.destinations = product(selfShape);
  job.values = src;
  job.type = type;
  job.out = self;
  job.initFromOutput = true;
  if (rank == 1) {
    job.destination = index;
    return segments(e, job).prefixed(op);
  }
  ScatterPlaceBody place{};
  place.rank = rank;
  place.dim = dim;
  int64_t selfStride = 1, srcStride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    place.indexShape[d] = indexShape[d];
    place.selfStride[d] = selfStride;
    place.srcStride[d] = srcStride;
    selfStride *= selfShape[d];
    srcStride *= srcShape[d];
  }
  place.dimSize = selfShape[dim];
  place.index = index;
  place.destination = e.template alloc<int64_t>(n);
  place.source = indexShape == srcShape ? nullptr : e.template alloc<int64_t>(n);
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, n,
      [&](int64_t* bad) {
        place.bad = bad;
        return place;
      },
      &failed));
  if (failed != kNoFailure) {
    return Status::invalidArgument(
        std::string(op) + ": index value " + std::to_string(readIndex(e, index, failed)) +
        " at position " + std::to_string(failed) + " is out of range [0, " +
        std::to_string(selfShape[dim]) + ") of dim " + std::to_string(dim));
  }
  job.destination = place.destination;
  job.rows = place.source;
  return segments(e, job).prefixed(op);
}

template <typename E>
Status indexAdd(E& e, void* self, const Shape& selfShape, DataType type, int dim,
                const int64_t* index, int64_t indexCount, const void* source,
                const Shape& sourceShape, double alpha) {
  DETCOLL_RETURN_IF_ERROR(checkIndexAddShapes(selfShape, &dim, indexCount, sourceShape));
  DETCOLL_RETURN_IF_ERROR(checkAlpha("index_add", type, alpha));
  const int64_t m = selfShape.empty() ? 1 : selfShape[dim];
  const int64_t inner = product(selfShape, dim + 1);
  SegmentJob job;
  job.destination = index;
  job.n = indexCount;
  job.destinations = m;
  job.values = source;
  job.type = type;
  job.rowStride = inner;
  job.scale = alpha;
  job.out = self;
  job.outRowStride = inner;
  job.columns = inner;
  job.initFromOutput = true;
  job.slices = product(selfShape, 0, dim);
  job.valuesOuter = indexCount * inner;
  job.outOuter = m * inner;
  return segments(e, job).prefixed("index_add");
}

template <typename E>
Status sparseDenseMatmul(E& e, void* out, int64_t outRows, DataType type, const int64_t* rows,
                         const int64_t* cols, const void* values, int64_t nnz, const void* dense,
                         int64_t denseRows, int64_t columns) {
  const char* op = "sparse_dense_matmul";
  DETCOLL_RETURN_IF_ERROR(
      checkSparseDense(out, outRows, type, rows, cols, values, nnz, dense, denseRows, columns));
  // The rows first, then the columns, as the CPU reference checks them.
  DETCOLL_RETURN_IF_ERROR(checkRange(e, rows, nnz, outRows, "rows").prefixed(op));
  DETCOLL_RETURN_IF_ERROR(checkRange(e, cols, nnz, denseRows, "cols").prefixed(op));
  SegmentJob job;
  job.destination = rows;
  job.n = nnz;
  job.destinations = outRows;
  job.what = "rows";
  job.values = dense;
  job.type = type;
  job.rowStride = columns;
  job.rows = cols;
  job.weights = nnz > 0 ? widen(e, values, type, nnz) : nullptr;
  job.out = out;
  job.outRowStride = columns;
  job.columns = columns;
  if (nnz == 0) {  // no sources: every output is 0
    kernels::visitType(type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      e.launch(outRows * columns, FillZeroBody<T>{static_cast<T*>(out)});
    });
    return e.status();
  }
  return segments(e, job).prefixed(op);
}

template <typename E>
Status unsortedSegmentReduce(E& e, void* out, int64_t segments_, DataType type, const void* data,
                             const Shape& dataShape, const int64_t* segmentIds, int idDims,
                             bool mean) {
  const char* op = mean ? "unsorted_segment_mean" : "unsorted_segment_sum";
  DETCOLL_RETURN_IF_ERROR(checkSegmentShapes(op, segments_, dataShape, idDims));
  const int64_t row = product(dataShape, idDims);
  SegmentJob job;
  job.destination = segmentIds;
  job.n = product(dataShape, 0, idDims);
  job.destinations = segments_;
  job.skip.negative = true;
  job.what = "segment_ids";
  job.values = data;
  job.type = type;
  job.rowStride = row;
  job.out = out;
  job.outRowStride = row;
  job.columns = row;
  job.mean = mean;
  return segments(e, job).prefixed(op);
}

template <typename E>
Status embeddingBackward(E& e, void* gradWeight, int64_t numWeights, DataType type,
                         const void* gradOutput, int64_t count, int64_t dim, const int64_t* indices,
                         int64_t paddingIdx, bool scaleGradByFreq) {
  const char* op = "embedding_backward";
  DETCOLL_RETURN_IF_ERROR(checkEmbeddingSizes(op, type, numWeights, count, dim));
  SegmentJob job;
  job.destination = indices;
  job.n = count;
  job.destinations = numWeights;
  job.skip.value = paddingIdx >= 0;
  job.skip.which = paddingIdx;
  job.what = "indices";
  job.values = gradOutput;
  job.type = type;
  job.rowStride = dim;
  job.inverseCount = scaleGradByFreq;
  job.out = gradWeight;
  job.outRowStride = dim;
  job.columns = dim;
  return segments(e, job).prefixed(op);
}

template <typename E>
Status embeddingBagBackward(E& e, void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* indices, int64_t count, const int64_t* offsets,
                            bool mean, const void* perSampleWeights, int64_t paddingIdx) {
  const char* op = "embedding_bag_backward";
  DETCOLL_RETURN_IF_ERROR(checkEmbeddingSizes(op, type, numWeights, count, dim));
  if (bags < 0)
    return Status::invalidArgument(std::string(op) + ": bags is " + std::to_string(bags));
  if (bags > 0 && offsets == nullptr) {
    return Status::invalidArgument(std::string(op) + ": offsets is null");
  }
  if (mean && perSampleWeights != nullptr) {
    return Status::invalidArgument(std::string(op) +
                                   ": per_sample_weights need mode sum, as in PyTorch");
  }
  SegmentJob job;
  job.destination = indices;
  job.n = count;
  job.destinations = numWeights;
  job.skip.value = paddingIdx >= 0;
  job.skip.which = paddingIdx;
  job.what = "indices";
  // The indices first, as the CPU reference checks them first.
  DETCOLL_RETURN_IF_ERROR(
      checkRange(e, indices, count, numWeights, "indices", job.skip).prefixed(op));
  int64_t failed = kNoFailure;
  if (bags > 0) {
    DETCOLL_RETURN_IF_ERROR(runCheck(
        e, bags,
        [&](int64_t* bad) {
          return BagOffsetsCheckBody{offsets, bags, count, bad};
        },
        &failed));
    if (failed != kNoFailure) {
      return Status::invalidArgument(
          std::string(op) + ": offsets[" + std::to_string(failed) +
          "] = " + std::to_string(readIndex(e, offsets, failed)) +
          " breaks the rule 0 = offsets[0] <= offsets[1] <= ... <= " + std::to_string(count));
    }
  }
  if (bags == 0 && count > 0) {
    return Status::invalidArgument(std::string(op) + ": indices but no bags");
  }
  int64_t* rowOf = e.template alloc<int64_t>(count);
  const bool wide = type == DataType::kFloat64;
  void* weightOf = nullptr;
  if (mean) {
    weightOf = wide ? static_cast<void*>(e.template alloc<double>(count))
                    : static_cast<void*>(e.template alloc<float>(count));
  }
  if (wide) {
    e.launch(bags, BagBody<double>{offsets, bags, count, indices, job.skip, rowOf,
                                   static_cast<double*>(weightOf)});
  } else {
    e.launch(bags, BagBody<float>{offsets, bags, count, indices, job.skip, rowOf,
                                  static_cast<float*>(weightOf)});
  }
  job.values = gradOutput;
  job.type = type;
  job.rowStride = dim;
  job.rows = rowOf;
  job.weights =
      mean ? weightOf
           : (perSampleWeights != nullptr ? widen(e, perSampleWeights, type, count) : nullptr);
  job.out = gradWeight;
  job.outRowStride = dim;
  job.columns = dim;
  return segments(e, job).prefixed(op);
}

template <typename E>
Status bincount(E& e, void* out, int64_t* outLength, DataType type, const int64_t* input,
                int64_t count, const void* weights, int64_t minlength) {
  const char* op = "bincount";
  DETCOLL_RETURN_IF_ERROR(checkBincount(type, input, count, weights, minlength, outLength, out));
  int64_t lo = 0, hi = -1;
  if (count > 0) e.minMax(input, count, &lo, &hi);
  DETCOLL_RETURN_IF_ERROR(e.status());
  if (lo < 0) {
    // The first negative entry, as the CPU reference names it.
    int64_t failed = kNoFailure;
    DETCOLL_RETURN_IF_ERROR(runCheck(
        e, count,
        [&](int64_t* bad) {
          return RangeCheckBody{input, std::numeric_limits<int64_t>::max(), Skip{}, bad};
        },
        &failed));
    return Status::invalidArgument(std::string(op) + ": input[" + std::to_string(failed) + "] = " +
                                   std::to_string(readIndex(e, input, failed)) + " is negative");
  }
  int64_t length = 0;
  DETCOLL_RETURN_IF_ERROR(bincountLength(hi, minlength, &length));
  *outLength = length;
  if (out == nullptr) return Status::ok();
  SegmentJob job;
  job.destination = input;
  job.n = count;
  job.destinations = *outLength;
  job.type = type;
  job.out = out;
  if (weights != nullptr) {
    job.values = weights;
  } else {  // counts: every source is the int64 1
    int64_t* ones = e.template alloc<int64_t>(count);
    e.launch(count, FillOneBody{ones});
    job.values = ones;
  }
  return segments(e, job).prefixed(op);
}

// weightedScatter (scatter.h): the planes are the segment engine's outer slices; destination and
// rows are checked in the CPU reference's order.
template <typename E>
Status weightedScatter(E& e, void* out, int64_t planes, int64_t outInner, DataType type,
                       const int64_t* destination, int64_t n, const void* values,
                       int64_t valuesInner, const int64_t* rows, const void* weights) {
  const char* op = "weighted_scatter";
  DETCOLL_RETURN_IF_ERROR(checkWeightedScatter(op, out, planes, outInner, type, destination, n,
                                               values, valuesInner, rows));
  DETCOLL_RETURN_IF_ERROR(checkRange(e, destination, n, outInner, "destination").prefixed(op));
  if (rows != nullptr) {
    DETCOLL_RETURN_IF_ERROR(checkRange(e, rows, n, valuesInner, "rows").prefixed(op));
  }
  SegmentJob job;
  job.destination = destination;
  job.n = n;
  job.destinations = outInner;
  job.what = "destination";
  job.values = values;
  job.type = type;
  job.rowStride = 1;
  job.rows = rows;
  job.weights = weights;
  job.out = out;
  job.outRowStride = 1;
  job.columns = 1;
  job.slices = planes;
  job.valuesOuter = valuesInner;
  job.outOuter = outInner;
  return segments(e, job).prefixed(op);
}

}  // namespace detcoll::kernels::ops::bodies
