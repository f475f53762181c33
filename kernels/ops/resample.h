#pragma once

// Bilinear resampling's backward and 2-D max pooling. The bits are defined below as each input
// pixel's terms in a fixed order. The CPU functions here compute them with PyTorch's loop (one
// plane per thread, output pixels in row-major order adding into the inputs they read); the GPU
// computes them as gathers (resample_kernels.h: one thread per input pixel, summing from the
// outputs that read it, in the same order), so no two threads write one place and nothing
// depends on the launch configuration. The max-pool forward is one body for both.
//
// Tensors are contiguous, planes x height x width (N x C folded into planes), floating point.
// Sums are formed in the accumulation type (float for float32, float16 and bfloat16, double for
// float64) from +0 and rounded once.
//
// Bilinear (torch.nn.functional.interpolate, mode 'bilinear', upsampling or downsampling): along
// each axis, output index o reads input indices i0(o) <= i1(o) with weights l0(o), l1(o), computed
// in the accumulation type A as PyTorch does:
//   scale  = align_corners ? (out > 1 ? A(in - 1) / A(out - 1) : 0)
//                          : (a given scale factor s > 0 ? A(1 / s) : A(in) / A(out))
//   out == in:  i0 = i1 = o, l0 = 1, l1 = 0
//   otherwise:  r = max(align_corners ? scale * o : scale * (o + 0.5) - 0.5, 0)   in double
//               i0 = min(floor(r), in - 1), i1 = i0 + (i0 < in - 1),
//               l1 = A(min(max(r - i0, 0), 1)) (from double), l0 = 1 - l1 (in A)
// The gradient of input pixel (y, x) adds (lh_a(oh) * lw_b(ow)) * g(oh, ow) for every output
// pixel (oh, ow) and a, b in {0, 1} with i_a(oh) = y and i_b(ow) = x, in the order of
// (oh, ow, a, b) — the order of PyTorch's CPU loop, which adds each output pixel's four terms in
// turn; so float32 and float64 results equal PyTorch's CPU results.
//
// Max pooling (torch.nn.functional.max_pool2d): the window of output (oh, ow) starts at
// (oh sH - pH, ow sW - pW) and takes kernel positions dilation apart inside the input. Its value
// and index are the first maximum in row-major window order, where a NaN counts as larger than
// anything and a later NaN replaces an earlier one; an all -inf window reports its first position
// (PyTorch's rule, so indices equal PyTorch's). The index is y * W + x within the plane. The
// backward pass sums, for each input pixel, the gradients of the outputs whose index names it, in
// row-major output order (PyTorch's CPU order).

#include <cstdint>
#include <initializer_list>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::kernels::ops {

struct Bilinear {
  int64_t planes = 0;
  int64_t inHeight = 0, inWidth = 0;
  int64_t outHeight = 0, outWidth = 0;
  bool alignCorners = false;
  double scaleHeight = 0, scaleWidth = 0;  // the scale factors given; <= 0: none (from the sizes)
};

// torch's upsample_bilinear2d_backward: gradInput [planes, inHeight, inWidth] from gradOutput
// [planes, outHeight, outWidth].
Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& shape, int threads);

struct Pool2d {
  int64_t planes = 0;
  int64_t inHeight = 0, inWidth = 0;
  int64_t kernelHeight = 1, kernelWidth = 1;
  int64_t strideHeight = 1, strideWidth = 1;
  int64_t padHeight = 0, padWidth = 0;
  int64_t dilationHeight = 1, dilationWidth = 1;
  bool ceilMode = false;
};

// Checks the parameters as PyTorch does (positive kernel, stride and dilation, padding at most
// half the kernel, a non-empty output) and gives the output size.
Status pool2dOutputSize(const Pool2d& pool, int64_t* outHeight, int64_t* outWidth);

// torch.nn.functional.max_pool2d with indices: out and indices are [planes, outH, outW].
Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& pool,
                 int threads);

// Its backward: gradInput [planes, inH, inW] from gradOutput and indices [planes, outH, outW].
// Every index must be a position of its own window (as max_pool2d gives them); one that is not is
// an error naming it, with gradInput untouched.
Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& pool, int threads);

// The checks the CPU and the data-parallel formulations share: dtype, sizes, null tensors; for
// max pooling also the parameters, giving the output size.
Status checkBilinear(const void* gradInput, const void* gradOutput, DataType type,
                     const Bilinear& shape);
Status checkMaxPool(const char* op, DataType type, const Pool2d& pool,
                    std::initializer_list<const void*> tensors, int64_t* outHeight,
                    int64_t* outWidth);
// The error of an index outside its window: indices[at] = value.
Status badPoolIndex(const char* op, int64_t at, int64_t value, const Pool2d& pool,
                    int64_t outHeight, int64_t outWidth);

}  // namespace detcoll::kernels::ops
