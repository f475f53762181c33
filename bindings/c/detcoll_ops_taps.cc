// The C entries of the ops built on weighted_scatter (kernels/ops/scatter.h, taps.h): the scatter
// itself, and the backward of padding and of linear upsampling, whose taps the host computes.
// The same placement and run rules as detcoll_ops.cc (ops_glue.h).

#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/ops_glue.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/taps.h"

using namespace detcoll;
using namespace detcoll::bindings::c;

namespace {

// What every gradient entry here checks first: a known dtype, lo to hi spatial dimensions with
// their arrays given (`what` names them), and where the two buffers live.
Status gradientCall(const char* op, detcoll_dtype_t dtype, int spatial, int lo, int hi, bool given,
                    const char* what, const void* gradInput, const void* gradOutput, DataType* type,
                    int* device) {
  DETCOLL_RETURN_IF_ERROR(typeOf(op, dtype, type));
  if (spatial < lo || spatial > hi || !given) {
    return Status::invalidArgument(std::string(op) + ": " + std::to_string(lo) +
                                   (hi == lo + 1 ? " or " : " to ") + std::to_string(hi) +
                                   " spatial dimensions, with " + what);
  }
  return placeOf(op, {{gradInput, "grad_input"}, {gradOutput, "grad_output"}}, device);
}

}  // namespace

