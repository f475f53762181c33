#pragma once

// The deterministic ops as a data-parallel machine computes them: the formulation of the CUDA
// kernels, written once over an executor that is either the GPU (device.cu) or the host
// (serial.cc, the GPU algorithm's serial run, which CI runs). Every kernel is a body called once per
// index of a grid; no body's result depends on any other's timing, so the bits are those of the
// CPU reference (scatter.h, reduce.h) whatever the launch configuration.
//
// The scatter family: keys = destination (skipped sources get the key `destinations`), a stable
// radix sort of (key, source position) pairs, segment offsets by binary search, then one thread
// per (destination, column) adds the destination's sources in sorted order — increasing source
// position, the order of the CPU reference. Where each source is one value (1-D scatter_add,
// unweighted bincount) the values themselves ride the sort and the reduction reads them in order.
// Sums over axes: chunk sums of kChunk values, then pairwise levels, one launch a level.
//
// An Executor provides
//   T* alloc<T>(int64_t n)                     scratch freed with the executor
//   void launch(int64_t n, const Body& body)   body(i) for every i in [0, n)
//   void sortPairs(const K* keysIn, K* keysOut, const V* valuesIn, V* valuesOut, int64_t n,
//                  int endBit)                 stable by key bits [0, endBit)
//   void toHost(void* dst, const void* src, size_t bytes)
//   void toDevice(void* dst, const void* src, size_t bytes)
//   void minMax(const int64_t* x, int64_t n, int64_t* lo, int64_t* hi)
//   Status status()                            the first failure of the above, if any

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "common/host_device.h"
#include "kernels/accumulate.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/reduce.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/resample_kernels.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/segment.h"

namespace detcoll::ops::parallel {

using resample::recordFirst;

constexpr int64_t kNoFailure = std::numeric_limits<int64_t>::max();
constexpr int kMaxRank = 16;

// ---- bodies ------------------------------------------------------------------------------------

// Source s: its sort key (destination, or `destinations` when skipped) and position; a
// destination out of range (not skipped) goes to *bad.
template <typename I>
struct SegmentKeyBody {
  const int64_t* destination;
  int64_t destinations;
  Skip skip;
  I* keys;
  I* positions;
  int64_t* bad;

  DETCOLL_HOST_DEVICE void operator()(int64_t s) const {
    const int64_t d = destination[s];
    const bool skipped = (skip.value && d == skip.which) || (skip.negative && d < 0);
    if (!skipped && (d < 0 || d >= destinations)) recordFirst(bad, s);
    keys[s] = static_cast<I>(skipped || d < 0 || d >= destinations ? destinations : d);
    if (positions != nullptr) positions[s] = static_cast<I>(s);
  }
};

// Source s: a destination out of range (and not skipped) goes to *bad.
struct RangeCheckBody {
  const int64_t* destination;
  int64_t destinations;
  Skip skip;
  int64_t* bad;
  DETCOLL_HOST_DEVICE void operator()(int64_t s) const {
    const int64_t d = destination[s];
    const bool skipped = (skip.value && d == skip.which) || (skip.negative && d < 0);
    if (!skipped && (d < 0 || d >= destinations)) recordFirst(bad, s);
  }
};

struct FillOneBody {
  int64_t* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = 1; }
};

// Destination d (0 .. destinations): offsets[d] = the first sorted position whose key is >= d.
template <typename I>
struct SegmentOffsetsBody {
  const I* sortedKeys;
  int64_t n;
  int64_t* offsets;

  DETCOLL_HOST_DEVICE void operator()(int64_t d) const {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<int64_t>(sortedKeys[mid]) < d) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    offsets[d] = lo;
  }
};

