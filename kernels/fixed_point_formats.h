#pragma once

// The invariant codec's vector paths for float16, bfloat16 and float64 (kernels/fixed_point.cc
// holds float32's and the exact general path; docs/design.md, "The invariant mode"). Each gives
// the general path's bits: the encodings by exact double arithmetic, the decoding by one rounding
// of an exact double, with the rare elements it cannot settle so (a sum of 2^51 or more, an
// average whose double quotient sits where a second rounding could differ, a non-finite key)
// left to the exact path.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"

namespace detcoll::kernels::formats {

// Whether `type` has a vector path here.
bool handles(DataType type);

// kernels::localMaxKeys for a handled type.
void localMaxKeys(void* keys, const void* const* leaves, int nleaves, size_t begin, size_t n,
                  DataType type);

// out[i] (+)= the encoding of leaf element begin + i on the grid of keys[i]; 0 under the key 0
// and the non-finite key (whose counts the caller adds).
void encode(int64_t* out, const void* leaf, const void* keys, size_t begin, size_t n, DataType type,
            bool accumulate);

// out[i] = the decoded sum of pieces[0..p)[i] (divided by `leaves` for average), for every i
// whose index is not appended to `slow`; the caller settles those on the exact path.
void decode(void* out, const int64_t* const* pieces, int p, const void* keys, size_t n,
            DataType type, bool average, int64_t leaves, std::vector<size_t>& slow);

// kernels::invariantReduceLocal of float16, bfloat16 or float64 leaves in double arithmetic, where
// it applies (sum or average of at most 64 leaves): false where it does not, and nothing is
// written.
bool reduceLocal(void* out, const void* const* leaves, int nleaves, size_t count, DataType type,
                 ReduceOp op);

// kernels::invariantReduceLocal of at most kFewLeaves float32, float16, bfloat16 or float64
// leaves in one pass (kernels/fixed_point_few.cc), for sum and for the average over a power of two
// of leaves: false where it does not apply, and nothing is written.
constexpr int kFewLeaves = 8;
bool reduceFewLeaves(void* out, const void* const* leaves, int nleaves, size_t count, DataType type,
                     ReduceOp op);

// kernels::foldMaxKeys for keys of `keyBytes` bytes (1 or 2).
void foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, size_t keyBytes);

}  // namespace detcoll::kernels::formats
