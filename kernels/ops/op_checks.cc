#include "kernels/ops/op_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>

namespace detcoll::kernels::ops {
namespace {

Status checkShape(const char* op, const char* what, const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return Status::invalidArgument(std::string(op) + ": " + what + " has a negative dimension " +
                                     show(shape));
    }
  }
  return Status::ok();
}

Status normalizeDim(const char* op, int* dim, size_t rank) {
  const int r = static_cast<int>(std::max<size_t>(rank, 1));
  if (*dim < -r || *dim >= r) {
    return Status::invalidArgument(std::string(op) + ": dim " + std::to_string(*dim) +
                                   " is out of range for a tensor of " + std::to_string(rank) +
                                   " dimensions");
  }
  if (*dim < 0) *dim += r;
  return Status::ok();
}

}  // namespace

int64_t product(const Shape& shape, size_t from, size_t to) {
  const auto end = shape.begin() + static_cast<std::ptrdiff_t>(std::min(to, shape.size()));
  const auto begin = shape.begin() + static_cast<std::ptrdiff_t>(std::min(from, shape.size()));
  return begin < end ? std::accumulate(begin, end, int64_t{1}, std::multiplies<int64_t>()) : 1;
}

std::string show(const Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

Status checkScatterAddShapes(const Shape& selfShape, int* dimension, const Shape& indexShape,
                             const Shape& srcShape) {
  const char* op = "scatter_add";
  int& dim = *dimension;
  DETCOLL_RETURN_IF_ERROR(checkShape(op, "self", selfShape));
  DETCOLL_RETURN_IF_ERROR(checkShape(op, "index", indexShape));
  DETCOLL_RETURN_IF_ERROR(checkShape(op, "src", srcShape));
  DETCOLL_RETURN_IF_ERROR(normalizeDim(op, dimension, selfShape.size()));
  DETCOLL_RETURN_IF_ERROR(shapeFits(op, selfShape));
  DETCOLL_RETURN_IF_ERROR(shapeFits(op, indexShape));
  DETCOLL_RETURN_IF_ERROR(shapeFits(op, srcShape));
  const size_t rank = selfShape.size();
  if (indexShape.size() != rank || srcShape.size() != rank) {
    return Status::invalidArgument(std::string(op) + ": self " + show(selfShape) + ", index " +
                                   show(indexShape) + " and src " + show(srcShape) +
                                   " must have the same number of dimensions");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (indexShape[d] > srcShape[d] ||
        (static_cast<int>(d) != dim && indexShape[d] > selfShape[d])) {
      return Status::invalidArgument(std::string(op) + ": index " + show(indexShape) +
                                     " is larger than src " + show(srcShape) + " or, outside dim " +
                                     std::to_string(dim) + ", than self " + show(selfShape) +
                                     " in dimension " + std::to_string(d));
    }
  }
  return Status::ok();
}

Status checkIndexAddShapes(const Shape& selfShape, int* dimension, int64_t indexCount,
                           const Shape& sourceShape) {
  const char* op = "index_add";
  int& dim = *dimension;
  DETCOLL_RETURN_IF_ERROR(checkShape(op, "self", selfShape));
  DETCOLL_RETURN_IF_ERROR(checkShape(op, "source", sourceShape));
  DETCOLL_RETURN_IF_ERROR(normalizeDim(op, dimension, selfShape.size()));
  DETCOLL_RETURN_IF_ERROR(shapeFits(op, selfShape));
  DETCOLL_RETURN_IF_ERROR(shapeFits(op, sourceShape));
  // A 0-d self and source: one index.
  bool fits = sourceShape.size() == selfShape.size() && indexCount >= 0 &&
              (!selfShape.empty() || indexCount == 1);
  for (size_t d = 0; fits && d < selfShape.size(); ++d) {
    fits =
        static_cast<int>(d) == dim ? sourceShape[d] == indexCount : sourceShape[d] == selfShape[d];
  }
  if (!fits) {
    return Status::invalidArgument(std::string(op) + ": source " + show(sourceShape) +
                                   " must be self " + show(selfShape) + " with dimension " +
                                   std::to_string(dim) + " of the index's length " +
                                   std::to_string(indexCount));
  }
  return Status::ok();
}

Status checkAlpha(const char* op, DataType type, double alpha) {
  if (isFloatingPoint(type)) return Status::ok();
  // torch refuses an alpha outside the integer type's range (compared before it is truncated),
  // and converts the others toward zero, as the kernels do.
  const bool int32 = type == DataType::kInt32;
  const double lowest = int32 ? -2147483648.0 : -9223372036854775808.0;
  if (int32 ? alpha >= lowest && alpha <= 2147483647.0 : alpha >= lowest && alpha < -lowest) {
    return Status::ok();  // NaN fails both comparisons
  }
  return Status::invalidArgument(std::string(op) + ": alpha " + showNumber(alpha) +
                                 " does not fit " + dataTypeName(type));
}

Status checkBincount(DataType type, const int64_t* input, int64_t count, const void* weights,
                     int64_t minlength, const int64_t* outLength, const void* out) {
  const std::string op = "bincount: ";
  if (count < 0) return Status::invalidArgument(op + "count is " + std::to_string(count));
  if (minlength < 0) {
    return Status::invalidArgument(op + "minlength is " + std::to_string(minlength));
  }
  if (outLength == nullptr) return Status::invalidArgument(op + "out_length is null");
  if (count > 0 && input == nullptr) return Status::invalidArgument(op + "input is null");
  if (out != nullptr && count > 0 && weights == nullptr && type != DataType::kInt64) {
    return Status::invalidArgument(op + "counts are int64");
  }
  return Status::ok();
}

Status bincountLength(int64_t largest, int64_t minlength, int64_t* length) {
  if (largest == std::numeric_limits<int64_t>::max()) {
    return Status::invalidArgument("bincount: input value " + std::to_string(largest) +
                                   " has no bin (its length would pass int64)");
  }
  *length = std::max(minlength, largest + 1);
  return Status::ok();
}

Status checkSegmentShapes(const char* op, int64_t segments, const Shape& dataShape, int idDims) {
  DETCOLL_RETURN_IF_ERROR(checkShape(op, "data", dataShape));
  if (idDims < 0 || static_cast<size_t>(idDims) > dataShape.size() || segments < 0) {
    return Status::invalidArgument(std::string(op) + ": segment_ids of " + std::to_string(idDims) +
                                   " dimensions for data " + show(dataShape) + " and " +
                                   std::to_string(segments) + " segments");
  }
  DETCOLL_RETURN_IF_ERROR(shapeFits(op, dataShape));
  return sizesFit(op, {segments, product(dataShape, static_cast<size_t>(idDims))});
}

Status checkEmbeddingSizes(const char* op, DataType type, int64_t numWeights, int64_t count,
                           int64_t dim) {
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(std::string(op) + ": gradients are floating point, not " +
                                   dataTypeName(type));
  }
  if (numWeights < 0 || count < 0 || dim < 0) {
    return Status::invalidArgument(std::string(op) + ": num_weights " + std::to_string(numWeights) +
                                   ", count " + std::to_string(count) + " and dim " +
                                   std::to_string(dim) + " must not be negative");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {numWeights, dim}));
  return sizesFit(op, {count, dim});
}

