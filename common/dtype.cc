#include "common/dtype.h"

namespace detcoll {

bool isValidDataType(int value) {
  return value >= 0 && value <= 5;
}
bool isValidReduceOp(int value) {
  return value >= 0 && value <= 3;
}
bool isValidMode(int value) {
  return value >= 0 && value <= 2;
}

size_t dataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 0;
}

bool isFloatingPoint(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

std::string dataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "dtype(" + std::to_string(static_cast<int>(type)) + ")";
}

std::string reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "op(" + std::to_string(static_cast<int>(op)) + ")";
}

std::string modeName(Mode mode) {
  switch (mode) {
    case Mode::kNative:
      return "native";
    case Mode::kOrdered:
      return "ordered";
    case Mode::kInvariant:
      return "invariant";
  }
  return "mode(" + std::to_string(static_cast<int>(mode)) + ")";
}

bool parseMode(const std::string& text, Mode* mode) {
  for (Mode m : {Mode::kNative, Mode::kOrdered, Mode::kInvariant}) {
    if (text == modeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

}  // namespace detcoll
