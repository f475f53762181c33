// The C entries of bicubic upsampling's, grid_sample's and ctc_loss's backward
// (kernels/ops/cubic.h, grid_sample.h, ctc.h), of nll_loss (losses.h), kthvalue and median
// (selection.h), crop_and_resize (crop.h), of the writes through indices, embedding_bag's max
// gradient and histc (writes.h), and of sparse x dense (scatter.h). Each is callOp (ops_glue.h):
// the placement and run rules of detcoll_ops.cc.

#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/ops_glue.h"
#include "kernels/ops/crop.h"
#include "kernels/ops/ctc.h"
#include "kernels/ops/cubic.h"
#include "kernels/ops/grid_sample.h"
#include "kernels/ops/losses.h"
#include "kernels/ops/selection.h"
#include "kernels/ops/writes.h"

using namespace detcoll;
using namespace detcoll::bindings::c;

namespace {

kernels::ops::Crop cropOf(int64_t batch, int64_t height, int64_t width, int64_t channels,
                          int64_t boxes, int64_t cropHeight, int64_t cropWidth, int nearest) {
  kernels::ops::Crop c;
  c.batch = batch;
  c.height = height;
  c.width = width;
  c.channels = channels;
  c.boxes = boxes;
  c.cropHeight = cropHeight;
  c.cropWidth = cropWidth;
  c.nearest = nearest != 0;
  return c;
}

detcoll_status_t selection(void* values, int64_t* indices, const void* input, detcoll_dtype_t dtype,
                           const kernels::ops::Selection& s) {
  return callOp(s.median ? "median" : "kthvalue", dtype,
                {{values, "values"}, {indices, "indices"}, {input, "input"}},
                DETCOLL_DEVICE_OP(select(values, indices, input, type, s, stream)),
                DETCOLL_HOST_OP(select(values, indices, input, type, s, g_opsThreads)));
}

}  // namespace

