// The C entries of the ops built on weighted_scatter (kernels/ops/scatter.h, taps.h): the scatter
// itself, and the backward of padding, pooling and linear and nearest upsampling, whose taps the
// host computes. Each is callOp (ops_glue.h): the placement and run rules of detcoll_ops.cc; the
// gradient entries check their spatial arrays first and copy them once they are known good.

#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/ops_glue.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/taps.h"

using namespace detcoll;
using namespace detcoll::bindings::c;

namespace {

using kernels::ops::Shape;

// array[0 .. count) as a vector of T.
template <typename T, typename U>
std::vector<T> copyOf(const U* array, int count) {
  return std::vector<T>(array, array + count);
}

// The resampling entries' sizes and scales (scales may be null: none).
struct Resampling {
  Shape in, out;
  std::vector<double> scales;
  Status take(const char* op, int spatial, int lo, const int64_t* inputSpatial,
              const int64_t* outputSpatial, const double* scaleFactors) {
    DETCOLL_RETURN_IF_ERROR(
        spatialRange(op, spatial, lo, 3, inputSpatial && outputSpatial, "their sizes"));
    in = copyOf<int64_t>(inputSpatial, spatial);
    out = copyOf<int64_t>(outputSpatial, spatial);
    if (scaleFactors != nullptr) scales = copyOf<double>(scaleFactors, spatial);
    return Status::ok();
  }
};

}  // namespace

