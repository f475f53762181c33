#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace detcoll {

// Element types. Values equal detcoll_dtype_t in bindings/c/detcoll.h.
enum class DataType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt32 = 4,
  kInt64 = 5,
};

// Reduction operators. Values equal detcoll_op_t.
enum class ReduceOp : int { kSum = 0, kAverage = 1, kMin = 2, kMax = 3 };

// Determinism modes (docs/design.md, "The determinism contract"). Values equal detcoll_mode_t.
enum class Mode : int { kNative = 0, kOrdered = 1, kInvariant = 2 };

bool isValidDataType(int value);
bool isValidReduceOp(int value);
bool isValidMode(int value);

// Size in bytes of one element; 0 for an invalid value.
size_t dataTypeSize(DataType type);
bool isFloatingPoint(DataType type);
// "float32", "float64", "float16", "bfloat16", "int32", "int64", or "dtype(<n>)" if invalid.
std::string dataTypeName(DataType type);
// "sum", "average", "min", "max", or "op(<n>)" if invalid.
std::string reduceOpName(ReduceOp op);
// "native", "ordered", "invariant", or "mode(<n>)" if invalid.
std::string modeName(Mode mode);
// Parses a mode name (lower case, as DETCOLL_DETERMINISM takes it).
bool parseMode(const std::string& text, Mode* mode);

}  // namespace detcoll
