#pragma once

// Sums over axes with a fixed tree (bias_add backward is one): the bits do not depend on
// threads, blocks or any launch configuration.
//
// For each output element, its sequence x_0 .. x_{k-1} is the input elements it sums, in
// row-major order over the reduced axes. The sequence is cut into chunks of kChunk consecutive
// values; each chunk is summed left to right from its first value; the chunk sums are then added
// pairwise, level by level ((s_0 + s_1), (s_2 + s_3), ...; an odd last sum passes up unchanged)
// until one remains. All of it in the accumulation type (float for float32, float16 and
// bfloat16, inputs converted exactly; double for float64; int64 for integers), rounded once to
// the dtype. An empty sequence sums to 0.

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/scatter.h"

namespace detcoll::kernels::ops {

constexpr int64_t kChunk = 32;

// out has the input's shape without the reduced axes (each axis at most once; negative axes
// count from the end). An empty axes list reduces nothing (a copy in the dtype).
Status sumOverAxes(const void* in, const Shape& shape, DataType type, std::vector<int> axes,
                   void* out, int threads);

// Where each output's sequence starts in the input (outBase, one per output, row-major over the
// kept axes) and the offsets of its elements from there (row-major over the reduced axes; empty
// when a reduced axis is empty). outputsContiguous: consecutive outputs are consecutive inputs.
struct SumPlan {
  std::vector<int64_t> outBase, offsets;
  bool outputsContiguous = false;
};
Status planSum(const Shape& shape, std::vector<int> axes, SumPlan* plan);

// The axes bias_add's gradient sums: all but the channel axis.
Status biasAddAxes(const Shape& shape, bool channelsFirst, std::vector<int>* axes);

// tf.nn.bias_add's gradient: the sum over every axis but the channel axis, which is the last
// (NHWC, channels last) or axis 1 (NCHW).
Status biasAddGrad(const void* grad, const Shape& shape, DataType type, bool channelsFirst,
                   void* out, int threads);

}  // namespace detcoll::kernels::ops
