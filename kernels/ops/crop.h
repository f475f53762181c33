#pragma once

// tf.image.crop_and_resize and its gradients (docs/design.md, "Patching torch's operators"): the
// bodies shared by the CPU reference (crop.cc) and the executor's formulation (bodies/crop.h). In
// the accumulation type A (float for float32, float16 and bfloat16; double for float64), as
// TensorFlow's kernel: box b = (y1, x1, y2, x2) reads image box_indices[b] at
//   in_y = y1 (H - 1) + y (y2 - y1)(H - 1) / (ch - 1)   (ch > 1; else (y1 + y2)(H - 1) / 2)
// and likewise in_x; a point outside [0, H - 1] x [0, W - 1] gives extrapolationValue and no
// gradient. Bilinear reads the four pixels around it (top = floor, bottom = ceil) with
// top + (bottom - top) · y_lerp over top_left + (top_right - top_left) · x_lerp; nearest the pixel
// at the coordinates rounded half away from zero.
//   The image's gradient adds, per channel, weight · gradient of every (box, position, corner)
// in that order (corners top-left, top-right, bottom-left, bottom-right; bilinear's weights
// (1 - y_lerp)(1 - x_lerp) and so on, nearest's 1), from zero in A, rounded once: the segment
// engine with the channels as its columns. The boxes' gradient is the bilinear one for both
// methods, as TensorFlow's: per box, Σ over positions (in order) of Σ over channels (in order) of
// gradient · (d value / d in_y or in_x), times d in_y / d y1 (and so on), in A, rounded once.

#include <cstdint>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops {

struct Crop {
  int64_t batch = 0, height = 0, width = 0, channels = 0;  // image [N, H, W, C]
  int64_t boxes = 0, cropHeight = 1, cropWidth = 1;        // out [boxes, ch, cw, C]
  bool nearest = false;
  double extrapolation = 0;
};

// The sizes and the dtype (the box indices are checked where they live: boxIndexError names
// the first outside the batch).
// crops is the forward's out or the backward's grads; the image is read by the forward and by
// the boxes' gradient (readsImage).
Status checkCrop(const Crop& c, DataType type, const void* image, const void* boxes,
                 const int64_t* boxIndices, const void* crops, bool readsImage);
Status boxIndexError(const Crop& c, int64_t at, int64_t value);

// Box b's image index outside the batch goes to *bad.
struct BoxIndexCheckBody {
  const int64_t* boxIndices;
  int64_t batch;
  int64_t* bad;
  DETCOLL_HOST_DEVICE void operator()(int64_t b) const {
    if (boxIndices[b] < 0 || boxIndices[b] >= batch) resample::recordFirst(bad, b);
  }
};

// A box's source coordinate along one axis, for output index k of n, over an image axis of size
// `size`, and its derivatives with respect to the box's start and end.
template <typename A>
struct CropAxis {
  A at, dStart, dEnd;
  DETCOLL_HOST_DEVICE static CropAxis of(A start, A end, int64_t k, int64_t n, int64_t size) {
    const A span = static_cast<A>(size - 1);
    CropAxis r;
    if (n > 1) {
      const A scale = (end - start) * span / static_cast<A>(n - 1);
      r.at = start * span + static_cast<A>(k) * scale;
      r.dStart = span * (A(1) - static_cast<A>(k) / static_cast<A>(n - 1));
      r.dEnd = span * static_cast<A>(k) / static_cast<A>(n - 1);
    } else {
      r.at = A(0.5) * (start + end) * span;
      r.dStart = r.dEnd = A(0.5) * span;
    }
    return r;
  }
};

// Output position p = y · cw + x of box b: its four corners (pixel offsets within the image
// batch, -1 when the point is outside), their weights, the lerps and the derivatives.
template <typename A>
struct CropPoint {
  bool inside = false;
  int64_t pixel[4];  // top-left, top-right, bottom-left, bottom-right (nearest: pixel[0])
  A weight[4], yLerp = 0, xLerp = 0;
  CropAxis<A> y, x;
};