extern "C" {

detcoll_status_t detcoll_pad_backward(void* grad_input, const void* grad_output,
                                      detcoll_dtype_t dtype, int64_t planes,
                                      const int64_t* input_spatial, int spatial,
                                      const int64_t* padding, int reflect) {
  const char* op = reflect ? "reflection_pad_backward" : "replication_pad_backward";
  Shape in;
  std::vector<int64_t> pads;
  auto check = [&] {
    DETCOLL_RETURN_IF_ERROR(
        spatialRange(op, spatial, 1, 3, input_spatial && padding, "their sizes and padding"));
    in = copyOf<int64_t>(input_spatial, spatial);
    pads = copyOf<int64_t>(padding, 2 * spatial);
    return Status::ok();
  };
  return callOpChecked(op, dtype, check, {{grad_input, "grad_input"}, {grad_output, "grad_output"}},
                       DETCOLL_DEVICE_OP(padBackward(grad_input, grad_output, type, planes, in,
                                                     pads, reflect != 0, stream)),
                       DETCOLL_HOST_OP(padBackward(grad_input, grad_output, type, planes, in, pads,
                                                   reflect != 0, g_opsThreads)));
}

detcoll_status_t detcoll_upsample_linear_backward(void* grad_input, const void* grad_output,
                                                  detcoll_dtype_t dtype, int64_t planes,
                                                  const int64_t* input_spatial,
                                                  const int64_t* output_spatial, int spatial,
                                                  int align_corners, const double* scales) {
  const char* op = "upsample_linear_backward";
  Resampling r;
  const bool align = align_corners != 0;
  return callOpChecked(
      op, dtype, [&] { return r.take(op, spatial, 1, input_spatial, output_spatial, scales); },
      {{grad_input, "grad_input"}, {grad_output, "grad_output"}},
      DETCOLL_DEVICE_OP(upsampleLinearBackward(grad_input, grad_output, type, planes, r.in, r.out,
                                               align, r.scales, stream)),
      DETCOLL_HOST_OP(upsampleLinearBackward(grad_input, grad_output, type, planes, r.in, r.out,
                                             align, r.scales, g_opsThreads)));
}

detcoll_status_t detcoll_upsample_nearest_backward(void* grad_input, const void* grad_output,
                                                   detcoll_dtype_t dtype, int64_t planes,
                                                   const int64_t* input_spatial,
                                                   const int64_t* output_spatial, int spatial,
                                                   const double* scales) {
  const char* op = "upsample_nearest_backward";
  Resampling r;
  return callOpChecked(
      op, dtype, [&] { return r.take(op, spatial, 1, input_spatial, output_spatial, scales); },
      {{grad_input, "grad_input"}, {grad_output, "grad_output"}},
      DETCOLL_DEVICE_OP(upsampleNearestBackward(grad_input, grad_output, type, planes, r.in, r.out,
                                                r.scales, stream)),
      DETCOLL_HOST_OP(upsampleNearestBackward(grad_input, grad_output, type, planes, r.in, r.out,
                                              r.scales, g_opsThreads)));
}

detcoll_status_t detcoll_weighted_scatter(void* out, int64_t planes, int64_t out_inner,
                                          detcoll_dtype_t dtype, const int64_t* destination,
                                          int64_t n, const void* values, int64_t values_inner,
                                          const int64_t* rows, const void* weights) {
  return callOp(
      "weighted_scatter", dtype,
      {{out, "out"},
       {destination, "destination"},
       {values, "values"},
       {rows, "rows"},
       {weights, "weights"}},
      DETCOLL_DEVICE_OP(weightedScatter(out, planes, out_inner, type, destination, n, values,
                                        values_inner, rows, weights, stream)),
      DETCOLL_HOST_OP(weightedScatter(out, planes, out_inner, type, destination, n, values,
                                      values_inner, rows, weights, g_opsThreads)));
}

detcoll_status_t detcoll_avg_pool_backward(void* grad_input, const void* grad_output,
                                           detcoll_dtype_t dtype, int64_t planes,
                                           const int64_t* input_spatial, int spatial,
                                           const int64_t* kernel, const int64_t* stride,
                                           const int64_t* padding, int ceil_mode,
                                           int count_include_pad, int64_t divisor_override) {
  const char* op = "avg_pool_backward";
  Shape in;
  kernels::ops::AvgPool pool;
  auto check = [&] {
    DETCOLL_RETURN_IF_ERROR(spatialRange(op, spatial, 2, 3,
                                         input_spatial && kernel && stride && padding,
                                         "their sizes, kernel, stride and padding"));
    in = copyOf<int64_t>(input_spatial, spatial);
    pool.kernel = copyOf<int64_t>(kernel, spatial);
    pool.stride = copyOf<int64_t>(stride, spatial);
    pool.padding = copyOf<int64_t>(padding, spatial);
    pool.ceilMode = ceil_mode != 0;
    pool.countIncludePad = count_include_pad != 0;
    pool.divisorOverride = divisor_override;
    return Status::ok();
  };
  return callOpChecked(
      op, dtype, check, {{grad_input, "grad_input"}, {grad_output, "grad_output"}},
      DETCOLL_DEVICE_OP(avgPoolBackward(grad_input, grad_output, type, planes, in, pool, stream)),
      DETCOLL_HOST_OP(
          avgPoolBackward(grad_input, grad_output, type, planes, in, pool, g_opsThreads)));
}

detcoll_status_t detcoll_adaptive_avg_pool_backward(void* grad_input, const void* grad_output,
                                                    detcoll_dtype_t dtype, int64_t planes,
                                                    const int64_t* input_spatial,
                                                    const int64_t* output_spatial, int spatial) {
  const char* op = "adaptive_avg_pool_backward";
  Resampling r;
  return callOpChecked(
      op, dtype, [&] { return r.take(op, spatial, 2, input_spatial, output_spatial, nullptr); },
      {{grad_input, "grad_input"}, {grad_output, "grad_output"}},
      DETCOLL_DEVICE_OP(
          adaptiveAvgPoolBackward(grad_input, grad_output, type, planes, r.in, r.out, stream)),
      DETCOLL_HOST_OP(adaptiveAvgPoolBackward(grad_input, grad_output, type, planes, r.in, r.out,
                                              g_opsThreads)));
}

detcoll_status_t detcoll_max_pool_backward(void* grad_input, const void* grad_output,
                                           const int64_t* indices, detcoll_dtype_t dtype,
                                           int64_t planes, int64_t inner, int64_t outputs) {
  return callOp("max_pool_backward", dtype,
                {{grad_input, "grad_input"}, {grad_output, "grad_output"}, {indices, "indices"}},
                DETCOLL_DEVICE_OP(maxPoolBackward(grad_input, grad_output, indices, type, planes,
                                                  inner, outputs, stream)),
                DETCOLL_HOST_OP(maxPoolBackward(grad_input, grad_output, indices, type, planes,
                                                inner, outputs, g_opsThreads)));
}

}  // extern "C"
