// detcoll._detcoll's entries for the op families torch's patch() replaces: windows and resampling,
// grid_sample, ctc_loss, nll_loss, selection, crop_and_resize and the writes through indices
// (bindings/python/binding.h). Each passes tensors' addresses to its C entry (detcoll_ops.h).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "binding.h"
#include "detcoll.h"

namespace detcoll_python {

void defineFamilies(py::module_& m) {
  m.def("pad_backward", [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes,
                           const std::vector<int64_t>& inputSpatial,
                           const std::vector<int64_t>& padding, bool reflect) {
    blocking([&] {
      return detcoll_pad_backward(ptr(gradInput), ptr(gradOutput),
                                  static_cast<detcoll_dtype_t>(dtype), planes, inputSpatial.data(),
                                  static_cast<int>(inputSpatial.size()), padding.data(),
                                  reflect ? 1 : 0);
    });
  });
  m.def("upsample_linear_backward",
        [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes,
           const std::vector<int64_t>& inputSpatial, const std::vector<int64_t>& outputSpatial,
           bool alignCorners, const std::vector<double>& scales) {
          if (outputSpatial.size() != inputSpatial.size() ||
              (!scales.empty() && scales.size() != inputSpatial.size())) {
            throw py::value_error("upsample_linear_backward: sizes of different ranks");
          }
          blocking([&] {
            return detcoll_upsample_linear_backward(
                ptr(gradInput), ptr(gradOutput), static_cast<detcoll_dtype_t>(dtype), planes,
                inputSpatial.data(), outputSpatial.data(), static_cast<int>(inputSpatial.size()),
                alignCorners ? 1 : 0, scales.empty() ? nullptr : scales.data());
          });
        });
  m.def("upsample_nearest_backward",
        [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes,
           const std::vector<int64_t>& inputSpatial, const std::vector<int64_t>& outputSpatial,
           const std::vector<double>& scales) {
          if (outputSpatial.size() != inputSpatial.size() || scales.size() > inputSpatial.size()) {
            throw py::value_error("upsample_nearest_backward: sizes of different ranks");
          }
          blocking([&] {
            return detcoll_upsample_nearest_backward(
                ptr(gradInput), ptr(gradOutput), static_cast<detcoll_dtype_t>(dtype), planes,
                inputSpatial.data(), outputSpatial.data(), static_cast<int>(inputSpatial.size()),
                scales.empty() ? nullptr : scales.data());
          });
        });
  m.def("avg_pool_backward",
        [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes,
           const std::vector<int64_t>& inputSpatial, const std::vector<int64_t>& kernel,
           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, bool ceil,
           bool countIncludePad, int64_t divisorOverride) {
          if (kernel.size() != inputSpatial.size() || stride.size() != inputSpatial.size() ||
              padding.size() != inputSpatial.size()) {
            throw py::value_error("avg_pool_backward: a kernel, stride and padding per axis");
          }
          blocking([&] {
            return detcoll_avg_pool_backward(
                ptr(gradInput), ptr(gradOutput), static_cast<detcoll_dtype_t>(dtype), planes,
                inputSpatial.data(), static_cast<int>(inputSpatial.size()), kernel.data(),
                stride.data(), padding.data(), ceil ? 1 : 0, countIncludePad ? 1 : 0,
                divisorOverride);
          });
        });
  m.def("adaptive_avg_pool_backward",
        [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes,
           const std::vector<int64_t>& inputSpatial, const std::vector<int64_t>& outputSpatial) {
          if (outputSpatial.size() != inputSpatial.size()) {
            throw py::value_error("adaptive_avg_pool_backward: sizes of different ranks");
          }
          blocking([&] {
            return detcoll_adaptive_avg_pool_backward(
                ptr(gradInput), ptr(gradOutput), static_cast<detcoll_dtype_t>(dtype), planes,
                inputSpatial.data(), outputSpatial.data(), static_cast<int>(inputSpatial.size()));
          });
        });
  m.def("max_pool_backward", [](uintptr_t gradInput, uintptr_t gradOutput, uintptr_t indices,
                                int dtype, int64_t planes, int64_t inner, int64_t outputs) {
    blocking([&] {
      return detcoll_max_pool_backward(ptr(gradInput), ptr(gradOutput),
                                       static_cast<const int64_t*>(ptr(indices)),
                                       static_cast<detcoll_dtype_t>(dtype), planes, inner, outputs);
    });
  });
  m.def(
      "upsample_bicubic2d_backward",
      [](uintptr_t gradInput, uintptr_t gradOutput, int dtype, int64_t planes, int64_t inH,
         int64_t inW, int64_t outH, int64_t outW, bool alignCorners, double scaleH, double scaleW) {
        blocking([&] {
          return detcoll_upsample_bicubic2d_backward(
              ptr(gradInput), ptr(gradOutput), static_cast<detcoll_dtype_t>(dtype), planes, inH,
              inW, outH, outW, alignCorners ? 1 : 0, scaleH, scaleW);
        });
      });
  m.def("write_last", [](uintptr_t out, int64_t rows, int64_t width, int dtype,
                         uintptr_t destination, int64_t n, uintptr_t values) {
    blocking([&] {
      return detcoll_write_last(ptr(out), rows, width, static_cast<detcoll_dtype_t>(dtype),
                                static_cast<const int64_t*>(ptr(destination)), n, ptr(values));
    });
  });
  m.def("max_unpool", [](uintptr_t out, uintptr_t input, uintptr_t indices, int dtype,
                         int64_t planes, int64_t inputs, int64_t outputs) {
    blocking([&] {
      return detcoll_max_unpool(ptr(out), ptr(input), static_cast<const int64_t*>(ptr(indices)),
                                static_cast<detcoll_dtype_t>(dtype), planes, inputs, outputs);
    });
  });
  m.def("embedding_bag_max_backward",
        [](uintptr_t gradWeight, int64_t numWeights, int dtype, uintptr_t gradOutput, int64_t bags,
           int64_t dim, uintptr_t maximumIndices, uintptr_t bagSize, int64_t paddingIdx) {
          blocking([&] {
            return detcoll_embedding_bag_max_backward(
                ptr(gradWeight), numWeights, static_cast<detcoll_dtype_t>(dtype), ptr(gradOutput),
                bags, dim, static_cast<const int64_t*>(ptr(maximumIndices)),
                static_cast<const int64_t*>(ptr(bagSize)), paddingIdx);
          });
        });
  m.def("sparse_dense_matmul", [](uintptr_t out, int64_t outRows, int dtype, uintptr_t rows,
                                  uintptr_t cols, uintptr_t values, int64_t nnz, uintptr_t dense,
                                  int64_t denseRows, int64_t columns) {
    blocking([&] {
      return detcoll_sparse_dense_matmul(ptr(out), outRows, static_cast<detcoll_dtype_t>(dtype),
                                         static_cast<const int64_t*>(ptr(rows)),
                                         static_cast<const int64_t*>(ptr(cols)), ptr(values), nnz,
                                         ptr(dense), denseRows, columns);
    });
  });
  m.def("grid_sampler_backward", [](uintptr_t gradInput, uintptr_t gradGrid, uintptr_t gradOutput,
                                    uintptr_t input, uintptr_t grid, int dtype, int64_t batch,
                                    int64_t channels, const std::vector<int64_t>& inputSpatial,
                                    int64_t positions, int mode, int padding, bool alignCorners) {
    blocking([&] {
      return detcoll_grid_sampler_backward(
          ptr(gradInput), ptr(gradGrid), ptr(gradOutput), ptr(input), ptr(grid),
          static_cast<detcoll_dtype_t>(dtype), batch, channels, inputSpatial.data(),
          static_cast<int>(inputSpatial.size()), positions, mode, padding, alignCorners ? 1 : 0);
    });
  });
  m.def("ctc_loss_backward", [](uintptr_t gradLogProbs, uintptr_t grad, uintptr_t logProbs,
                                uintptr_t targets, int64_t targetStride,
                                const std::vector<int64_t>& inputLengths,
                                const std::vector<int64_t>& targetLengths, uintptr_t nll,
                                uintptr_t logAlpha, int64_t alphaWidth, int dtype, int64_t steps,
                                int64_t batch, int64_t classes, int64_t blank, bool zeroInfinity) {
    if (static_cast<int64_t>(inputLengths.size()) != batch ||
        static_cast<int64_t>(targetLengths.size()) != batch) {
      throw py::value_error("ctc_loss_backward: a length per batch element");
    }
    blocking([&] {
      return detcoll_ctc_loss_backward(
          ptr(gradLogProbs), ptr(grad), ptr(logProbs), static_cast<const int64_t*>(ptr(targets)),
          targetStride, inputLengths.data(), targetLengths.data(), ptr(nll), ptr(logAlpha),
          alphaWidth, static_cast<detcoll_dtype_t>(dtype), steps, batch, classes, blank,
          zeroInfinity ? 1 : 0);
    });
  });
  m.def("nll_loss", [](uintptr_t output, uintptr_t totalWeight, uintptr_t input, uintptr_t target,
                       uintptr_t weight, int dtype, int64_t batch, int64_t classes, int64_t inner,
                       int64_t ignoreIndex, int reduction) {
    blocking([&] {
      return detcoll_nll_loss(ptr(output), ptr(totalWeight), ptr(input),
                              static_cast<const int64_t*>(ptr(target)), ptr(weight),
                              static_cast<detcoll_dtype_t>(dtype), batch, classes, inner,
                              ignoreIndex, reduction);
    });
  });
  m.def("kthvalue", [](uintptr_t values, uintptr_t indices, uintptr_t input, int dtype,
                       int64_t outer, int64_t length, int64_t inner, int64_t k, bool median) {
    blocking([&] {
      int64_t* at = static_cast<int64_t*>(ptr(indices));
      const auto type = static_cast<detcoll_dtype_t>(dtype);
      return median ? detcoll_median(ptr(values), at, ptr(input), type, outer, length, inner)
                    : detcoll_kthvalue(ptr(values), at, ptr(input), type, outer, length, inner, k);
    });
  });
  m.def("crop_and_resize",
        [](uintptr_t out, uintptr_t image, uintptr_t boxes, uintptr_t boxIndices, int dtype,
           const std::vector<int64_t>& sizes, bool nearest, double extrapolation) {
          if (sizes.size() != 7) throw py::value_error("crop_and_resize: 7 sizes");
          blocking([&] {
            return detcoll_crop_and_resize(
                ptr(out), ptr(image), ptr(boxes), static_cast<const int64_t*>(ptr(boxIndices)),
                static_cast<detcoll_dtype_t>(dtype), sizes[0], sizes[1], sizes[2], sizes[3],
                sizes[4], sizes[5], sizes[6], nearest ? 1 : 0, extrapolation);
          });
        });
  m.def("crop_and_resize_backward", [](uintptr_t gradImage, uintptr_t gradBoxes, uintptr_t grads,
                                       uintptr_t image, uintptr_t boxes, uintptr_t boxIndices,
                                       int dtype, const std::vector<int64_t>& sizes, bool nearest) {
    if (sizes.size() != 7) throw py::value_error("crop_and_resize_backward: 7 sizes");
    blocking([&] {
      return detcoll_crop_and_resize_backward(
          ptr(gradImage), ptr(gradBoxes), ptr(grads), ptr(image), ptr(boxes),
          static_cast<const int64_t*>(ptr(boxIndices)), static_cast<detcoll_dtype_t>(dtype),
          sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], nearest ? 1 : 0);
    });
  });
  m.def("histc", [](uintptr_t out, int64_t bins, double min, double max, uintptr_t input, int64_t n,
                    int dtype) {
    blocking([&] {
      return detcoll_histc(ptr(out), bins, min, max, ptr(input), n,
                           static_cast<detcoll_dtype_t>(dtype));
    });
  });
}

}  // namespace detcoll_python