Status checkEmbedding(const char* op, DataType type, int64_t numWeights, int64_t count, int64_t dim,
                      const int64_t* indices, int64_t paddingIdx, Skip* padding) {
  DETCOLL_RETURN_IF_ERROR(checkEmbeddingSizes(op, type, numWeights, count, dim));
  padding->value = paddingIdx >= 0;
  padding->which = paddingIdx;
  return checkSegments(indices, count, numWeights, "indices", *padding).prefixed(op);
}

Status badBagOffset(const int64_t* offsets, int64_t at, int64_t count) {
  return Status::invalidArgument(
      "offsets[" + std::to_string(at) + "] = " + std::to_string(offsets[at]) +
      " breaks the rule 0 = offsets[0] <= offsets[1] <= ... <= " + std::to_string(count));
}

Status checkBagOffsets(const int64_t* offsets, int64_t bags, int64_t count) {
  if (bags > 0 && offsets == nullptr) return Status::invalidArgument("offsets is null");
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t at = bagOffsetBreak(offsets, bags, count, b);
    if (at >= 0) return badBagOffset(offsets, at, count);
  }
  return Status::ok();
}

std::string showNumber(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {  // the shortest that reads back as value
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

Status sizesFit(const std::string& op, std::initializer_list<int64_t> sizes) {
  return shapeFits(op, Shape(sizes));
}

Status shapeFits(const std::string& op, const Shape& sizes) {
  constexpr int64_t kLimit = int64_t{1} << 56;
  int64_t total = 1;
  bool fits = true, zero = false;
  for (int64_t n : sizes) {
    if (n <= 0) {
      zero = true;  // an empty (or negative, refused elsewhere) size: nothing to address
      continue;
    }
    fits = fits && n <= kLimit / total;
    if (fits) total *= n;
  }
  if (fits || zero) return Status::ok();
  std::string list;
  for (int64_t n : sizes) list += (list.empty() ? "" : ", ") + std::to_string(n);
  return Status::invalidArgument(op + ": sizes [" + list + "] overflow 64-bit offsets");
}

Status checkWeightedScatter(const char* op, const void* out, int64_t planes, int64_t outInner,
                            DataType type, const int64_t* destination, int64_t n,
                            const void* values, int64_t valuesInner, const int64_t* rows) {
  if (planes < 0 || outInner < 0 || n < 0 || valuesInner < 0) {
    return Status::invalidArgument(std::string(op) + ": negative size");
  }
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(std::string(op) + ": dtype " + dataTypeName(type) +
                                   "; floating point only");
  }
  if (rows == nullptr && valuesInner < n) {
    return Status::invalidArgument(std::string(op) + ": " + std::to_string(n) +
                                   " sources read in place from planes of " +
                                   std::to_string(valuesInner) + " values");
  }
  const char* missing = (planes > 0 && outInner > 0 && out == nullptr) ? "out"
                        : (n > 0 && destination == nullptr)            ? "destination"
                        : (planes > 0 && n > 0 && values == nullptr)   ? "values"
                                                                       : nullptr;
  if (missing != nullptr) {
    return Status::invalidArgument(std::string(op) + ": " + missing + " is null");
  }
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
