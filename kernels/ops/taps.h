#pragma once

// The backward of reflection and replication padding, of linear, trilinear and nearest upsampling
// and of average and max pooling, as taps (docs/design.md, "Patching torch's operators"). The
// forward's output position o reads input position(s) of its plane along each axis; the backward is
// weightedScatter (scatter.h) of the taps, in the order of the output positions (row-major) and,
// within one, of the taps (row-major over the axes), each adding weight × gradient from zero. The
// taps are computed on the host, with the arithmetic of PyTorch's formulas, in the opmath type O
// (float for float32, float16 and bfloat16; double for float64):
//
// Padding (torch's list, last dimension first: left, right, top, bottom, front, back; a negative
// value crops): output o of an axis of n inputs padded by lo reads i = o - lo, reflected
// (|i|, then 2 (n - 1) - i past the end) or clamped to [0, n - 1]. Weight 1.
//
// Linear (per axis of n inputs and m outputs; out == in reads o with weights 1 and 0):
//   ratio = align_corners ? (m > 1 ? O(n - 1) / O(m - 1) : 0)
//                         : (scale s > 0 ? O(1 / s) : O(n) / O(m))
//   r = align_corners ? ratio · O(o) : max(ratio · (O(o) + 0.5) - 0.5, 0)
//   i0 = trunc(r), i1 = i0 + (i0 < n - 1), l1 = clamp(r - O(i0), 0, 1), l0 = 1 - l1
// and a tap's weight is the product of its axes' weights, first axis first.
//
// Average pooling (2-D, 3-D): output o of an axis starts at o·stride - pad and ends at
// min(start + kernel, n + pad); its taps are the window's positions inside [0, n), row-major. Its
// divisor is divisorOverride when nonzero, else the window's size (countIncludePad) or the count
// of its positions inside the input, at least 1. Adaptive average pooling: output o of an axis of
// n inputs and m outputs averages floor(o n / m) to ceil((o + 1) n / m), and its gradient is
// divided by each axis' length in turn. The divisions (DivideShares below) are in the dtype, as
// torch's (float16 and bfloat16: in float, rounded each time); then weightedScatter without
// weights.
//
// Tensors are contiguous: gradInput [planes, *input spatial], gradOutput [planes, *output
// spatial]. threads <= 0 uses the hardware's; the bits never depend on it.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/scatter.h"

