#pragma once

// The backward of padding and of linear upsampling (taps.h) on an executor: the taps, computed
// on the host as the CPU reference computes them, copied to the executor's memory, then
// weightedScatter's data-parallel formulation (scatter.h). The same taps and the same scatter
// contract give the CPU reference's bits.

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/scatter.h"
#include "kernels/ops/taps.h"

namespace detcoll::kernels::ops::bodies {

template <typename E, typename T>
const T* upload(E& e, const std::vector<T>& host) {
  if (host.empty()) return nullptr;
  T* device = e.template alloc<T>(static_cast<int64_t>(host.size()));
  e.toDevice(device, host.data(), host.size() * sizeof(T));
  return device;
}

template <typename E>
Status scatterTaps(E& e, const char* op, const Taps& taps, void* gradInput, const void* gradOutput,
                   DataType type, int64_t planes) {
  if (planes < 0) return Status::invalidArgument(std::string(op) + ": negative size");
  const bool wide = type == DataType::kFloat64;
  if (taps.weights() != nullptr && wide != !taps.weights64.empty()) {
    return Status::internal(std::string(op) + ": taps of the other precision");
  }
  const int64_t* destination = upload(e, taps.destination);
  const int64_t* rows = upload(e, taps.rows);
  const void* weights = wide ? static_cast<const void*>(upload(e, taps.weights64))
                             : static_cast<const void*>(upload(e, taps.weights32));
  DETCOLL_RETURN_IF_ERROR(e.status());
  return weightedScatter(e, gradInput, planes, taps.inputs, type, destination,
                         static_cast<int64_t>(taps.destination.size()), gradOutput, taps.outputs,
                         rows, weights)
      .prefixed(op);
}

template <typename E>
Status padBackward(E& e, void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                   const Shape& inputSpatial, const std::vector<int64_t>& padding, bool reflect) {
  Taps taps;
  DETCOLL_RETURN_IF_ERROR(padTaps(inputSpatial, padding, reflect, &taps));
  return scatterTaps(e, reflect ? "reflection_pad_backward" : "replication_pad_backward", taps,
                     gradInput, gradOutput, type, planes);
}

template <typename E>
Status upsampleLinearBackward(E& e, void* gradInput, const void* gradOutput, DataType type,
                              int64_t planes, const Shape& inputSpatial, const Shape& outputSpatial,
                              bool alignCorners, const std::vector<double>& scales) {
  Taps taps;
  DETCOLL_RETURN_IF_ERROR(linearTaps(inputSpatial, outputSpatial, alignCorners, scales,
                                     type == DataType::kFloat64, &taps));
  return scatterTaps(e, "upsample_linear_backward", taps, gradInput, gradOutput, type, planes);
}

// Average pooling (plain or adaptive): the divisions as a body over planes x outputs, on the
// executor, then the taps' scatter.
template <typename E>
Status scatterShares(E& e, const char* op, const Taps& taps, const std::vector<int64_t>& divisors,
                     void* gradInput, const void* gradOutput, DataType type, int64_t planes) {
  if (planes < 0) return Status::invalidArgument(std::string(op) + ": negative size");
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(std::string(op) + ": dtype " + dataTypeName(type) +
                                   "; floating point only");
  }
  const int64_t* onDevice = upload(e, divisors);
  void* shares = nullptr;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = e.template alloc<T>(planes * taps.outputs);
    e.launch(planes * taps.outputs,
             DivideShares<T>{static_cast<const T*>(gradOutput), onDevice, out, taps.outputs});
    shares = out;
  });
  DETCOLL_RETURN_IF_ERROR(e.status());
  return scatterTaps(e, op, taps, gradInput, shares, type, planes);
}

template <typename E>
Status avgPoolBackward(E& e, void* gradInput, const void* gradOutput, DataType type, int64_t planes,
                       const Shape& inputSpatial, const AvgPool& pool) {
  Taps taps;
  std::vector<int64_t> divisors;
  DETCOLL_RETURN_IF_ERROR(avgPoolTaps(inputSpatial, pool, &taps, &divisors));
  return scatterShares(e, "avg_pool_backward", taps, divisors, gradInput, gradOutput, type, planes);
}

template <typename E>
Status adaptiveAvgPoolBackward(E& e, void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial) {
  Taps taps;
  std::vector<int64_t> divisors;
  DETCOLL_RETURN_IF_ERROR(adaptiveAvgPoolTaps(inputSpatial, outputSpatial, &taps, &divisors));
  return scatterShares(e, "adaptive_avg_pool_backward", taps, divisors, gradInput, gradOutput, type,
                       planes);
}

template <typename E>
Status maxPoolBackward(E& e, void* gradInput, const void* gradOutput, const int64_t* indices,
                       DataType type, int64_t planes, int64_t inner, int64_t outputs) {
  const char* op = "max_pool_backward";
  if (planes < 0 || inner < 0 || outputs < 0) {
    return Status::invalidArgument(std::string(op) + ": negative size");
  }
  const int64_t n = planes * outputs;
  if (n > 0 && indices == nullptr) {
    return Status::invalidArgument(std::string(op) + ": indices is null");
  }
  int64_t failed = kNoFailure;
  if (n > 0) {
    DETCOLL_RETURN_IF_ERROR(runCheck(
        e, n,
        [&](int64_t* bad) {
          return RangeCheckBody{indices, inner, Skip{}, bad};
        },
        &failed));
  }
  if (failed != kNoFailure) {
    return outOfRange("indices", failed, readIndex(e, indices, failed), inner).prefixed(op);
  }
  int64_t* destination = e.template alloc<int64_t>(n);
  e.launch(n, PlaneOffsets{indices, inner, outputs, destination});
  DETCOLL_RETURN_IF_ERROR(e.status());
  return weightedScatter(e, gradInput, 1, planes * inner, type, destination, n, gradOutput, n,
                         nullptr, nullptr)
      .prefixed(op);
}

}  // namespace detcoll::kernels::ops::bodies
