#pragma once

// Test support: the independent reference of the ordered mode and random test data.
//
// The reference is written separately from kernels/fold.cc on purpose: scalar code, the
// compiler's _Float16 for float16, a nearest-of-two-candidates rounding for bfloat16, a
// comparison-based min/max. A bug in the library's fold does not repeat here.

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace detcoll::testing {

// Element i of the rank-order fold of `inputs` (one buffer per rank, raw dtype bits), written
// into out (raw bits). divisor: the world size, used for average.
void referenceFold(void* out, const std::vector<const void*>& inputs, size_t count, DataType type,
                   ReduceOp op, int64_t divisor);

// The same fold started at rank `start` and wrapping around (start, start+1, ..., start-1):
// the order a ring reduce-scatter gives the chunk that starts at `start`.
void rotatedFold(void* out, const std::vector<const void*>& inputs, size_t count, DataType type,
                 ReduceOp op, int64_t divisor, int start);

// Random, non-integer values over a wide exponent range, raw dtype bits, count elements.
// float32/float64/bfloat16: |x| in [2^-20, 2^20); float16: [2^-8, 2^8); ints: [-2^20, 2^20],
// and either sign. Deterministic in seed.
std::vector<uint8_t> randomBuffer(DataType type, size_t count, uint64_t seed);

// Index of the first element whose bits differ, or -1.
long firstDifference(const void* a, const void* b, size_t count, DataType type);

// Element i as a double: exact for the float dtypes, rounded for int64 beyond 2^53.
double elementAsDouble(const void* data, size_t i, DataType type);

// Human-readable value of element i (for failure messages).
std::string describeElement(const void* data, size_t i, DataType type);

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt32,   DataType::kInt64};
constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                    DataType::kBFloat16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};

}  // namespace detcoll::testing
