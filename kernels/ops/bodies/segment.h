#pragma once

// The segment engine of the scatter family (kernels/ops/segment.h defines its bits) on an
// executor (bodies/executor.h): keys = destination (skipped sources get the key `destinations`),
// a stable radix sort of (key, source position) pairs, segment offsets by binary search, then one
// thread per (destination, column) adds the destination's sources in sorted order — increasing
// source position, the order of the CPU reference. Where each source is one value (1-D
// scatter_add, unweighted bincount) the values themselves ride the sort and the reduction reads
// them in order.

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops::bodies {

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

// array[0 .. n) against [0, limit) on the executor (entries `skip` names pass): the first entry
// outside named as `what`, in checkSegments' words.
template <typename E>
Status checkRange(E& e, const int64_t* array, int64_t n, int64_t limit, const char* what,
                  Skip skip = {}) {
  if (n <= 0) return Status::ok();
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, n,
      [&](int64_t* bad) {
        return RangeCheckBody{array, limit, skip, bad};
      },
      &failed));
  if (failed == kNoFailure) return Status::ok();
  return outOfRange(what, failed, readIndex(e, array, failed), limit);
}

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
      *target = k == 0 ? kernels::Traits<T>::store(A{})
                       : kernels::Traits<T>::store(acc / static_cast<A>(k));
    } else {
      *target = kernels::Traits<T>::store(acc);
    }
  }
};

// Per-source weights converted exactly to the accumulation type.
template <typename T>
struct WidenBody {
  const T* in;
  typename kernels::Traits<T>::Acc* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = kernels::Traits<T>::load(in[i]); }
};

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

}  // namespace detcoll::kernels::ops::bodies