// What a source contributes, for the reduction. With order null the values are already in
// sorted order (values[j] for sorted position j); otherwise source s = order[j] reads row
// rows ? rows[s] : s of values. weights (per source, in the accumulation type) and scale as in
// SegmentSources; inverseCount weighs each source by 1 / (its destination's source count).
template <typename T, typename I>
struct SegmentReduceBody {
  using A = typename kernels::Traits<T>::Acc;
  const I* order;
  const int64_t* offsets;
  const T* values;
  int64_t rowStride;
  const int64_t* rows;
  const A* weights;
  bool scaled;
  A scale;
  bool inverseCount;
  T* out;
  int64_t outRowStride;
  int64_t columns;
  bool initFromOutput;
  bool mean;
  // index_add's outer slices: slice o reads values + o * valuesOuter, writes out + o * outOuter.
  int64_t destinations;
  int64_t valuesOuter, outOuter;

  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t perSlice = destinations * columns;
    const int64_t slice = t / perSlice, within = t % perSlice;
    const int64_t d = within / columns, c = within % columns;
    const int64_t begin = offsets[d], end = offsets[d + 1];
    T* target = out + slice * outOuter + d * outRowStride + c;
    if (end == begin && initFromOutput) return;  // unchanged, bit for bit
    const T* base = values + slice * valuesOuter;
    A acc = initFromOutput ? kernels::Traits<T>::load(*target) : A{};
    const A inverse = inverseCount ? A(1) / static_cast<A>(end - begin) : A(1);
    for (int64_t j = begin; j < end; ++j) {
      if (order == nullptr) {
        acc = kernels::wrapAdd(acc, kernels::Traits<T>::load(base[j]));
        continue;
      }
      const int64_t s = static_cast<int64_t>(order[j]);
      const A v = kernels::Traits<T>::load(base[(rows != nullptr ? rows[s] : s) * rowStride + c]);
      if (weights == nullptr && !scaled && !inverseCount) {
        acc = kernels::wrapAdd(acc, v);
      } else {
        A w = weights != nullptr ? weights[s] : (inverseCount ? inverse : A(1));
        if (scaled) w = weights != nullptr ? kernels::wrapMultiply(w, scale) : scale;
        acc = kernels::wrapAdd(acc, kernels::wrapMultiply(w, v));
      }
    }
    if (mean) {
      const int64_t k = end - begin;
      *target = k == 0 ? kernels::Traits<T>::round(A{})
                       : kernels::Traits<T>::round(acc / static_cast<A>(k));
    } else {
      *target = kernels::Traits<T>::round(acc);
    }
  }
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

// Per-source weights converted exactly to the accumulation type.
template <typename T>
struct WidenBody {
  const T* in;
  typename kernels::Traits<T>::Acc* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = kernels::Traits<T>::load(in[i]); }
};

// embedding_bag's offsets: the first bag breaking 0 = offsets[0] <= ... <= count goes to *bad.
struct BagOffsetsCheckBody {
  const int64_t* offsets;
  int64_t bags, count;
  int64_t* bad;
  DETCOLL_HOST_DEVICE void operator()(int64_t b) const {
    const int64_t begin = offsets[b], end = b + 1 < bags ? offsets[b + 1] : count;
    if ((b == 0 && begin != 0) || begin < 0 || end < begin || end > count) recordFirst(bad, b);
  }
};

// The tree of reduce.h. Chunk sums: element (i, o) of sums[chunks][m] is chunk i of output o.
// oFastest puts consecutive outputs in consecutive threads (coalesced when outputs are
// contiguous in the input); otherwise consecutive chunks are.
template <typename T>
struct ChunkSumBody {
  using A = typename kernels::Traits<T>::Acc;
  const T* in;
  const int64_t* outBase;
  const int64_t* offsets;
  int64_t k, m, chunks;
  bool oFastest;
  A* sums;

  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t i = oFastest ? t / m : t % chunks, o = oFastest ? t % m : t / chunks;
    const T* base = in + outBase[o];
    const int64_t start = i * kChunk, end = start + kChunk < k ? start + kChunk : k;
    A s = kernels::Traits<T>::load(base[offsets[start]]);
    for (int64_t j = start + 1; j < end; ++j) {
      s = kernels::wrapAdd(s, kernels::Traits<T>::load(base[offsets[j]]));
    }
    sums[i * m + o] = s;
  }
};