namespace detcoll::kernels::ops {

// One axis of separable taps: `taps` per output position of the axis, the input position
// index[o · taps + k] with its weight (weight32 or weight64; both empty: 1).
struct TapAxis {
  int64_t inputs = 1, outputs = 1, taps = 1;
  std::vector<int64_t> index{0};
  std::vector<float> weight32;
  std::vector<double> weight64;
};

// A backward's taps: for every tap in order, the input position it adds into (destination), the
// output position it reads (rows; empty: one tap per output, in order) and its weight (weights32
// for float32, float16 and bfloat16, weights64 for float64; both empty: 1). Separable taps
// (padding, linear and nearest upsampling) come as their three axes (padded in front with
// one-position axes) and are expanded into those arrays where they run: by expandTaps on the
// host, by CombineBody on an executor, so a device receives the axes, not outputs x taps entries.
struct Taps {
  std::vector<int64_t> destination, rows;
  std::vector<float> weights32;
  std::vector<double> weights64;
  int64_t inputs = 0, outputs = 0;  // per plane
  std::vector<TapAxis> axes;        // separable taps, not yet expanded
  const void* weights() const {
    return !weights64.empty() ? static_cast<const void*>(weights64.data())
                              : (!weights32.empty() ? weights32.data() : nullptr);
  }
};

// Tap `at` of separable taps: the output position it reads is at / per (per = the axes' taps
// multiplied), its taps row-major over the axes; the weight the product of the axes' weights,
// first axis first, in O (1 · w is w exactly, so the padded axes change nothing).
template <typename O>
struct CombineBody {
  int64_t inputs[3], outputs[3], taps[3];
  const int64_t* index[3];
  const O* weight[3];  // all null: unweighted
  int64_t* destination;
  int64_t* rows;  // null: one tap per output
  O* weights;     // null: unweighted
  DETCOLL_HOST_DEVICE void operator()(int64_t at) const {
    const int64_t per = taps[0] * taps[1] * taps[2];
    const int64_t flat = at / per, k = at % per;
    const int64_t oc = flat % outputs[2], ob = (flat / outputs[2]) % outputs[1],
                  oa = flat / (outputs[2] * outputs[1]);
    const int64_t tc = k % taps[2], tb = (k / taps[2]) % taps[1], ta = k / (taps[2] * taps[1]);
    const int64_t ja = oa * taps[0] + ta, jb = ob * taps[1] + tb, jc = oc * taps[2] + tc;
    destination[at] = (index[0][ja] * inputs[1] + index[1][jb]) * inputs[2] + index[2][jc];
    if (rows != nullptr) rows[at] = flat;
    if (weights != nullptr) weights[at] = (weight[0][ja] * weight[1][jb]) * weight[2][jc];
  }
};

// Separable taps expanded on the host (a no-op for taps that are not separable).
void expandTaps(Taps* taps);

// The taps of reflection (reflect) or replication padding's backward, 1 to 3 spatial dimensions
// (inputSpatial), padding 2 values per dimension in torch's order.
Status padTaps(const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
               Taps* taps);

// The linear ratio of an axis of n inputs and m outputs, in the opmath type O (above).
template <typename O>
O linearRatio(int64_t n, int64_t m, bool alignCorners, double scale) {
  if (alignCorners) return m > 1 ? static_cast<O>(n - 1) / static_cast<O>(m - 1) : O(0);
  return scale > 0 ? static_cast<O>(1.0 / scale) : static_cast<O>(n) / static_cast<O>(m);
}

// The taps of linear (1-D) or trilinear (3-D) upsampling's backward (2-D: bilinear2dBackward in
// resample.h); scales per axis, <= 0 where the forward had none. wide: float64 weights.
Status linearTaps(const Shape& inputSpatial, const Shape& outputSpatial, bool alignCorners,
                  const std::vector<double>& scales, bool wide, Taps* taps);

// The taps of nearest upsampling's backward, 1 to 3 spatial dimensions: output o of an axis of n
// inputs and m outputs reads o (m == n), o / 2 (m == 2 n), else min(floor(float(o) · step), n - 1)
// in float32, step = float(1 / scale) where the forward had a scale, float(n / m) otherwise
// (torch's nearest_idx). Weight 1.
Status nearestTaps(const Shape& inputSpatial, const Shape& outputSpatial,
                   const std::vector<double>& scales, Taps* taps);

// Average pooling's parameters per spatial axis (2 or 3 of them).
struct AvgPool {
  Shape kernel, stride, padding;
  bool ceilMode = false, countIncludePad = true;
  int64_t divisorOverride = 0;  // 0: none
};

// The taps of average pooling's backward, and each output position's divisors (three per
// output, 1 where unused): one for average pooling, one per axis for adaptive.
Status avgPoolTaps(const Shape& inputSpatial, const AvgPool& pool, Taps* taps,
                   std::vector<int64_t>* divisors);
Status adaptiveAvgPoolTaps(const Shape& inputSpatial, const Shape& outputSpatial, Taps* taps,
                           std::vector<int64_t>* divisors);

// Each gradient value of output position o (planes x outputs) divided by divisors[3 o],
// divisors[3 o + 1] and divisors[3 o + 2] in turn, each quotient rounded to the dtype.
template <typename T>
struct DivideShares {
  const T* grad;
  const int64_t* divisors;
  T* out;
  int64_t outputs;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    using A = typename kernels::Traits<T>::Acc;
    const int64_t o = t % outputs;
    T v = grad[t];
    for (int a = 0; a < 3; ++a) {
      v = kernels::Traits<T>::round(kernels::Traits<T>::load(v) /
                                    static_cast<A>(divisors[3 * o + a]));
    }
    out[t] = v;
  }
};

// Plane p's output o adds into input p · inner + indices[p · outputs + o] (max pooling's backward
// through its indices: 3-D max pooling, adaptive max pooling).
struct PlaneOffsets {
  const int64_t* indices;
  int64_t inner, outputs;
  int64_t* destination;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    destination[t] = (t / outputs) * inner + indices[t];
  }
};

// The backwards on the CPU: the taps, then weightedScatter.
Status padBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
                   int threads);
Status upsampleLinearBackward(void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales, int threads);
Status avgPoolBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                       const Shape& inputSpatial, const AvgPool& pool, int threads);
Status upsampleNearestBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, const std::vector<double>& scales,
                               int threads);
// Max pooling's backward through its indices: gradOutput and indices [planes, outputs], each
// index a position of its plane's `inner` inputs; each output's gradient added into the input
// its index names, output positions in order, from zero.
Status maxPoolBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                       DataType type, int64_t planes, int64_t inner, int64_t outputs, int threads);
Status adaptiveAvgPoolBackward(void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, int threads);

}  // namespace detcoll::kernels::ops
