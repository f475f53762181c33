#pragma once

// The rank-order fold: the numeric heart of the ordered mode (docs/design.md, "The ordered mode").
//
//   out[i] = finish( (((x_0[i] op x_1[i]) op x_2[i]) op ... ) op x_{k-1}[i] )
//
// evaluated left to right, in the accumulation type of the dtype: float for float32, float16 and
// bfloat16 (each input converted exactly, the result rounded once to nearest even), double for
// float64, int64 for int32 and int64 (sums wrap in two's complement, as MPI does in practice).
// finish() divides by `divisor` for average (in the accumulation type; integer division truncates
// toward zero, after an exact int64 sum for int32) and converts to the dtype.
//
// Float semantics, identical on every backend: any NaN result is the canonical quiet NaN of the
// dtype; min and max propagate NaN and order -0 below +0, so they do not depend on the order.
// Element i of the result depends only on element i of the inputs, never on its position or on
// how a buffer is split: that is what makes the ordered mode layout-independent.

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace detcoll::kernels {

// out may alias any input exactly (in place). Requires k >= 1. divisor is used by kAverage only.
void foldRankOrder(void* out, const void* const* inputs, int k, size_t count, DataType type,
                   ReduceOp op, int64_t divisor);

}  // namespace detcoll::kernels