extern "C" {

detcoll_status_t detcoll_pad_backward(void* grad_input, const void* grad_output,
                                      detcoll_dtype_t dtype, int64_t planes,
                                      const int64_t* input_spatial, int spatial,
                                      const int64_t* padding, int reflect) {
  const char* op = reflect ? "reflection_pad_backward" : "replication_pad_backward";
  int device = -1;
  DataType type;
  Status status = gradientCall(op, dtype, spatial, 1, 3, input_spatial && padding,
                               "their sizes and padding", grad_input, grad_output, &type, &device);
  if (status.isOk()) {
    const kernels::ops::Shape in(input_spatial, input_spatial + spatial);
    const std::vector<int64_t> pads(padding, padding + 2 * spatial);
    status = run(op, device,
                 DETCOLL_ON_DEVICE(padBackward(grad_input, grad_output, type, planes, in, pads,
                                               reflect != 0, stream)),
                 [&] {
                   return kernels::ops::padBackward(grad_input, grad_output, type, planes, in, pads,
                                                    reflect != 0, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_upsample_linear_backward(void* grad_input, const void* grad_output,
                                                  detcoll_dtype_t dtype, int64_t planes,
                                                  const int64_t* input_spatial,
                                                  const int64_t* output_spatial, int spatial,
                                                  int align_corners, const double* scales) {
  const char* op = "upsample_linear_backward";
  int device = -1;
  DataType type;
  Status status = gradientCall(op, dtype, spatial, 1, 3, input_spatial && output_spatial,
                               "their sizes", grad_input, grad_output, &type, &device);
  if (status.isOk()) {
    const kernels::ops::Shape in(input_spatial, input_spatial + spatial),
        out(output_spatial, output_spatial + spatial);
    const std::vector<double> s =
        scales ? std::vector<double>(scales, scales + spatial) : std::vector<double>();
    status =
        run(op, device,
            DETCOLL_ON_DEVICE(upsampleLinearBackward(grad_input, grad_output, type, planes, in, out,
                                                     align_corners != 0, s, stream)),
            [&] {
              return kernels::ops::upsampleLinearBackward(grad_input, grad_output, type, planes, in,
                                                          out, align_corners != 0, s, g_opsThreads);
            });
  }
  return finish(status);
}

detcoll_status_t detcoll_upsample_nearest_backward(void* grad_input, const void* grad_output,
                                                   detcoll_dtype_t dtype, int64_t planes,
                                                   const int64_t* input_spatial,
                                                   const int64_t* output_spatial, int spatial,
                                                   const double* scales) {
  const char* op = "upsample_nearest_backward";
  int device = -1;
  DataType type;
  Status status = gradientCall(op, dtype, spatial, 1, 3, input_spatial && output_spatial,
                               "their sizes", grad_input, grad_output, &type, &device);
  if (status.isOk()) {
    const kernels::ops::Shape in(input_spatial, input_spatial + spatial),
        out(output_spatial, output_spatial + spatial);
    const std::vector<double> s =
        scales ? std::vector<double>(scales, scales + spatial) : std::vector<double>();
    status = run(op, device,
                 DETCOLL_ON_DEVICE(upsampleNearestBackward(grad_input, grad_output, type, planes,
                                                           in, out, s, stream)),
                 [&] {
                   return kernels::ops::upsampleNearestBackward(grad_input, grad_output, type,
                                                                planes, in, out, s, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_weighted_scatter(void* out, int64_t planes, int64_t out_inner,
                                          detcoll_dtype_t dtype, const int64_t* destination,
                                          int64_t n, const void* values, int64_t values_inner,
                                          const int64_t* rows, const void* weights) {
  const char* op = "weighted_scatter";
  int device = -1;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) {
    status = placeOf(op,
                     {{out, "out"},
                      {destination, "destination"},
                      {values, "values"},
                      {rows, "rows"},
                      {weights, "weights"}},
                     &device);
  }
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(weightedScatter(out, planes, out_inner, type, destination, n,
                                                   values, values_inner, rows, weights, stream)),
                 [&] {
                   return kernels::ops::weightedScatter(out, planes, out_inner, type, destination,
                                                        n, values, values_inner, rows, weights,
                                                        g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_avg_pool_backward(void* grad_input, const void* grad_output,
                                           detcoll_dtype_t dtype, int64_t planes,
                                           const int64_t* input_spatial, int spatial,
                                           const int64_t* kernel, const int64_t* stride,
                                           const int64_t* padding, int ceil_mode,
                                           int count_include_pad, int64_t divisor_override) {
  const char* op = "avg_pool_backward";
  int device = -1;
  DataType type;
  Status status = gradientCall(
      op, dtype, spatial, 2, 3, input_spatial && kernel && stride && padding,
      "their sizes, kernel, stride and padding", grad_input, grad_output, &type, &device);
  if (status.isOk()) {
    const kernels::ops::Shape in(input_spatial, input_spatial + spatial);
    kernels::ops::AvgPool pool;
    pool.kernel.assign(kernel, kernel + spatial);
    pool.stride.assign(stride, stride + spatial);
    pool.padding.assign(padding, padding + spatial);
    pool.ceilMode = ceil_mode != 0;
    pool.countIncludePad = count_include_pad != 0;
    pool.divisorOverride = divisor_override;
    status = run(
        op, device,
        DETCOLL_ON_DEVICE(avgPoolBackward(grad_input, grad_output, type, planes, in, pool, stream)),
        [&] {
          return kernels::ops::avgPoolBackward(grad_input, grad_output, type, planes, in, pool,
                                               g_opsThreads);
        });
  }
  return finish(status);
}

detcoll_status_t detcoll_adaptive_avg_pool_backward(void* grad_input, const void* grad_output,
                                                    detcoll_dtype_t dtype, int64_t planes,
                                                    const int64_t* input_spatial,
                                                    const int64_t* output_spatial, int spatial) {
  const char* op = "adaptive_avg_pool_backward";
  int device = -1;
  DataType type;
  Status status = gradientCall(op, dtype, spatial, 2, 3, input_spatial && output_spatial,
                               "their sizes", grad_input, grad_output, &type, &device);
  if (status.isOk()) {
    const kernels::ops::Shape in(input_spatial, input_spatial + spatial),
        out(output_spatial, output_spatial + spatial);
    status = run(op, device,
                 DETCOLL_ON_DEVICE(adaptiveAvgPoolBackward(grad_input, grad_output, type, planes,
                                                           in, out, stream)),
                 [&] {
                   return kernels::ops::adaptiveAvgPoolBackward(grad_input, grad_output, type,
                                                                planes, in, out, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_max_pool_backward(void* grad_input, const void* grad_output,
                                           const int64_t* indices, detcoll_dtype_t dtype,
                                           int64_t planes, int64_t inner, int64_t outputs) {
  const char* op = "max_pool_backward";
  int device = -1;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) {
    status = placeOf(
        op, {{grad_input, "grad_input"}, {grad_output, "grad_output"}, {indices, "indices"}},
        &device);
  }
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(maxPoolBackward(grad_input, grad_output, indices, type, planes,
                                                   inner, outputs, stream)),
                 [&] {
                   return kernels::ops::maxPoolBackward(grad_input, grad_output, indices, type,
                                                        planes, inner, outputs, g_opsThreads);
                 });
  }
  return finish(status);
}

}  // extern "C"