// One pairwise level: next[i][o] = sums[2i][o] + sums[2i + 1][o], an odd last passed up.
template <typename A>
struct PairLevelBody {
  const A* sums;
  int64_t count, m;
  A* next;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t i = t / m, o = t % m;
    next[t] = 2 * i + 1 < count ? kernels::wrapAdd(sums[2 * i * m + o], sums[(2 * i + 1) * m + o])
                                : sums[2 * i * m + o];
  }
};

template <typename T>
struct RoundBody {
  const typename kernels::Traits<T>::Acc* sums;  // null: every output is an empty sum
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t o) const {
    using A = typename kernels::Traits<T>::Acc;
    out[o] = kernels::Traits<T>::round(sums != nullptr ? sums[o] : A{});
  }
};

// ---- drivers -----------------------------------------------------------------------------------

// The first failure a check body recorded, read back.
template <typename E>
int64_t firstFailure(E& e, const int64_t* slot) {
  int64_t v = kNoFailure;
  e.toHost(&v, slot, sizeof(v));
  return v;
}

template <typename E>
int64_t* failureSlot(E& e) {
  int64_t* slot = e.template alloc<int64_t>(1);
  const int64_t none = kNoFailure;
  e.toDevice(slot, &none, sizeof(none));
  return slot;
}

// Runs the check body make(slot) over [0, n); *failed gets the first position it recorded
// (kNoFailure: none).
template <typename E, typename MakeBody>
Status runCheck(E& e, int64_t n, const MakeBody& make, int64_t* failed) {
  int64_t* slot = failureSlot(e);
  e.launch(n, make(slot));
  *failed = firstFailure(e, slot);
  return e.status();
}

template <typename E>
int64_t readIndex(E& e, const int64_t* array, int64_t at) {
  int64_t v = 0;
  e.toHost(&v, array + at, sizeof(v));
  return v;
}

// The number of key bits that hold 0 .. destinations.
inline int keyBits(int64_t destinations) {
  int bits = 1;
  while (bits < 64 && (static_cast<uint64_t>(destinations) >> bits) != 0) ++bits;
  return bits;
}

// The segment engine: sources s in [0, n) with destination[s] (device), reduced into out.
// `what` names destination[] in the range message, as checkSegments does.
struct SegmentJob {
  const int64_t* destination = nullptr;
  int64_t n = 0, destinations = 0;
  Skip skip;
  const char* what = "index";
  const void* values = nullptr;
  DataType type = DataType::kFloat32;
  int64_t rowStride = 1;
  const int64_t* rows = nullptr;
  const void* weights = nullptr;  // per source, in the accumulation type
  double scale = 1.0;
  bool inverseCount = false;
  void* out = nullptr;
  int64_t outRowStride = 1, columns = 1;
  bool initFromOutput = false, mean = false;
  int64_t slices = 1, valuesOuter = 0, outOuter = 0;
};

template <typename E, typename I, typename T>
Status runSegments(E& e, const SegmentJob& job) {
  using A = typename kernels::Traits<T>::Acc;
  const int64_t n = job.n, m = job.destinations;
  // Values ride the sort when each source is one value read in place.
  const bool carry = job.columns == 1 && job.rows == nullptr && job.weights == nullptr &&
                     job.scale == 1.0 && !job.inverseCount && job.slices == 1 && job.rowStride == 1;
  I* keys = e.template alloc<I>(n);
  I* sortedKeys = e.template alloc<I>(n);
  I* positions = carry ? nullptr : e.template alloc<I>(n);
  I* order = carry ? nullptr : e.template alloc<I>(n);
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, n,
      [&](int64_t* bad) {
        return SegmentKeyBody<I>{job.destination, m, job.skip, keys, positions, bad};
      },
      &failed));
  if (failed != kNoFailure) {
    return outOfRange(job.what, failed, readIndex(e, job.destination, failed), m);
  }
  const T* values = static_cast<const T*>(job.values);
  if (carry) {
    T* sortedValues = e.template alloc<T>(n);
    e.sortPairs(keys, sortedKeys, values, sortedValues, n, keyBits(m));
    values = sortedValues;
  } else {
    e.sortPairs(keys, sortedKeys, positions, order, n, keyBits(m));
  }
  int64_t* offsets = e.template alloc<int64_t>(m + 1);
  e.launch(m + 1, SegmentOffsetsBody<I>{sortedKeys, n, offsets});
  SegmentReduceBody<T, I> body{order,
                               offsets,
                               values,
                               job.rowStride,
                               job.rows,
                               static_cast<const A*>(job.weights),
                               job.scale != 1.0,
                               static_cast<A>(job.scale),
                               job.inverseCount,
                               static_cast<T*>(job.out),
                               job.outRowStride,
                               job.columns,
                               job.initFromOutput,
                               job.mean,
                               m,
                               job.valuesOuter,
                               job.outOuter};
  e.launch(job.slices * m * job.columns, body);
  return e.status();
}

