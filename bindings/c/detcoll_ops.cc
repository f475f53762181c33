// The C API of the deterministic ops (kernels/ops/): on host memory with the CPU reference, on the
// memory of one CUDA device with the device kernels (kernels/ops/device.h), the same bits, on the
// calling thread's stream (detcoll_set_cuda_stream) or, with none set, the legacy default stream,
// waited for. A call's buffers are all of one kind, or the first that differs is named.

#include <atomic>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/ops_glue.h"
#include "bindings/c/runtime.h"
#include "common/config.h"
#include "kernels/ops/axis_sums.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/scatter.h"
#include "kernels/ops/taps.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/ops/device.h"
#endif

namespace detcoll::bindings::c {
std::atomic<int> g_opsThreads{0};
}  // namespace detcoll::bindings::c

using namespace detcoll;
using namespace detcoll::bindings::c;

extern "C" {

detcoll_status_t detcoll_ops_set_threads(int threads) {
  if (threads < 0) {
    return finish(Status::invalidArgument("detcoll_ops_set_threads: threads is " +
                                          std::to_string(threads) + "; 0 means every core"));
  }
  g_opsThreads = threads;
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_scatter_add(void* self, const int64_t* self_shape, int ndim,
                                     detcoll_dtype_t dtype, int dim, const int64_t* index,
                                     const int64_t* index_shape, const void* src,
                                     const int64_t* src_shape) {
  const char* op = "scatter_add";
  int device = -1;
  kernels::ops::Shape s, i, r;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = shapeOf(op, "self", self_shape, ndim, &s);
  if (status.isOk()) status = shapeOf(op, "index", index_shape, ndim, &i);
  if (status.isOk()) status = shapeOf(op, "src", src_shape, ndim, &r);
  if (status.isOk())
    status = placeOf(op, {{self, "self"}, {index, "index"}, {src, "src"}}, &device);
  if (status.isOk())
    status =
        run(op, device, DETCOLL_ON_DEVICE(scatterAdd(self, s, type, dim, index, i, src, r, stream)),
            [&] {
              return kernels::ops::scatterAdd(self, s, type, dim, index, i, src, r, g_opsThreads);
            });
  return finish(status);
}

detcoll_status_t detcoll_index_add(void* self, const int64_t* self_shape, int ndim,
                                   detcoll_dtype_t dtype, int dim, const int64_t* index,
                                   int64_t index_count, const void* source,
                                   const int64_t* source_shape, double alpha) {
  const char* op = "index_add";
  int device = -1;
  kernels::ops::Shape s, r;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = shapeOf(op, "self", self_shape, ndim, &s);
  if (status.isOk()) status = shapeOf(op, "source", source_shape, ndim, &r);
  if (status.isOk()) {
    status = placeOf(op, {{self, "self"}, {index, "index"}, {source, "source"}}, &device);
  }
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(
                     indexAdd(self, s, type, dim, index, index_count, source, r, alpha, stream)),
                 [&] {
                   return kernels::ops::indexAdd(self, s, type, dim, index, index_count, source, r,
                                                 alpha, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_unsorted_segment_reduce(void* out, int64_t segments, detcoll_dtype_t dtype,
                                                 const void* data, const int64_t* data_shape,
                                                 int ndim, const int64_t* segment_ids, int id_dims,
                                                 int mean) {
  const char* op = mean ? "unsorted_segment_mean" : "unsorted_segment_sum";
  int device = -1;
  kernels::ops::Shape d;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = shapeOf(op, "data", data_shape, ndim, &d);
  if (status.isOk()) {
    status = placeOf(op, {{out, "out"}, {data, "data"}, {segment_ids, "segment_ids"}}, &device);
  }
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(unsortedSegmentReduce(out, segments, type, data, d, segment_ids,
                                                         id_dims, mean != 0, stream)),
                 [&] {
                   return kernels::ops::unsortedSegmentReduce(
                       out, segments, type, data, d, segment_ids, id_dims, mean != 0, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_embedding_backward(void* grad_weight, int64_t num_weights,
                                            detcoll_dtype_t dtype, const void* grad_output,
                                            int64_t count, int64_t dim, const int64_t* indices,
                                            int64_t padding_idx, int scale_grad_by_freq) {
  const char* op = "embedding_backward";
  int device = -1;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) {
    status = placeOf(
        op, {{grad_weight, "grad_weight"}, {grad_output, "grad_output"}, {indices, "indices"}},
        &device);
  }
  if (status.isOk()) {
    status = run(
        op, device,
        DETCOLL_ON_DEVICE(embeddingBackward(grad_weight, num_weights, type, grad_output, count, dim,
                                            indices, padding_idx, scale_grad_by_freq != 0, stream)),
        [&] {
          return kernels::ops::embeddingBackward(grad_weight, num_weights, type, grad_output, count,
                                                 dim, indices, padding_idx, scale_grad_by_freq != 0,
                                                 g_opsThreads);
        });
  }
  return finish(status);
}

detcoll_status_t detcoll_embedding_bag_backward(void* grad_weight, int64_t num_weights,
                                                detcoll_dtype_t dtype, const void* grad_output,
                                                int64_t bags, int64_t dim, const int64_t* indices,
                                                int64_t count, const int64_t* offsets, int mean,
                                                const void* per_sample_weights,
                                                int64_t padding_idx) {
  const char* op = "embedding_bag_backward";
  int device = -1;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) {
    status = placeOf(op,
                     {{grad_weight, "grad_weight"},
                      {grad_output, "grad_output"},
                      {indices, "indices"},
                      {offsets, "offsets"},
                      {per_sample_weights, "per_sample_weights"}},
                     &device);
  }
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(embeddingBagBackward(
                     grad_weight, num_weights, type, grad_output, bags, dim, indices, count,
                     offsets, mean != 0, per_sample_weights, padding_idx, stream)),
                 [&] {
                   return kernels::ops::embeddingBagBackward(
                       grad_weight, num_weights, type, grad_output, bags, dim, indices, count,
                       offsets, mean != 0, per_sample_weights, padding_idx, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_bincount(void* out, int64_t* out_length, detcoll_dtype_t dtype,
                                  const int64_t* input, int64_t count, const void* weights,
                                  int64_t minlength) {
  const char* op = "bincount";
  int device = -1;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) {
    status = placeOf(op, {{out, "out"}, {input, "input"}, {weights, "weights"}}, &device);
  }
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(
                     bincount(out, out_length, type, input, count, weights, minlength, stream)),
                 [&] {
                   return kernels::ops::bincount(out, out_length, type, input, count, weights,
                                                 minlength, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_sum_over_axes(const void* in, const int64_t* shape, int ndim,
                                       detcoll_dtype_t dtype, const int* axes, int naxes,
                                       void* out) {
  const char* op = "sum";
  int device = -1;
  kernels::ops::Shape s;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = shapeOf(op, "in", shape, ndim, &s);
  if (status.isOk() && (naxes < 0 || (naxes > 0 && axes == nullptr))) {
    status = Status::invalidArgument("sum: axes is null or naxes negative");
  }
  if (status.isOk()) status = placeOf(op, {{in, "in"}, {out, "out"}}, &device);
  if (status.isOk()) {
    status = run(op, device,
                 DETCOLL_ON_DEVICE(
                     sumOverAxes(in, s, type, std::vector<int>(axes, axes + naxes), out, stream)),
                 [&] {
                   return kernels::ops::sumOverAxes(
                       in, s, type, std::vector<int>(axes, axes + naxes), out, g_opsThreads);
                 });
  }
  return finish(status);
}

detcoll_status_t detcoll_bias_add_grad(const void* grad, const int64_t* shape, int ndim,
                                       detcoll_dtype_t dtype, int channels_first, void* out) {
  const char* op = "bias_add_grad";
  int device = -1;
  kernels::ops::Shape s;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = shapeOf(op, "grad", shape, ndim, &s);
  if (status.isOk()) status = placeOf(op, {{grad, "grad"}, {out, "out"}}, &device);
  if (status.isOk()) {
    status = run(
        op, device, DETCOLL_ON_DEVICE(biasAddGrad(grad, s, type, channels_first != 0, out, stream)),
        [&] {
          return kernels::ops::biasAddGrad(grad, s, type, channels_first != 0, out, g_opsThreads);
        });
  }
  return finish(status);
}

detcoll_status_t detcoll_upsample_bilinear2d_backward(void* grad_input, const void* grad_output,
                                                      detcoll_dtype_t dtype, int64_t planes,
                                                      int64_t in_h, int64_t in_w, int64_t out_h,
                                                      int64_t out_w, int align_corners,
                                                      double scale_h, double scale_w) {
  const char* op = "upsample_bilinear2d_backward";
  int device = -1;
  DataType type;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) {
    status = placeOf(op, {{grad_input, "grad_input"}, {grad_output, "grad_output"}}, &device);
  }
  if (status.isOk()) {
    kernels::ops::Bilinear shape;
    shape.planes = planes;
    shape.inHeight = in_h;
    shape.inWidth = in_w;
    shape.outHeight = out_h;
    shape.outWidth = out_w;
    shape.alignCorners = align_corners != 0;
    shape.scaleHeight = scale_h;
    shape.scaleWidth = scale_w;
    status = run(
        op, device,
        DETCOLL_ON_DEVICE(bilinear2dBackward(grad_input, grad_output, type, shape, stream)), [&] {
          return kernels::ops::bilinear2dBackward(grad_input, grad_output, type, shape,
                                                  g_opsThreads);
        });
  }
  return finish(status);
}

detcoll_status_t detcoll_max_pool2d_output_size(const detcoll_pool2d_t* pool, int64_t in_h,
                                                int64_t in_w, int64_t* out_h, int64_t* out_w) {
  kernels::ops::Pool2d p;
  Status status = poolOf("max_pool2d", pool, 0, in_h, in_w, &p);
  if (status.isOk()) status = kernels::ops::pool2dOutputSize(p, out_h, out_w);
  return finish(status);
}

detcoll_status_t detcoll_max_pool2d(void* out, int64_t* indices, const void* in,
                                    detcoll_dtype_t dtype, int64_t planes, int64_t in_h,
                                    int64_t in_w, const detcoll_pool2d_t* pool) {
  const char* op = "max_pool2d";
  int device = -1;
  DataType type;
  kernels::ops::Pool2d p;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = poolOf(op, pool, planes, in_h, in_w, &p);
  if (status.isOk())
    status = placeOf(op, {{out, "out"}, {indices, "indices"}, {in, "in"}}, &device);
  if (status.isOk())
    status = run(op, device, DETCOLL_ON_DEVICE(maxPool2d(out, indices, in, type, p, stream)),
                 [&] { return kernels::ops::maxPool2d(out, indices, in, type, p, g_opsThreads); });
  return finish(status);
}

detcoll_status_t detcoll_max_pool2d_backward(void* grad_input, const void* grad_output,
                                             const int64_t* indices, detcoll_dtype_t dtype,
                                             int64_t planes, int64_t in_h, int64_t in_w,
                                             const detcoll_pool2d_t* pool) {
  const char* op = "max_pool2d_backward";
  int device = -1;
  DataType type;
  kernels::ops::Pool2d p;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = poolOf(op, pool, planes, in_h, in_w, &p);
  if (status.isOk()) {
    status = placeOf(
        op, {{grad_input, "grad_input"}, {grad_output, "grad_output"}, {indices, "indices"}},
        &device);
  }
  if (status.isOk()) {
    status =
        run(op, device,
            DETCOLL_ON_DEVICE(maxPool2dBackward(grad_input, grad_output, indices, type, p, stream)),
            [&] {
              return kernels::ops::maxPool2dBackward(grad_input, grad_output, indices, type, p,
                                                     g_opsThreads);
            });
  }
  return finish(status);
}

}  // extern "C"
