#pragma once

// crop_and_resize and its gradients (kernels/ops/crop.h) on an executor: the box indices checked,
// the forward one body per output element, the image's gradient as the segment engine over every
// (box, position, corner) with the channels as its columns, the boxes' gradient one body per box.

#include <cstdint>
#include <type_traits>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/bodies/scatter.h"
#include "kernels/ops/bodies/segment.h"
#include "kernels/ops/crop.h"

namespace detcoll::kernels::ops::bodies {

template <typename E>
Status checkBoxIndices(E& e, const Crop& c, const int64_t* boxIndices) {
  int64_t failed = kNoFailure;
  if (c.boxes > 0) {
    DETCOLL_RETURN_IF_ERROR(runCheck(
        e, c.boxes,
        [&](int64_t* bad) {
          return BoxIndexCheckBody{boxIndices, c.batch, bad};
        },
        &failed));
  }
  return failed == kNoFailure ? Status::ok()
                              : boxIndexError(c, failed, readIndex(e, boxIndices, failed));
}

template <typename E>
Status cropAndResize(E& e, void* out, const void* image, const void* boxes,
                     const int64_t* boxIndices, DataType type, const Crop& c) {
  DETCOLL_RETURN_IF_ERROR(checkCrop(c, type, image, boxes, boxIndices, out, true));
  DETCOLL_RETURN_IF_ERROR(checkBoxIndices(e, c, boxIndices));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      e.launch(c.boxes * c.cropHeight * c.cropWidth * c.channels,
               CropForwardBody<T>{c, static_cast<const T*>(image), static_cast<const T*>(boxes),
                                  boxIndices, static_cast<T*>(out)});
    }
  });
  return e.status();
}

template <typename E>
Status cropAndResizeBackward(E& e, void* gradImage, void* gradBoxes, const void* grads,
                             const void* image, const void* boxes, const int64_t* boxIndices,
                             DataType type, const Crop& c) {
  DETCOLL_RETURN_IF_ERROR(
      checkCrop(c, type, image, boxes, boxIndices, grads, gradBoxes != nullptr));
  DETCOLL_RETURN_IF_ERROR(checkBoxIndices(e, c, boxIndices));
  const int64_t sources = c.boxes * c.cropHeight * c.cropWidth;
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename kernels::Traits<T>::Acc;
    if constexpr (kernels::isFloatingStorage<T>()) {
      if (gradImage != nullptr && (sources == 0 || c.channels == 0)) {
        e.launch(c.batch * c.height * c.width * c.channels,
                 FillZeroBody<T>{static_cast<T*>(gradImage)});
      } else if (gradImage != nullptr) {
        int64_t* pixel = e.template alloc<int64_t>(4 * sources);
        int64_t* row = e.template alloc<int64_t>(4 * sources);
        A* weight = e.template alloc<A>(4 * sources);
        e.launch(sources,
                 CropTapBody<T>{c, static_cast<const T*>(boxes), boxIndices, pixel, weight, row});
        SegmentJob job;
        job.destination = pixel;
        job.n = 4 * sources;
        job.destinations = c.batch * c.height * c.width;
        job.skip.negative = true;
        job.what = "pixels";
        job.values = grads;
        job.type = type;
        job.rowStride = c.channels;
        job.rows = row;
        job.weights = weight;
        job.out = gradImage;
        job.outRowStride = c.channels;
        job.columns = c.channels;
        status = segments(e, job).prefixed("crop_and_resize_backward");
      }
      if (gradBoxes != nullptr && status.isOk()) {
        e.launch(c.boxes,
                 CropBoxGradBody<T>{c, static_cast<const T*>(grads), static_cast<const T*>(image),
                                    static_cast<const T*>(boxes), boxIndices,
                                    static_cast<T*>(gradBoxes)});
      }
    }
  });
  DETCOLL_RETURN_IF_ERROR(status);
  return e.status();
}

}  // namespace detcoll::kernels::ops::bodies