template <typename E>
Status segments(E& e, const SegmentJob& job) {
  if (job.n < 0 || job.destinations < 0) {
    return Status::invalidArgument(std::string(job.what) + ": negative size");
  }
  if (job.destinations == 0 || job.columns == 0 || job.slices == 0) {
    // Nothing to write; the indices must still be in range (all skipped or none).
    if (job.n == 0) return Status::ok();
  }
  const bool narrow = job.n < (int64_t{1} << 32) && job.destinations < (int64_t{1} << 32) - 1;
  Status status;
  kernels::visitType(job.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    status = narrow ? runSegments<E, uint32_t, T>(e, job) : runSegments<E, uint64_t, T>(e, job);
  });
  return status;
}

// Per-source weights of a dtype, widened to its accumulation type on the executor.
template <typename E>
const void* widen(E& e, const void* weights, DataType type, int64_t n) {
  const void* result = nullptr;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* out = e.template alloc<typename kernels::Traits<T>::Acc>(n);
    e.launch(n, WidenBody<T>{static_cast<const T*>(weights), out});
    result = out;
  });
  return result;
}

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
  if (bags < 0) return Status::invalidArgument(std::string(op) + ": negative size");
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
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, count,
      [&](int64_t* bad) {
        return RangeCheckBody{indices, numWeights, job.skip, bad};
      },
      &failed));
  if (failed != kNoFailure) {
    return outOfRange("indices", failed, readIndex(e, indices, failed), numWeights).prefixed(op);
  }
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
  if (count < 0 || minlength < 0 || outLength == nullptr) {
    return Status::invalidArgument(std::string(op) + ": negative size or no outLength");
  }
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
  *outLength = minlength > hi + 1 ? minlength : hi + 1;
  if (out == nullptr) return Status::ok();
  if (weights == nullptr && type != DataType::kInt64) {
    return Status::invalidArgument(std::string(op) + ": counts are int64");
  }
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

template <typename E>
Status sumOverAxes(E& e, const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out) {
  SumPlan plan;
  DETCOLL_RETURN_IF_ERROR(planSum(shape, std::move(axes), &plan).prefixed("sum"));
  const int64_t m = static_cast<int64_t>(plan.outBase.size());
  const int64_t k = static_cast<int64_t>(plan.offsets.size());
  if (m == 0) return Status::ok();
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename kernels::Traits<T>::Acc;
    if (k == 0) {
      e.launch(m, RoundBody<T>{nullptr, static_cast<T*>(out)});
      status = e.status();
      return;
    }
    int64_t* outBase = e.template alloc<int64_t>(m);
    int64_t* offsets = e.template alloc<int64_t>(k);
    e.toDevice(outBase, plan.outBase.data(), m * sizeof(int64_t));
    e.toDevice(offsets, plan.offsets.data(), k * sizeof(int64_t));
    int64_t chunks = (k + kChunk - 1) / kChunk;
    A* sums = e.template alloc<A>(chunks * m);
    e.launch(chunks * m, ChunkSumBody<T>{static_cast<const T*>(in), outBase, offsets, k, m, chunks,
                                         plan.outputsContiguous, sums});
    if (chunks > 1) {
      A* next = e.template alloc<A>(((chunks + 1) / 2) * m);
      while (chunks > 1) {
        const int64_t up = (chunks + 1) / 2;
        e.launch(up * m, PairLevelBody<A>{sums, chunks, m, next});
        std::swap(sums, next);
        chunks = up;
      }
    }
    e.launch(m, RoundBody<T>{sums, static_cast<T*>(out)});
    status = e.status();
  });
  return status;
}

