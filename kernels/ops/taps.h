#pragma once

// The backward of reflection and replication padding and of linear and trilinear upsampling, as
// taps (docs/design.md, "Patching torch's operators"). The forward's output position o reads input
// position(s) of its plane along each axis; the backward is weightedScatter (scatter.h) of the
// taps, in the order of the output positions (row-major) and, within one, of the taps (row-major
// over the axes), each adding weight × gradient from zero. The taps are computed on the host,
// with the arithmetic of PyTorch's formulas, in the opmath type O (float for float32, float16 and
// bfloat16; double for float64):
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
// Tensors are contiguous: gradInput [planes, *input spatial], gradOutput [planes, *output
// spatial]. threads <= 0 uses the hardware's; the bits never depend on it.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/scatter.h"

namespace detcoll::kernels::ops {

// A backward's taps: for every tap in order, the input position it adds into (destination), the
// output position it reads (rows; empty: one tap per output, in order) and its weight (weights32
// for float32, float16 and bfloat16, weights64 for float64; both empty: 1).
struct Taps {
  std::vector<int64_t> destination, rows;
  std::vector<float> weights32;
  std::vector<double> weights64;
  int64_t inputs = 0, outputs = 0;  // per plane
  const void* weights() const {
    return !weights64.empty() ? static_cast<const void*>(weights64.data())
                              : (!weights32.empty() ? weights32.data() : nullptr);
  }
};

// The taps of reflection (reflect) or replication padding's backward, 1 to 3 spatial dimensions
// (inputSpatial), padding 2 values per dimension in torch's order.
Status padTaps(const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
               Taps* taps);

// The taps of linear (1-D) or trilinear (3-D) upsampling's backward (2-D: bilinear2dBackward in
// resample.h); scales per axis, <= 0 where the forward had none. wide: float64 weights.
Status linearTaps(const Shape& inputSpatial, const Shape& outputSpatial, bool alignCorners,
                  const std::vector<double>& scales, bool wide, Taps* taps);

// The backwards on the CPU: the taps, then weightedScatter.
Status padBackward(void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect,
                   int threads);
Status upsampleLinearBackward(void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales, int threads);

}  // namespace detcoll::kernels::ops