extern "C" {

detcoll_status_t detcoll_upsample_bicubic2d_backward(void* grad_input, const void* grad_output,
                                                     detcoll_dtype_t dtype, int64_t planes,
                                                     int64_t in_h, int64_t in_w, int64_t out_h,
                                                     int64_t out_w, int align_corners,
                                                     double scale_h, double scale_w) {
  const kernels::ops::Shape in{in_h, in_w}, out{out_h, out_w};
  const std::vector<double> scales{scale_h, scale_w};
  const bool align = align_corners != 0;
  return callOp("upsample_bicubic2d_backward", dtype,
                {{grad_input, "grad_input"}, {grad_output, "grad_output"}},
                DETCOLL_DEVICE_OP(upsampleBicubicBackward(grad_input, grad_output, type, planes, in,
                                                          out, align, scales, stream)),
                DETCOLL_HOST_OP(upsampleBicubicBackward(grad_input, grad_output, type, planes, in,
                                                        out, align, scales, g_opsThreads)));
}

detcoll_status_t detcoll_write_last(void* out, int64_t rows, int64_t width, detcoll_dtype_t dtype,
                                    const int64_t* destination, int64_t n, const void* values) {
  return callOp(
      "write_last", dtype, {{out, "out"}, {destination, "destination"}, {values, "values"}},
      DETCOLL_DEVICE_OP(writeLast(out, rows, width, type, destination, n, values, stream)),
      DETCOLL_HOST_OP(writeLast(out, rows, width, type, destination, n, values)));
}

detcoll_status_t detcoll_max_unpool(void* out, const void* input, const int64_t* indices,
                                    detcoll_dtype_t dtype, int64_t planes, int64_t inputs,
                                    int64_t outputs) {
  return callOp(
      "max_unpool", dtype, {{out, "out"}, {input, "input"}, {indices, "indices"}},
      DETCOLL_DEVICE_OP(maxUnpool(out, input, indices, type, planes, inputs, outputs, stream)),
      DETCOLL_HOST_OP(maxUnpool(out, input, indices, type, planes, inputs, outputs)));
}

detcoll_status_t detcoll_histc(void* out, int64_t bins, double min, double max, const void* input,
                               int64_t n, detcoll_dtype_t dtype) {
  return callOp("histc", dtype, {{out, "out"}, {input, "input"}},
                DETCOLL_DEVICE_OP(histc(out, type, input, n, bins, min, max, stream)),
                DETCOLL_HOST_OP(histc(out, type, input, n, bins, min, max)));
}

detcoll_status_t detcoll_embedding_bag_max_backward(void* grad_weight, int64_t num_weights,
                                                    detcoll_dtype_t dtype, const void* grad_output,
                                                    int64_t bags, int64_t dim,
                                                    const int64_t* maximum_indices,
                                                    const int64_t* bag_size, int64_t padding_idx) {
  return callOp("embedding_bag_max_backward", dtype,
                {{grad_weight, "grad_weight"},
                 {grad_output, "grad_output"},
                 {maximum_indices, "maximum_indices"},
                 {bag_size, "bag_size"}},
                DETCOLL_DEVICE_OP(embeddingBagMaxBackward(grad_weight, num_weights, type,
                                                          grad_output, bags, dim, maximum_indices,
                                                          bag_size, padding_idx, stream)),
                DETCOLL_HOST_OP(embeddingBagMaxBackward(grad_weight, num_weights, type, grad_output,
                                                        bags, dim, maximum_indices, bag_size,
                                                        padding_idx, g_opsThreads)));
}

detcoll_status_t detcoll_sparse_dense_matmul(void* out, int64_t out_rows, detcoll_dtype_t dtype,
                                             const int64_t* rows, const int64_t* cols,
                                             const void* values, int64_t nnz, const void* dense,
                                             int64_t dense_rows, int64_t columns) {
  return callOp(
      "sparse_dense_matmul", dtype,
      {{out, "out"}, {rows, "rows"}, {cols, "cols"}, {values, "values"}, {dense, "dense"}},
      DETCOLL_DEVICE_OP(sparseDenseMatmul(out, out_rows, type, rows, cols, values, nnz, dense,
                                          dense_rows, columns, stream)),
      DETCOLL_HOST_OP(sparseDenseMatmul(out, out_rows, type, rows, cols, values, nnz, dense,
                                        dense_rows, columns, g_opsThreads)));
}

detcoll_status_t detcoll_grid_sampler_backward(
    void* grad_input, void* grad_grid, const void* grad_output, const void* input, const void* grid,
    detcoll_dtype_t dtype, int64_t batch, int64_t channels, const int64_t* input_spatial,
    int spatial, int64_t positions, int interpolation_mode, int padding_mode, int align_corners) {
  const char* op = "grid_sampler_backward";
  kernels::ops::GridSample s;
  auto check = [&] {
    DETCOLL_RETURN_IF_ERROR(spatialRange(op, spatial, 2, 3, input_spatial != nullptr, "sizes"));
    s.spatial = spatial;
    s.batch = batch;
    s.channels = channels;
    for (int a = 0; a < spatial; ++a) s.sizes[a] = input_spatial[a];
    s.positions = positions;
    s.mode = static_cast<kernels::ops::GridMode>(interpolation_mode);
    s.padding = static_cast<kernels::ops::GridPadding>(padding_mode);
    s.alignCorners = align_corners != 0;
    return Status::ok();
  };
  return callOpChecked(op, dtype, check,
                       {{grad_input, "grad_input"},
                        {grad_grid, "grad_grid"},
                        {grad_output, "grad_output"},
                        {input, "input"},
                        {grid, "grid"}},
                       DETCOLL_DEVICE_OP(gridSamplerBackward(grad_input, grad_grid, grad_output,
                                                             input, grid, type, s, stream)),
                       DETCOLL_HOST_OP(gridSamplerBackward(grad_input, grad_grid, grad_output,
                                                           input, grid, type, s, g_opsThreads)));
}

detcoll_status_t detcoll_ctc_loss_backward(void* grad_log_probs, const void* grad,
                                           const void* log_probs, const int64_t* targets,
                                           int64_t target_stride, const int64_t* input_lengths,
                                           const int64_t* target_lengths,
                                           const void* neg_log_likelihood, const void* log_alpha,
                                           int64_t alpha_width, detcoll_dtype_t dtype,
                                           int64_t steps, int64_t batch, int64_t classes,
                                           int64_t blank, int zero_infinity) {
  kernels::ops::Ctc c;
  c.steps = steps;
  c.batch = batch;
  c.classes = classes;
  c.blank = blank;
  c.targetStride = target_stride;
  c.alphaWidth = alpha_width;
  c.zeroInfinity = zero_infinity != 0;
  // The lengths are host arrays, as sizes are: not placed.
  return callOp("ctc_loss_backward", dtype,
                {{grad_log_probs, "grad_log_probs"},
                 {grad, "grad"},
                 {log_probs, "log_probs"},
                 {targets, "targets"},
                 {neg_log_likelihood, "neg_log_likelihood"},
                 {log_alpha, "log_alpha"}},
                DETCOLL_DEVICE_OP(ctcLossBackward(grad_log_probs, grad, log_probs, targets,
                                                  input_lengths, target_lengths, neg_log_likelihood,
                                                  log_alpha, type, c, stream)),
                DETCOLL_HOST_OP(ctcLossBackward(grad_log_probs, grad, log_probs, targets,
                                                input_lengths, target_lengths, neg_log_likelihood,
                                                log_alpha, type, c, g_opsThreads)));
}

detcoll_status_t detcoll_nll_loss(void* output, void* total_weight, const void* input,
                                  const int64_t* target, const void* weight, detcoll_dtype_t dtype,
                                  int64_t batch, int64_t classes, int64_t inner,
                                  int64_t ignore_index, int reduction) {
  kernels::ops::NllLoss l;
  l.outer = batch;
  l.classes = classes;
  l.inner = inner;
  l.ignoreIndex = ignore_index;
  l.reduction = reduction;
  return callOp(
      "nll_loss", dtype,
      {{output, "output"},
       {total_weight, "total_weight"},
       {input, "input"},
       {target, "target"},
       {weight, "weight"}},
      DETCOLL_DEVICE_OP(nllLoss(output, total_weight, input, target, weight, type, l, stream)),
      DETCOLL_HOST_OP(nllLoss(output, total_weight, input, target, weight, type, l, g_opsThreads)));
}

detcoll_status_t detcoll_kthvalue(void* values, int64_t* indices, const void* input,
                                  detcoll_dtype_t dtype, int64_t outer, int64_t length,
                                  int64_t inner, int64_t k) {
  kernels::ops::Selection s;
  s.outer = outer;
  s.length = length;
  s.inner = inner;
  s.k = k;
  return selection(values, indices, input, dtype, s);
}

detcoll_status_t detcoll_median(void* values, int64_t* indices, const void* input,
                                detcoll_dtype_t dtype, int64_t outer, int64_t length,
                                int64_t inner) {
  kernels::ops::Selection s;
  s.outer = outer;
  s.length = length;
  s.inner = inner;
  s.k = (length + 1) / 2;
  s.median = true;
  if (length == 0 && outer * inner > 0) {
    return finish(Status::invalidArgument("median: a dimension of 0 elements has no median"));
  }
  return selection(values, indices, input, dtype, s);
}

detcoll_status_t detcoll_crop_and_resize(void* out, const void* image, const void* boxes,
                                         const int64_t* box_indices, detcoll_dtype_t dtype,
                                         int64_t batch, int64_t height, int64_t width,
                                         int64_t channels, int64_t num_boxes, int64_t crop_height,
                                         int64_t crop_width, int nearest,
                                         double extrapolation_value) {
  kernels::ops::Crop c =
      cropOf(batch, height, width, channels, num_boxes, crop_height, crop_width, nearest);
  c.extrapolation = extrapolation_value;
  return callOp(
      "crop_and_resize", dtype,
      {{out, "out"}, {image, "image"}, {boxes, "boxes"}, {box_indices, "box_indices"}},
      DETCOLL_DEVICE_OP(cropAndResize(out, image, boxes, box_indices, type, c, stream)),
      DETCOLL_HOST_OP(cropAndResize(out, image, boxes, box_indices, type, c, g_opsThreads)));
}

detcoll_status_t detcoll_crop_and_resize_backward(
    void* grad_image, void* grad_boxes, const void* grads, const void* image, const void* boxes,
    const int64_t* box_indices, detcoll_dtype_t dtype, int64_t batch, int64_t height, int64_t width,
    int64_t channels, int64_t num_boxes, int64_t crop_height, int64_t crop_width, int nearest) {
  const kernels::ops::Crop c =
      cropOf(batch, height, width, channels, num_boxes, crop_height, crop_width, nearest);
  return callOp("crop_and_resize_backward", dtype,
                {{grad_image, "grad_image"},
                 {grad_boxes, "grad_boxes"},
                 {grads, "grads"},
                 {image, "image"},
                 {boxes, "boxes"},
                 {box_indices, "box_indices"}},
                DETCOLL_DEVICE_OP(cropAndResizeBackward(grad_image, grad_boxes, grads, image, boxes,
                                                        box_indices, type, c, stream)),
                DETCOLL_HOST_OP(cropAndResizeBackward(grad_image, grad_boxes, grads, image, boxes,
                                                      box_indices, type, c, g_opsThreads)));
}

}  // extern "C"
