#pragma once

// Writes through indices whose CUDA kernels race or add with atomicAdd, and histc (docs/design.md,
// "Patching torch's operators"): the CPU reference, whose bits the data-parallel formulation
// (bodies/writes.h) and the CUDA kernels equal.
//
// writeLast: row destination[s] of out [rows, width] is replaced by row s of values [n, width],
// for s = 0 .. n - 1 in order, so that where destinations repeat the last s is what stays; rows no
// source names keep their contents. The bytes are copied, so every dtype is exact. It is
// max_unpool (each plane's indices offset to the plane) and index_put_ / put_ without accumulate.
//
// histc: bins equal bins over [min, max]. min == max: the input's own range (its smallest and
// largest values; a NaN makes it [nan, nan], refused); still equal: one wider on each side. The
// range must then be finite with min < max, and stay so in the dtype. A value x counts in bin
// floor((x - lo) · bins / (hi - lo)), evaluated in that order in W (float for float32, float16 and
// bfloat16, whose conversions are exact; double for float64), lo and hi being min and max rounded
// to the dtype; the maximum goes to the last bin; values outside [lo, hi] and NaN are not counted.
// Where (x - lo) · bins or hi - lo overflows W for some counted x, every value is evaluated in
// double instead. The counts are exact int64, converted to the dtype once. (torch 2's CPU and CUDA
// formula; torch 1.13's CPU kernel divides before it multiplies.)

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops {

Status writeLast(void* out, int64_t rows, int64_t width, DataType type, const int64_t* destination,
                 int64_t n, const void* values);

// The argument checks (all but the indices' range) the CPU reference and the executor's
// formulation share, so that both refuse in the same words.
Status checkWriteLast(const void* out, int64_t rows, int64_t width, const int64_t* destination,
                      int64_t n, const void* values);
Status checkMaxUnpool(const void* out, const void* input, const int64_t* indices, int64_t planes,
                      int64_t inputs, int64_t outputs);
Status checkHistc(const void* out, DataType type, const void* input, int64_t n, int64_t bins);

// max_unpool (2-D, 3-D): out [planes, outputs] zeroed, then plane p's input value i written at
// p · outputs + indices[p · inputs + i], the last where a plane's indices repeat.
Status maxUnpool(void* out, const void* input, const int64_t* indices, DataType type,
                 int64_t planes, int64_t inputs, int64_t outputs);

// embedding_bag's weight gradient in mode max: gradWeight [numWeights, dim] from gradOutput
// [bags, dim]; (b, c) adds gradOutput[b][c] into row maximumIndices[b][c], column c, where bag b
// is not empty (bagSize[b] > 0) and the row is neither negative nor paddingIdx (< 0: none);
// sources in row-major order, each destination's from zero in the accumulation type, rounded
// once. A taken row >= numWeights is refused by its position.
Status embeddingBagMaxBackward(void* gradWeight, int64_t numWeights, DataType type,
                               const void* gradOutput, int64_t bags, int64_t dim,
                               const int64_t* maximumIndices, const int64_t* bagSize,
                               int64_t paddingIdx, int threads);
Status checkEmbeddingBagMax(const void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* maximumIndices, const int64_t* bagSize);

// Source t = (b, c): its destination row · dim + c, or -1 where not taken; a taken row outside
// the weights goes to *bad.
struct BagMaxBody {
  const int64_t *rows, *bagSize;
  int64_t dim, numWeights, paddingIdx;
  int64_t *destination, *bad;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t r = rows[t];
    const bool taken = bagSize[t / dim] > 0 && r >= 0 && r != paddingIdx;
    if (taken && r >= numWeights) resample::recordFirst(bad, t);
    destination[t] = taken && r < numWeights ? r * dim + t % dim : -1;
  }
};

// histc of n values into out [bins], in the dtype (floating point).
Status histc(void* out, DataType type, const void* input, int64_t n, int64_t bins, double min,
             double max);

// The range histc bins over: [*lo, *hi] from min and max and, when they are equal, the input's
// range (any: the input has a non-NaN value, low and high its smallest and largest; nan: it has
// a NaN, which makes that range NaN, refused as torch refuses it), checked.
Status histcRange(double min, double max, bool any, bool nan, double low, double high, double* lo,
                  double* hi);

