#include "kernels/ops/writes.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/op_checks.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops {

namespace {

// The bins of histc in W over [lo, hi] (W's values), then the counts into out.
template <typename T, typename W>
void binAndCount(void* out, const void* input, int64_t n, int64_t bins, W lo, W hi, bool wide) {
  // Each value's bin by the device's body, a block at a time into a buffer that stays in cache,
  // then counted (exact integers: the order of the counting cannot matter).
  constexpr int64_t kBlock = 2048;
  int64_t position[kBlock];
  HistcBinBody<T, W> body = histcBins<T, W>(nullptr, lo, hi, bins, position, wide);
  std::vector<int64_t> counts(static_cast<size_t>(bins), 0);
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t count = std::min(kBlock, n - start);
    body.input = static_cast<const T*>(input) + start;  // value start + i is the body's i
    for (int64_t i = 0; i < count; ++i) body(i);
    for (int64_t i = 0; i < count; ++i) {
      if (position[i] >= 0) ++counts[static_cast<size_t>(position[i])];
    }
  }
  using A = typename kernels::Traits<T>::Acc;
  T* result = static_cast<T*>(out);
  for (int64_t b = 0; b < bins; ++b)
    result[b] = kernels::Traits<T>::store(static_cast<A>(counts[b]));
}

}  // namespace