template <typename E>
Status biasAddGrad(E& e, const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out) {
  std::vector<int> axes;
  DETCOLL_RETURN_IF_ERROR(biasAddAxes(shape, channelsFirst, &axes));
  return sumOverAxes(e, grad, shape, type, axes, out).prefixed("bias_add_grad");
}

// ---- resampling: the bodies of resample_kernels.h over a grid, tables copied to the executor --

template <typename E, typename A>
resample::LinearAxisView<A> copyAxis(E& e, const resample::LinearAxisTable<A>& t) {
  auto copy = [&e](const auto& v) {
    using V = typename std::decay_t<decltype(v)>::value_type;
    V* p = e.template alloc<V>(static_cast<int64_t>(v.size()));
    if (!v.empty()) e.toDevice(p, v.data(), v.size() * sizeof(V));
    return static_cast<const V*>(p);
  };
  return {copy(t.l0), copy(t.l1), copy(t.offsets), copy(t.outputs), copy(t.masks)};
}

template <typename E>
Status bilinear2dBackward(E& e, void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& s) {
  DETCOLL_RETURN_IF_ERROR(checkBilinear(gradInput, gradOutput, type, s));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      using A = typename kernels::Traits<T>::Acc;
      const auto h =
          resample::linearAxis<A>(s.inHeight, s.outHeight, s.alignCorners, s.scaleHeight);
      const auto w = resample::linearAxis<A>(s.inWidth, s.outWidth, s.alignCorners, s.scaleWidth);
      e.launch(s.planes * s.inHeight * s.inWidth,
               resample::BilinearBackwardBody<T>{
                   static_cast<T*>(gradInput), static_cast<const T*>(gradOutput), s.inHeight,
                   s.inWidth, s.outHeight, s.outWidth, copyAxis(e, h), copyAxis(e, w)});
    }
  });
  return e.status();
}

template <typename E>
Status maxPool2d(E& e, void* out, int64_t* indices, const void* in, DataType type,
                 const Pool2d& p) {
  int64_t oh = 0, ow = 0;
  DETCOLL_RETURN_IF_ERROR(checkMaxPool("max_pool2d", type, p, {out, indices, in}, &oh, &ow));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      e.launch(p.planes * oh * ow, resample::MaxPoolForwardBody<T>{static_cast<T*>(out), indices,
                                                                   static_cast<const T*>(in),
                                                                   resample::geometry(p, oh, ow)});
    }
  });
  return e.status();
}

template <typename E>
Status maxPool2dBackward(E& e, void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& p) {
  const char* op = "max_pool2d_backward";
  int64_t oh = 0, ow = 0;
  DETCOLL_RETURN_IF_ERROR(checkMaxPool(op, type, p, {gradInput, gradOutput, indices}, &oh, &ow));
  const resample::PoolGeometry g = resample::geometry(p, oh, ow);
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, p.planes * oh * ow,
      [&](int64_t* bad) {
        return resample::MaxPoolIndexCheckBody{indices, g, bad};
      },
      &failed));
  if (failed != kNoFailure) {
    return badPoolIndex(op, failed, readIndex(e, indices, failed), p, oh, ow);
  }
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      e.launch(p.planes * p.inHeight * p.inWidth,
               resample::MaxPoolBackwardBody<T>{static_cast<T*>(gradInput),
                                                static_cast<const T*>(gradOutput), indices, g});
    }
  });
  return e.status();
}

}  // namespace detcoll::ops::parallel
