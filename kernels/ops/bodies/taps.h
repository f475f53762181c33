#pragma once

// The backward of padding and of linear upsampling (taps.h) on an executor: the taps, computed
// on the host as the CPU reference computes them, copied to the executor's memory, then
// weightedScatter's data-parallel formulation (scatter.h). The same taps and the same scatter
// contract give the CPU reference's bits.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/scatter.h"
#include "kernels/ops/bodies/writes.h"
#include "kernels/ops/cubic.h"
#include "kernels/ops/taps.h"

namespace detcoll::kernels::ops::bodies {

template <typename E, typename T>
const T* upload(E& e, const std::vector<T>& host) {
  if (host.empty()) return nullptr;
  T* device = e.template alloc<T>(static_cast<int64_t>(host.size()));
  e.toDevice(device, host.data(), host.size() * sizeof(T));
  return device;
}

// Separable taps' axes uploaded and expanded on the executor (CombineBody): destination, rows
// and weights there.
template <typename E, typename O>
Status expandOn(E& e, const Taps& taps, const int64_t** destination, const int64_t** rows,
                const O** weights) {
  CombineBody<O> body{};
  const bool weighted = !taps.axes[0].weight32.empty() || !taps.axes[0].weight64.empty();
  for (int a = 0; a < 3; ++a) {
    const TapAxis& t = taps.axes[a];
    body.inputs[a] = t.inputs;
    body.outputs[a] = t.outputs;
    body.taps[a] = t.taps;
    body.index[a] = upload(e, t.index);
    if constexpr (std::is_same_v<O, double>) {
      body.weight[a] = weighted ? upload(e, t.weight64) : nullptr;
    } else {
      body.weight[a] = weighted ? upload(e, t.weight32) : nullptr;
    }
  }
  const int64_t per = body.taps[0] * body.taps[1] * body.taps[2], n = taps.outputs * per;
  body.destination = e.template alloc<int64_t>(n);
  body.rows = per > 1 ? e.template alloc<int64_t>(n) : nullptr;
  body.weights = weighted ? e.template alloc<O>(n) : nullptr;
  e.launch(n, body);
  *destination = body.destination;
  *rows = body.rows;
  *weights = body.weights;
  return e.status();
}

template <typename E>
Status scatterTaps(E& e, const char* op, const Taps& taps, void* gradInput, const void* gradOutput,
                   DataType type, int64_t planes) {
  if (planes < 0) return Status::invalidArgument(std::string(op) + ": negative size");
  const bool wide = type == DataType::kFloat64;
  const bool separable = !taps.axes.empty() && taps.destination.empty();
  const bool weighted = separable ? !taps.axes[0].weight32.empty() || !taps.axes[0].weight64.empty()
                                  : taps.weights() != nullptr;
  const bool wideWeights = separable ? !taps.axes[0].weight64.empty() : !taps.weights64.empty();
  if (weighted && wide != wideWeights) {
    return Status::internal(std::string(op) + ": taps of the other precision");
  }
  const int64_t* destination = nullptr;
  const int64_t* rows = nullptr;
  const void* weights = nullptr;
  int64_t n = 0;
  if (separable) {
    n = taps.outputs * taps.axes[0].taps * taps.axes[1].taps * taps.axes[2].taps;
    if (wide) {
      const double* w = nullptr;
      DETCOLL_RETURN_IF_ERROR(expandOn(e, taps, &destination, &rows, &w));
      weights = w;
    } else {
      const float* w = nullptr;
      DETCOLL_RETURN_IF_ERROR(expandOn(e, taps, &destination, &rows, &w));
      weights = w;
    }
  } else {
    n = static_cast<int64_t>(taps.destination.size());
    destination = upload(e, taps.destination);
    rows = upload(e, taps.rows);
    weights = wide ? static_cast<const void*>(upload(e, taps.weights64))
                   : static_cast<const void*>(upload(e, taps.weights32));
  }
  DETCOLL_RETURN_IF_ERROR(e.status());
  return weightedScatter(e, gradInput, planes, taps.inputs, type, destination, n, gradOutput,
                         taps.outputs, rows, weights)
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

template <typename E>
Status upsampleNearestBackward(E& e, void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, const std::vector<double>& scales) {
  Taps taps;
  DETCOLL_RETURN_IF_ERROR(nearestTaps(inputSpatial, outputSpatial, scales, &taps));
  return scatterTaps(e, "upsample_nearest_backward", taps, gradInput, gradOutput, type, planes);
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
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {planes, inner}));
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {planes, outputs}));
  const int64_t n = planes * outputs;
  if (n > 0 && indices == nullptr) {
    return Status::invalidArgument(std::string(op) + ": indices is null");
  }
  int64_t* destination = nullptr;
  DETCOLL_RETURN_IF_ERROR(
      planeDestinations(e, indices, planes, outputs, inner, &destination).prefixed(op));
  return weightedScatter(e, gradInput, 1, planes * inner, type, destination, n, gradOutput, n,
                         nullptr, nullptr)
      .prefixed(op);
}

template <typename U>
struct CopyBody {
  const U* in;
  U* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const { out[i] = in[i]; }
};

// Bicubic (cubic.h): the axes' taps from the host, each source's destination and rounded product
// on the executor, then weightedScatter without weights.
template <typename E>
Status upsampleBicubicBackward(E& e, void* gradInput, const void* gradOutput, DataType type,
                               int64_t planes, const Shape& inputSpatial,
                               const Shape& outputSpatial, bool alignCorners,
                               const std::vector<double>& scales) {
  const char* op = "upsample_bicubic2d_backward";
  CubicTaps taps;
  DETCOLL_RETURN_IF_ERROR(cubicCall(type, inputSpatial, outputSpatial, alignCorners, scales, planes,
                                    gradInput, gradOutput, &taps));
  const int64_t inputs = taps.inHeight * taps.inWidth, outputs = taps.outHeight * taps.outWidth;
  if (planes == 0) return Status::ok();
  if (inputSpatial == outputSpatial) {
    visitWord(type, [&](auto tag) {
      using U = typename decltype(tag)::type;
      e.launch(planes * inputs,
               CopyBody<U>{static_cast<const U*>(gradOutput), static_cast<U*>(gradInput)});
    });
    return e.status();
  }
  const int64_t n = outputs * 16;
  const int64_t* ty = upload(e, taps.ty);
  const int64_t* tx = upload(e, taps.tx);
  int64_t* destination = e.template alloc<int64_t>(n);
  e.launch(n, CubicDestinationBody{ty, tx, taps.outWidth, taps.inWidth, destination});
  void* products = nullptr;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using O = typename kernels::Traits<T>::Acc;
    if constexpr (isFloatingStorage<T>()) {
      const O* wy;
      const O* wx;
      if constexpr (std::is_same_v<O, double>) {
        wy = upload(e, taps.wy64);
        wx = upload(e, taps.wx64);
      } else {
        wy = upload(e, taps.wy32);
        wx = upload(e, taps.wx32);
      }
      T* out = e.template alloc<T>(planes * n);
      e.launch(planes * n, CubicProductsBody<T, O>{static_cast<const T*>(gradOutput), wy, wx,
                                                   taps.outWidth, outputs, out});
      products = out;
    }
  });
  DETCOLL_RETURN_IF_ERROR(e.status());
  return weightedScatter(e, gradInput, planes, inputs, type, destination, n, products, n, nullptr,
                         nullptr)
      .prefixed(op);
}

}  // namespace detcoll::kernels::ops::bodies