Status checkWriteLast(const void* out, int64_t rows, int64_t width, const int64_t* destination,
                      int64_t n, const void* values) {
  const std::string op = "write_last: ";
  if (rows < 0 || width < 0 || n < 0) return Status::invalidArgument(op + "negative size");
  DETCOLL_RETURN_IF_ERROR(sizesFit("write_last", {rows, width}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("write_last", {n, width}));
  if (n > 0 && width > 0 && (out == nullptr || values == nullptr)) {
    return Status::invalidArgument(op + "out or values is null");
  }
  if (n > 0 && destination == nullptr) return Status::invalidArgument(op + "destination is null");
  return Status::ok();
}

Status checkMaxUnpool(const void* out, const void* input, const int64_t* indices, int64_t planes,
                      int64_t inputs, int64_t outputs) {
  const std::string op = "max_unpool: ";
  if (planes < 0 || inputs < 0 || outputs < 0) return Status::invalidArgument(op + "negative size");
  DETCOLL_RETURN_IF_ERROR(sizesFit("max_unpool", {planes, inputs}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("max_unpool", {planes, outputs}));
  if ((planes * outputs > 0 && out == nullptr) || (planes * inputs > 0 && input == nullptr)) {
    return Status::invalidArgument(op + "out or input is null");
  }
  if (planes * inputs > 0 && indices == nullptr)
    return Status::invalidArgument(op + "indices is null");
  return Status::ok();
}

Status checkHistc(const void* out, DataType type, const void* input, int64_t n, int64_t bins) {
  const std::string op = "histc: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  if (bins <= 0) {
    return Status::invalidArgument(op + "bins must be > 0, got " + std::to_string(bins));
  }
  if (n < 0) return Status::invalidArgument(op + "negative size");
  DETCOLL_RETURN_IF_ERROR(sizesFit("histc", {n}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("histc", {bins}));
  if (out == nullptr || (n > 0 && input == nullptr)) {
    return Status::invalidArgument(op + "out or input is null");
  }
  return Status::ok();
}

Status writeLast(void* out, int64_t rows, int64_t width, DataType type, const int64_t* destination,
                 int64_t n, const void* values) {
  DETCOLL_RETURN_IF_ERROR(checkWriteLast(out, rows, width, destination, n, values));
  DETCOLL_RETURN_IF_ERROR(
      checkSegments(destination, n, rows, "destination").prefixed("write_last"));
  const size_t row = static_cast<size_t>(width) * dataTypeSize(type);
  if (row == 0) return Status::ok();
  auto* to = static_cast<uint8_t*>(out);
  const auto* from = static_cast<const uint8_t*>(values);
  for (int64_t s = 0; s < n; ++s) std::memcpy(to + destination[s] * row, from + s * row, row);
  return Status::ok();
}

Status maxUnpool(void* out, const void* input, const int64_t* indices, DataType type,
                 int64_t planes, int64_t inputs, int64_t outputs) {
  DETCOLL_RETURN_IF_ERROR(checkMaxUnpool(out, input, indices, planes, inputs, outputs));
  const int64_t n = planes * inputs;
  DETCOLL_RETURN_IF_ERROR(checkSegments(indices, n, outputs, "indices").prefixed("max_unpool"));
  const size_t size = dataTypeSize(type);
  auto* to = static_cast<uint8_t*>(out);
  const auto* from = static_cast<const uint8_t*>(input);
  if (planes * outputs > 0) std::memset(to, 0, static_cast<size_t>(planes * outputs) * size);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t at = (t / inputs) * outputs + indices[t];
    std::memcpy(to + at * size, from + t * size, size);
  }
  return Status::ok();
}

Status checkEmbeddingBagMax(const void* gradWeight, int64_t numWeights, DataType type,
                            const void* gradOutput, int64_t bags, int64_t dim,
                            const int64_t* maximumIndices, const int64_t* bagSize) {
  const std::string op = "embedding_bag_max_backward: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  if (numWeights < 0 || bags < 0 || dim < 0) return Status::invalidArgument(op + "negative size");
  DETCOLL_RETURN_IF_ERROR(sizesFit("embedding_bag_max_backward", {numWeights, dim}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("embedding_bag_max_backward", {bags, dim}));
  if ((numWeights * dim > 0 && gradWeight == nullptr) ||
      (bags * dim > 0 && (gradOutput == nullptr || maximumIndices == nullptr)) ||
      (bags > 0 && bagSize == nullptr)) {
    return Status::invalidArgument(op +
                                   "grad_weight, grad_output, maximum_indices or bag_size is null");
  }
  return Status::ok();
}

Status embeddingBagMaxBackward(void* gradWeight, int64_t numWeights, DataType type,
                               const void* gradOutput, int64_t bags, int64_t dim,
                               const int64_t* maximumIndices, const int64_t* bagSize,
                               int64_t paddingIdx, int threads) {
  DETCOLL_RETURN_IF_ERROR(checkEmbeddingBagMax(gradWeight, numWeights, type, gradOutput, bags, dim,
                                               maximumIndices, bagSize));
  const int64_t n = bags * dim;
  std::vector<int64_t> destination(static_cast<size_t>(n));
  int64_t bad = std::numeric_limits<int64_t>::max();
  const BagMaxBody body{maximumIndices,     bagSize, dim, numWeights, paddingIdx,
                        destination.data(), &bad};
  for (int64_t t = 0; t < n; ++t) body(t);
  if (bad != std::numeric_limits<int64_t>::max()) {
    return outOfRange("maximum_indices", bad, maximumIndices[bad], numWeights)
        .prefixed("embedding_bag_max_backward");
  }
  SegmentSources in;
  in.values = gradOutput;
  in.type = type;
  in.rowStride = 1;
  Skip skip;
  skip.negative = true;
  return scatterReduce(destination.data(), n, numWeights * dim, skip, in,
                       SegmentOutput{gradWeight, 1, 1, SegmentInit::kZero}, threads)
      .prefixed("embedding_bag_max_backward");
}

Status histcRange(double min, double max, bool any, bool nan, double low, double high, double* lo,
                  double* hi) {
  const char* op = "histc";
  if (min == max && nan) {
    return Status::invalidArgument(std::string(op) + ": range of [nan, nan] is not finite");
  }
  if (min == max && any) {
    min = low;
    max = high;
  }
  if (min == max) {
    min -= 1;
    max += 1;
  }
  if (min > max) {
    return Status::invalidArgument(std::string(op) + ": max " + showNumber(max) +
                                   " must be larger than min " + showNumber(min));
  }
  if (!std::isfinite(min) || !std::isfinite(max)) {
    return Status::invalidArgument(std::string(op) + ": the range [" + showNumber(min) + ", " +
                                   showNumber(max) + "] is not finite");
  }
  *lo = min;
  *hi = max;
  return Status::ok();
}

Status histc(void* out, DataType type, const void* input, int64_t n, int64_t bins, double min,
             double max) {
  DETCOLL_RETURN_IF_ERROR(checkHistc(out, type, input, n, bins));
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = typename kernels::Traits<T>::Acc;
    const T* x = static_cast<const T*>(input);
    double low = 0, high = 0;
    int8_t seen = 0;
    if (min == max && n > 0) {  // the input's range: one chunk of RangeChunkBody
      RangeChunkBody<T>{x, n, n, &low, &high, &seen}(0);
    }
    const bool any = (seen & 1) != 0, nan = (seen & 2) != 0;
    double lo = 0, hi = 0;
    W loW{}, hiW{};
    status = histcRange(min, max, any, nan, low, high, &lo, &hi);
    if (status.isOk()) status = histcBounds<T>(type, lo, hi, &loW, &hiW);
    if (!status.isOk()) return;
    const HistcOverflowBody<T, W> check{x, loW, hiW, static_cast<W>(bins), nullptr};
    bool wide = !std::isfinite(static_cast<double>(hiW - loW));
    const bool mayOverflow = histcMayOverflow(loW, hiW, static_cast<W>(bins));
    for (int64_t i = 0; i < n && !wide && mayOverflow; ++i) wide = check.overflows(i);
    if (wide) {
      binAndCount<T, double>(out, input, n, bins, loW, hiW, true);
    } else {
      binAndCount<T, W>(out, input, n, bins, loW, hiW, false);
    }
  });
  return status;
}

}  // namespace detcoll::kernels::ops