// A pixel index of an inside point, within [0, n - 1].
DETCOLL_HOST_DEVICE inline int64_t clampTo(int64_t i, int64_t n) {
  return i < n ? i : n - 1;
}

template <typename T, typename A>
DETCOLL_HOST_DEVICE CropPoint<A> cropPoint(const Crop& c, const T* boxes, const int64_t* boxIndices,
                                           int64_t b, int64_t p) {
  CropPoint<A> r;
  const T* box = boxes + 4 * b;
  const A y1 = kernels::Traits<T>::load(box[0]), x1 = kernels::Traits<T>::load(box[1]);
  const A y2 = kernels::Traits<T>::load(box[2]), x2 = kernels::Traits<T>::load(box[3]);
  r.y = CropAxis<A>::of(y1, y2, p / c.cropWidth, c.cropHeight, c.height);
  r.x = CropAxis<A>::of(x1, x2, p % c.cropWidth, c.cropWidth, c.width);
  // TensorFlow's test, in A. Where height - 1 rounds up in A, a point can pass it by up to that
  // rounding: its pixels are clamped to the image below.
  r.inside = r.y.at >= A(0) && r.y.at <= static_cast<A>(c.height - 1) && r.x.at >= A(0) &&
             r.x.at <= static_cast<A>(c.width - 1);
  for (int k = 0; k < 4; ++k) r.pixel[k] = -1;
  if (!r.inside) return r;
  const int64_t base = boxIndices[b] * c.height * c.width;
  const A top = static_cast<A>(::floor(static_cast<double>(r.y.at)));
  const A left = static_cast<A>(::floor(static_cast<double>(r.x.at)));
  r.yLerp = r.y.at - top;
  r.xLerp = r.x.at - left;
  if (c.nearest) {  // half away from zero; the coordinates are >= 0
    const int64_t yi = static_cast<int64_t>(top) + (r.yLerp >= A(0.5) ? 1 : 0);
    const int64_t xi = static_cast<int64_t>(left) + (r.xLerp >= A(0.5) ? 1 : 0);
    r.pixel[0] = base + clampTo(yi, c.height) * c.width + clampTo(xi, c.width);
    r.weight[0] = A(1);
    return r;
  }
  const int64_t t = clampTo(static_cast<int64_t>(top), c.height);
  const int64_t l = clampTo(static_cast<int64_t>(left), c.width);
  const int64_t bottom =
      clampTo(static_cast<int64_t>(::ceil(static_cast<double>(r.y.at))), c.height);
  const int64_t right = clampTo(static_cast<int64_t>(::ceil(static_cast<double>(r.x.at))), c.width);
  r.pixel[0] = base + t * c.width + l;
  r.pixel[1] = base + t * c.width + right;
  r.pixel[2] = base + bottom * c.width + l;
  r.pixel[3] = base + bottom * c.width + right;
  r.weight[0] = (A(1) - r.yLerp) * (A(1) - r.xLerp);
  r.weight[1] = (A(1) - r.yLerp) * r.xLerp;
  r.weight[2] = r.yLerp * (A(1) - r.xLerp);
  r.weight[3] = r.yLerp * r.xLerp;
  return r;
}

// The forward, one output element t = (b · P + p) · C + ch.
template <typename T>
struct CropForwardBody {
  using A = typename kernels::Traits<T>::Acc;
  Crop c;
  const T *image, *boxes;
  const int64_t* boxIndices;
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t ch = t % c.channels, bp = t / c.channels;
    const int64_t positions = c.cropHeight * c.cropWidth;
    const CropPoint<A> q = cropPoint<T, A>(c, boxes, boxIndices, bp / positions, bp % positions);
    if (!q.inside) {
      out[t] = kernels::Traits<T>::store(static_cast<A>(c.extrapolation));
      return;
    }
    if (c.nearest) {
      out[t] = image[q.pixel[0] * c.channels + ch];
      return;
    }
    A v[4];
    for (int k = 0; k < 4; ++k)
      v[k] = kernels::Traits<T>::load(image[q.pixel[k] * c.channels + ch]);
    const A topRow = v[0] + (v[1] - v[0]) * q.xLerp;
    const A bottomRow = v[2] + (v[3] - v[2]) * q.xLerp;
    out[t] = kernels::Traits<T>::store(topRow + (bottomRow - topRow) * q.yLerp);
  }
};