// Chunk c of the input: its smallest and largest non-NaN values (as double); any[c] has bit 0
// set when it has one, bit 1 when it has a NaN.
template <typename T>
struct RangeChunkBody {
  const T* input;
  int64_t n, chunk;
  double *low, *high;
  int8_t* any;
  DETCOLL_HOST_DEVICE void operator()(int64_t c) const {
    const int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    bool seen = false, nan = false;
    double lo = 0, hi = 0;
    for (int64_t i = c * chunk; i < end; ++i) {
      const double v = static_cast<double>(kernels::Traits<T>::load(input[i]));
      if (v != v) {
        nan = true;
        continue;
      }
      lo = seen && lo < v ? lo : v;
      hi = seen && hi > v ? hi : v;
      seen = true;
    }
    low[c] = lo;
    high[c] = hi;
    any[c] = static_cast<int8_t>((seen ? 1 : 0) | (nan ? 2 : 0));
  }
};

// Value i's bin (-1: not counted), in W, the bounds and the multiplier already rounded to W.
// shrink scales the value and lo before they are subtracted (width = hi · shrink - lo · shrink):
// 1 in general, which leaves the formula (v - lo) · bins / width as it is; 2^-64 where even
// double's product overflows (histcBins), exact while nothing underflows, so the same bins.
template <typename T, typename W>
struct HistcBinBody {
  const T* input;
  W lo, hi, width, bins, last;  // last = bins - 1, rounded to W
  int64_t lastBin;              // bins - 1
  int64_t* position;
  W shrink = W(1);
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    const W v = static_cast<W>(kernels::Traits<T>::load(input[i]));
    if (!(v >= lo && v <= hi)) {
      position[i] = -1;
      return;
    }
    // The last bin in integers: `last` (bins - 1 in W) can round up to bins where bins > 2^24.
    const W q = (v * shrink - lo * shrink) * bins / width;
    const int64_t k = q >= last ? lastBin : static_cast<int64_t>(q);
    position[i] = k < lastBin ? k : lastBin;
  }
};

// Value i, counted in W, with (x - lo) · bins not finite: recorded in *bad (recordFirst).
template <typename T, typename W>
struct HistcOverflowBody {
  const T* input;
  W lo, hi, bins;
  int64_t* bad;
  DETCOLL_HOST_DEVICE bool overflows(int64_t i) const {
    const W v = static_cast<W>(kernels::Traits<T>::load(input[i]));
    if (!(v >= lo && v <= hi)) return false;
    const W scaled = (v - lo) * bins;
    return !(scaled - scaled == W(0));  // inf or NaN
  }
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    if (overflows(i)) resample::recordFirst(bad, i);
  }
};

// The bin body over [lo, hi] for the values x; wide (W double, where W's own product overflows)
// takes the 2^-64 scale.
template <typename T, typename W>
HistcBinBody<T, W> histcBins(const T* x, W lo, W hi, int64_t bins, int64_t* position, bool wide) {
  const W shrink = wide ? W(5.421010862427522e-20) : W(1);  // 2^-64
  return HistcBinBody<T, W>{x,
                            lo,
                            hi,
                            hi * shrink - lo * shrink,
                            static_cast<W>(bins),
                            static_cast<W>(bins - 1),
                            bins - 1,
                            position,
                            shrink};
}

// Whether a value of [lo, hi] can scale past W's range, so that the values need the check above:
// only where (hi - lo) · bins does, since rounding is monotonic (v - lo <= hi - lo).
template <typename W>
DETCOLL_HOST_DEVICE bool histcMayOverflow(W lo, W hi, W bins) {
  const W span = (hi - lo) * bins;
  return !(span - span == W(0));
}

// histc's range [lo, hi] rounded to the dtype T and read in W (*loW, *hiW): refused where it is
// no longer finite with lo < hi.
template <typename T>
Status histcBounds(DataType type, double lo, double hi, typename kernels::Traits<T>::Acc* loW,
                   typename kernels::Traits<T>::Acc* hiW) {
  using W = typename kernels::Traits<T>::Acc;
  *loW = kernels::Traits<T>::load(kernels::Traits<T>::round(static_cast<W>(lo)));
  *hiW = kernels::Traits<T>::load(kernels::Traits<T>::round(static_cast<W>(hi)));
  const bool finite = *loW - *loW == W(0) && *hiW - *hiW == W(0);
  if (finite && *loW < *hiW) return Status::ok();
  return Status::invalidArgument("histc: the range [" + showNumber(lo) + ", " + showNumber(hi) +
                                 "] is " + (finite ? "empty" : "not finite") + " in " +
                                 dataTypeName(type));
}

}  // namespace detcoll::kernels::ops
