#pragma once

// writeLast, max_unpool and histc (kernels/ops/writes.h) on an executor. writeLast sorts the
// sources by destination (stable: within a destination, in source order) and each destination's
// last source writes its row; every other source writes nothing, so no two threads write one
// element. histc finds the input's range per chunk when it must, bins every value with the CPU
// reference's body, then counts the bins with the segment engine (exact int64).

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/ops/bodies/segment.h"
#include "kernels/ops/taps.h"
#include "kernels/ops/writes.h"

namespace detcoll::kernels::ops::bodies {

// Sorted position k is the last of its destination's run: it writes element c of its row.
// U: an unsigned word of the element's size, so that every dtype's bits are copied as they are.
template <typename U, typename I>
struct LastOfRunBody {
  const I* sortedKeys;
  const I* order;
  int64_t n, width;
  const U* values;
  U* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t k = t / width, c = t % width;
    if (k + 1 < n && sortedKeys[k + 1] == sortedKeys[k]) return;
    out[static_cast<int64_t>(sortedKeys[k]) * width + c] =
        values[static_cast<int64_t>(order[k]) * width + c];
  }
};

template <typename U>
struct ZeroBody {
  U* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = U(0); }
};

template <typename T>
struct CountsToBody {
  const int64_t* counts;
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t b) const {
    using A = typename kernels::Traits<T>::Acc;
    out[b] = kernels::Traits<T>::store(static_cast<A>(counts[b]));
  }
};

// The unsigned word of a dtype's size: f(TypeTag<U>{}).
template <typename F>
void visitWord(DataType type, F&& f) {
  switch (dataTypeSize(type)) {
    case 2:
      return f(kernels::TypeTag<uint16_t>{});
    case 4:
      return f(kernels::TypeTag<uint32_t>{});
    default:
      return f(kernels::TypeTag<uint64_t>{});
  }
}

template <typename E, typename I>
Status writeLastSorted(E& e, void* out, int64_t rows, int64_t width, DataType type,
                       const int64_t* destination, int64_t n, const void* values) {
  I* keys = e.template alloc<I>(n);
  I* sortedKeys = e.template alloc<I>(n);
  I* positions = e.template alloc<I>(n);
  I* order = e.template alloc<I>(n);
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, n,
      [&](int64_t* bad) {
        return SegmentKeyBody<I>{destination, rows, Skip{}, keys, positions, bad};
      },
      &failed));
  if (failed != kNoFailure) {
    return outOfRange("destination", failed, readIndex(e, destination, failed), rows);
  }
  if (width == 0) return Status::ok();
  e.sortPairs(keys, sortedKeys, positions, order, n, keyBits(rows));
  visitWord(type, [&](auto tag) {
    using U = typename decltype(tag)::type;
    e.launch(n * width, LastOfRunBody<U, I>{sortedKeys, order, n, width,
                                            static_cast<const U*>(values), static_cast<U*>(out)});
  });
  return e.status();
}

template <typename E>
Status writeLast(E& e, void* out, int64_t rows, int64_t width, DataType type,
                 const int64_t* destination, int64_t n, const void* values) {
  const char* op = "write_last";
  DETCOLL_RETURN_IF_ERROR(checkWriteLast(out, rows, width, destination, n, values));
  if (n == 0) return Status::ok();
  const bool narrow = n < (int64_t{1} << 32) && rows < (int64_t{1} << 32) - 1;
  return (narrow ? writeLastSorted<E, uint32_t>(e, out, rows, width, type, destination, n, values)
                 : writeLastSorted<E, uint64_t>(e, out, rows, width, type, destination, n, values))
      .prefixed(op);
}

// Plane p's sources (indices [planes, per], each a position among a plane's `inner`) as the
// destinations p · inner + index, on the executor, once every index is checked (the error names
// "indices", as checkSegments does).
template <typename E>
Status planeDestinations(E& e, const int64_t* indices, int64_t planes, int64_t per, int64_t inner,
                         int64_t** destination) {
  const int64_t n = planes * per;
  DETCOLL_RETURN_IF_ERROR(checkRange(e, indices, n, inner, "indices"));
  *destination = e.template alloc<int64_t>(n);
  e.launch(n, PlaneOffsets{indices, inner, per, *destination});
  return e.status();
}

template <typename E>
Status maxUnpool(E& e, void* out, const void* input, const int64_t* indices, DataType type,
                 int64_t planes, int64_t inputs, int64_t outputs) {
  const char* op = "max_unpool";
  DETCOLL_RETURN_IF_ERROR(checkMaxUnpool(out, input, indices, planes, inputs, outputs));
  int64_t* destination = nullptr;
  DETCOLL_RETURN_IF_ERROR(
      planeDestinations(e, indices, planes, inputs, outputs, &destination).prefixed(op));
  visitWord(type, [&](auto tag) {
    using U = typename decltype(tag)::type;
    e.launch(planes * outputs, ZeroBody<U>{static_cast<U*>(out)});
  });
  DETCOLL_RETURN_IF_ERROR(e.status());
  return writeLast(e, out, planes * outputs, 1, type, destination, planes * inputs, input)
      .prefixed(op);
}