// The image gradient's sources: (b, p) writes its corners at 4 (b · P + p) + k (pixel or -1)
// with their weights and the row of grads they read (b · P + p).
template <typename T>
struct CropTapBody {
  using A = typename kernels::Traits<T>::Acc;
  Crop c;
  const T* boxes;
  const int64_t* boxIndices;
  int64_t* pixel;
  A* weight;
  int64_t* row;
  DETCOLL_HOST_DEVICE void operator()(int64_t bp) const {
    const int64_t positions = c.cropHeight * c.cropWidth;
    const CropPoint<A> q = cropPoint<T, A>(c, boxes, boxIndices, bp / positions, bp % positions);
    for (int k = 0; k < 4; ++k) {
      pixel[4 * bp + k] = q.pixel[k];
      weight[4 * bp + k] = q.pixel[k] >= 0 ? q.weight[k] : A(0);
      row[4 * bp + k] = bp;
    }
  }
};

// The boxes' gradient of box b: (y1, x1, y2, x2).
template <typename T>
struct CropBoxGradBody {
  using A = typename kernels::Traits<T>::Acc;
  Crop c;
  const T *grads, *image, *boxes;
  const int64_t* boxIndices;
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t b) const {
    Crop bilinear = c;
    bilinear.nearest = false;
    const int64_t positions = c.cropHeight * c.cropWidth;
    A sums[4] = {A(0), A(0), A(0), A(0)};
    for (int64_t p = 0; p < positions; ++p) {
      const CropPoint<A> q = cropPoint<T, A>(bilinear, boxes, boxIndices, b, p);
      if (!q.inside) continue;
      A alongY = A(0), alongX = A(0);
      for (int64_t ch = 0; ch < c.channels; ++ch) {
        const A g = kernels::Traits<T>::load(grads[(b * positions + p) * c.channels + ch]);
        A v[4];
        for (int k = 0; k < 4; ++k)
          v[k] = kernels::Traits<T>::load(image[q.pixel[k] * c.channels + ch]);
        const A top = v[0] + (v[1] - v[0]) * q.xLerp, bottom = v[2] + (v[3] - v[2]) * q.xLerp;
        alongY = alongY + g * (bottom - top);
        alongX = alongX + g * ((v[1] - v[0]) * (A(1) - q.yLerp) + (v[3] - v[2]) * q.yLerp);
      }
      sums[0] = sums[0] + alongY * q.y.dStart;
      sums[1] = sums[1] + alongX * q.x.dStart;
      sums[2] = sums[2] + alongY * q.y.dEnd;
      sums[3] = sums[3] + alongX * q.x.dEnd;
    }
    for (int k = 0; k < 4; ++k) out[4 * b + k] = kernels::Traits<T>::store(sums[k]);
  }
};

// The CPU reference. cropAndResize: out [boxes, ch, cw, C]. cropAndResizeBackward: gradImage
// [N, H, W, C] and gradBoxes [boxes, 4], either null when not wanted, from grads [boxes, ch, cw,
// C]. threads <= 0: the hardware's.
Status cropAndResize(void* out, const void* image, const void* boxes, const int64_t* boxIndices,
                     DataType type, const Crop& c, int threads);
Status cropAndResizeBackward(void* gradImage, void* gradBoxes, const void* grads, const void* image,
                             const void* boxes, const int64_t* boxIndices, DataType type,
                             const Crop& c, int threads);

}  // namespace detcoll::kernels::ops
