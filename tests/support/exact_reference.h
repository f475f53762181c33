#pragma once

// Test support: the invariant mode's result computed with MPFR, independently of
// kernels/fixed_point.cc. For each element: the largest exponent over all leaves sets the grid
// 2^(e + 1 - 62 + H) (e: the unbiased exponent of the largest-magnitude leaf, at least the
// dtype's smallest normal exponent); every leaf is rounded to the grid (nearest, ties to even);
// the rounded leaves are summed exactly; the sum (divided by the number of leaves for average) is
// rounded once to the dtype, subnormals and overflow to infinity included. Non-finite leaves
// follow the IEEE rules of fixed_point.h. Integers: the exact sum (wrapping), average truncated.

#include <cstddef>
#include <vector>

#include "common/dtype.h"

namespace detcoll::testing {

void exactInvariantReference(void* out, const std::vector<const void*>& leaves, size_t count,
                             DataType type, ReduceOp op);

// The exact sum of the leaves (no grid), rounded once to the dtype: the most accurate possible
// result, for accuracy bounds. Float dtypes only.
void exactSumRounded(void* out, const std::vector<const void*>& leaves, size_t count, DataType type,
                     ReduceOp op);

}  // namespace detcoll::testing