template <typename E>
Status embeddingBagMaxBackward(E& e, void* gradWeight, int64_t numWeights, DataType type,
                               const void* gradOutput, int64_t bags, int64_t dim,
                               const int64_t* maximumIndices, const int64_t* bagSize,
                               int64_t paddingIdx) {
  const char* op = "embedding_bag_max_backward";
  DETCOLL_RETURN_IF_ERROR(checkEmbeddingBagMax(gradWeight, numWeights, type, gradOutput, bags, dim,
                                               maximumIndices, bagSize));
  const int64_t n = bags * dim;
  int64_t* destination = e.template alloc<int64_t>(n);
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, n,
      [&](int64_t* bad) {
        return BagMaxBody{maximumIndices, bagSize, dim, numWeights, paddingIdx, destination, bad};
      },
      &failed));
  if (failed != kNoFailure) {
    return outOfRange("maximum_indices", failed, readIndex(e, maximumIndices, failed), numWeights)
        .prefixed(op);
  }
  SegmentJob job;
  job.destination = destination;
  job.n = n;
  job.destinations = numWeights * dim;
  job.skip.negative = true;
  job.what = "maximum_indices";
  job.values = gradOutput;
  job.type = type;
  job.out = gradWeight;
  if (n == 0) {  // nothing taken: every weight's gradient is 0
    visitWord(type, [&](auto tag) {
      using U = typename decltype(tag)::type;
      e.launch(numWeights * dim, ZeroBody<U>{static_cast<U*>(gradWeight)});
    });
    return e.status();
  }
  return segments(e, job).prefixed(op);
}

template <typename E, typename T, typename W>
Status histcCount(E& e, void* out, const T* x, int64_t n, int64_t bins, W lo, W hi, bool wide) {
  int64_t* position = e.template alloc<int64_t>(n);
  e.launch(n, histcBins<T, W>(x, lo, hi, bins, position, wide));
  int64_t* ones = e.template alloc<int64_t>(n);
  e.launch(n, FillOneBody{ones});
  int64_t* counts = e.template alloc<int64_t>(bins);
  DETCOLL_RETURN_IF_ERROR(e.status());
  SegmentJob job;
  job.destination = position;
  job.n = n;
  job.destinations = bins;
  job.skip.negative = true;
  job.values = ones;
  job.type = DataType::kInt64;
  job.out = counts;
  DETCOLL_RETURN_IF_ERROR(segments(e, job));
  e.launch(bins, CountsToBody<T>{counts, static_cast<T*>(out)});
  return e.status();
}

template <typename E>
Status histc(E& e, void* out, DataType type, const void* input, int64_t n, int64_t bins, double min,
             double max) {
  DETCOLL_RETURN_IF_ERROR(checkHistc(out, type, input, n, bins));
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = typename kernels::Traits<T>::Acc;
    const T* x = static_cast<const T*>(input);
    bool any = false, nan = false;
    double low = 0, high = 0;
    if (min == max && n > 0) {  // the input's range, chunk by chunk, folded here in order
      const int64_t chunk = 4096, chunks = (n + chunk - 1) / chunk;
      double* lows = e.template alloc<double>(chunks);
      double* highs = e.template alloc<double>(chunks);
      int8_t* seen = e.template alloc<int8_t>(chunks);
      e.launch(chunks, RangeChunkBody<T>{x, n, chunk, lows, highs, seen});
      std::vector<double> l(chunks), h(chunks);
      std::vector<int8_t> s(chunks);
      e.toHost(l.data(), lows, chunks * sizeof(double));
      e.toHost(h.data(), highs, chunks * sizeof(double));
      e.toHost(s.data(), seen, chunks);
      for (int64_t c = 0; c < chunks; ++c) {
        nan = nan || (s[c] & 2) != 0;
        if (!(s[c] & 1)) continue;
        low = any && low < l[c] ? low : l[c];
        high = any && high > h[c] ? high : h[c];
        any = true;
      }
    }
    double lo = 0, hi = 0;
    W loW{}, hiW{};
    status = e.status();
    if (status.isOk()) status = histcRange(min, max, any, nan, low, high, &lo, &hi);
    if (status.isOk()) status = histcBounds<T>(type, lo, hi, &loW, &hiW);
    if (!status.isOk()) return;
    const W width = hiW - loW;
    int64_t failed = kNoFailure;
    if (width - width == W(0) && n > 0 && histcMayOverflow(loW, hiW, static_cast<W>(bins))) {
      status = runCheck(
          e, n,
          [&](int64_t* bad) {
            return HistcOverflowBody<T, W>{x, loW, hiW, static_cast<W>(bins), bad};
          },
          &failed);
      if (!status.isOk()) return;
    }
    const bool wide = !(width - width == W(0)) || failed != kNoFailure;
    status = wide ? histcCount<E, T, double>(e, out, x, n, bins, loW, hiW, true)
                  : histcCount<E, T, W>(e, out, x, n, bins, loW, hiW, false);
  });
  return status;
}

}  // namespace detcoll::kernels::ops::bodies
