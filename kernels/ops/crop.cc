#include "kernels/ops/crop.h"

#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/segment.h"

namespace detcoll::kernels::ops {

Status checkCrop(const Crop& c, DataType type, const void* image, const void* boxes,
                 const int64_t* boxIndices, const void* crops, bool readsImage) {
  const std::string op = "crop_and_resize: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  if (c.batch < 0 || c.height < 0 || c.width < 0 || c.channels < 0 || c.boxes < 0) {
    return Status::invalidArgument(op + "negative size");
  }
  if (c.cropHeight < 1 || c.cropWidth < 1) {
    return Status::invalidArgument(op + "crop size " + std::to_string(c.cropHeight) + " x " +
                                   std::to_string(c.cropWidth) + " must be positive");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit("crop_and_resize", {c.batch, c.height, c.width, c.channels}));
  DETCOLL_RETURN_IF_ERROR(
      sizesFit("crop_and_resize", {c.boxes, c.cropHeight, c.cropWidth, c.channels, 4}));
  const bool anyBox = c.boxes > 0;
  if ((anyBox && (boxes == nullptr || boxIndices == nullptr)) ||
      (anyBox && c.channels > 0 && crops == nullptr) ||
      (readsImage && anyBox && c.batch * c.height * c.width * c.channels > 0 && image == nullptr)) {
    return Status::invalidArgument(op + "image, boxes, box_indices or the crops is null");
  }
  return Status::ok();
}

Status boxIndexError(const Crop& c, int64_t at, int64_t value) {
  return Status::invalidArgument("crop_and_resize: box_indices[" + std::to_string(at) +
                                 "] = " + std::to_string(value) + " is outside the batch of " +
                                 std::to_string(c.batch) + " images");
}

namespace {

Status checkBoxIndices(const Crop& c, const int64_t* boxIndices) {
  int64_t bad = std::numeric_limits<int64_t>::max();
  const BoxIndexCheckBody check{boxIndices, c.batch, &bad};
  for (int64_t b = 0; b < c.boxes; ++b) check(b);
  return bad == std::numeric_limits<int64_t>::max() ? Status::ok()
                                                    : boxIndexError(c, bad, boxIndices[bad]);
}

}  // namespace

Status cropAndResize(void* out, const void* image, const void* boxes, const int64_t* boxIndices,
                     DataType type, const Crop& c, int threads) {
  DETCOLL_RETURN_IF_ERROR(checkCrop(c, type, image, boxes, boxIndices, out, true));
  DETCOLL_RETURN_IF_ERROR(checkBoxIndices(c, boxIndices));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatingStorage<T>()) {
      const CropForwardBody<T> body{c, static_cast<const T*>(image), static_cast<const T*>(boxes),
                                    boxIndices, static_cast<T*>(out)};
      forEachIndex(c.boxes * c.cropHeight * c.cropWidth * c.channels, threads, 4096, body);
    }
  });
  return Status::ok();
}

Status cropAndResizeBackward(void* gradImage, void* gradBoxes, const void* grads, const void* image,
                             const void* boxes, const int64_t* boxIndices, DataType type,
                             const Crop& c, int threads) {
  DETCOLL_RETURN_IF_ERROR(
      checkCrop(c, type, image, boxes, boxIndices, grads, gradBoxes != nullptr));
  DETCOLL_RETURN_IF_ERROR(checkBoxIndices(c, boxIndices));
  const int64_t sources = c.boxes * c.cropHeight * c.cropWidth;
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename Traits<T>::Acc;
    if constexpr (isFloatingStorage<T>()) {
      if (gradImage != nullptr) {
        std::vector<int64_t> pixel(4 * sources), row(4 * sources);
        std::vector<A> weight(4 * sources);
        const CropTapBody<T> tap{
            c, static_cast<const T*>(boxes), boxIndices, pixel.data(), weight.data(), row.data()};
        for (int64_t bp = 0; bp < sources; ++bp) tap(bp);
        SegmentSources in;
        in.values = grads;
        in.type = type;
        in.rowStride = c.channels;
        in.rows = row.data();
        in.weights = weight.data();
        in.weightType = std::is_same_v<A, double> ? DataType::kFloat64 : DataType::kFloat32;
        Skip skip;
        skip.negative = true;
        status = scatterReduce(pixel.data(), 4 * sources, c.batch * c.height * c.width, skip, in,
                               SegmentOutput{gradImage, c.channels, c.channels, SegmentInit::kZero},
                               threads)
                     .prefixed("crop_and_resize_backward");
      }
      if (gradBoxes != nullptr && status.isOk()) {
        const CropBoxGradBody<T> body{c,
                                      static_cast<const T*>(grads),
                                      static_cast<const T*>(image),
                                      static_cast<const T*>(boxes),
                                      boxIndices,
                                      static_cast<T*>(gradBoxes)};
        forEachIndex(c.boxes, threads, 16, body);
      }
    }
  });
  return status;
}

}  // namespace detcoll::kernels::ops
