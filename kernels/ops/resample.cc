#include "kernels/ops/resample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops {
namespace {

using kernels::visitType;

Status needFloating(const char* op, DataType type) {
  if (isFloatingPoint(type)) return Status::ok();
  return Status::invalidArgument(std::string(op) + ": tensors are floating point, not " +
                                 dataTypeName(type));
}

// floor(a / b) for b > 0.
int64_t floorDivide(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

int64_t poolOutput(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                   bool ceil) {
  int64_t out =
      floorDivide(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil ? stride - 1 : 0), stride) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The CPU reference's formulation of the two backward passes: PyTorch's loop over one plane's
// output pixels in row-major order, each adding into the input pixels it reads, in the
// accumulation type (in place where the dtype is its own). Each input pixel receives its terms
// in the order resample.h defines; the GPU's gathers (resample_kernels.h) add the same terms in
// the same order, one input pixel per thread.
template <typename T>
using AccOf = typename kernels::Traits<T>::Acc;

template <typename T>
AccOf<T>* planeAccumulator(T* plane, int64_t size, std::vector<AccOf<T>>& buffer) {
  if constexpr (std::is_same_v<T, AccOf<T>>) {
    std::fill(plane, plane + size, T(0));
    return plane;
  } else {
    buffer.assign(static_cast<size_t>(size), AccOf<T>(0));
    return buffer.data();
  }
}

template <typename T>
void storePlane(T* plane, int64_t size, const std::vector<AccOf<T>>& buffer) {
  if constexpr (!std::is_same_v<T, AccOf<T>>) {
    for (int64_t i = 0; i < size; ++i) plane[i] = kernels::Traits<T>::store(buffer[i]);
  }
}

template <typename T>
void bilinearPlane(T* gradInput, const T* gradOutput, const Bilinear& s,
                   const resample::LinearAxisTable<AccOf<T>>& h,
                   const resample::LinearAxisTable<AccOf<T>>& w, int64_t plane) {
  using A = AccOf<T>;
  const int64_t inPlane = s.inHeight * s.inWidth;
  std::vector<A> buffer;
  A* acc = planeAccumulator(gradInput + plane * inPlane, inPlane, buffer);
  const T* g = gradOutput + plane * s.outHeight * s.outWidth;
  for (int64_t oh = 0; oh < s.outHeight; ++oh) {
    A* row0 = acc + h.i0[oh] * s.inWidth;
    A* row1 = acc + h.i1[oh] * s.inWidth;
    const A h0 = h.l0[oh], h1 = h.l1[oh];
    for (int64_t ow = 0; ow < s.outWidth; ++ow) {
      const A v = kernels::Traits<T>::load(g[oh * s.outWidth + ow]);
      const int64_t x0 = w.i0[ow], x1 = w.i1[ow];
      const A w0 = w.l0[ow], w1 = w.l1[ow];
      row0[x0] = row0[x0] + (h0 * w0) * v;
      row0[x1] = row0[x1] + (h0 * w1) * v;
      row1[x0] = row1[x0] + (h1 * w0) * v;
      row1[x1] = row1[x1] + (h1 * w1) * v;
    }
  }
  storePlane(gradInput + plane * inPlane, inPlane, buffer);
}

// Outputs whose window is empty (rowEmpty, columnEmpty) add nothing.
template <typename T>
void maxPoolPlane(T* gradInput, const T* gradOutput, const int64_t* indices,
                  const resample::PoolGeometry& geometry, const std::vector<char>& rowEmpty,
                  const std::vector<char>& columnEmpty, int64_t plane) {
  using A = AccOf<T>;
  const int64_t inPlane = geometry.inHeight * geometry.inWidth;
  const int64_t outPlane = geometry.outHeight * geometry.outWidth;
  std::vector<A> buffer;
  A* acc = planeAccumulator(gradInput + plane * inPlane, inPlane, buffer);
  const T* g = gradOutput + plane * outPlane;
  const int64_t* index = indices + plane * outPlane;
  for (int64_t oh = 0, o = 0; oh < geometry.outHeight; ++oh) {
    for (int64_t ow = 0; ow < geometry.outWidth; ++ow, ++o) {
      if (rowEmpty[oh] || columnEmpty[ow]) continue;
      acc[index[o]] = acc[index[o]] + kernels::Traits<T>::load(g[o]);
    }
  }
  storePlane(gradInput + plane * inPlane, inPlane, buffer);
}

// Which output rows and columns have windows with no tap inside the input.
void emptyWindows(const resample::PoolGeometry& g, std::vector<char>* rows,
                  std::vector<char>* columns) {
  int64_t first, end;
  rows->resize(g.outHeight);
  columns->resize(g.outWidth);
  for (int64_t oh = 0; oh < g.outHeight; ++oh) {
    (*rows)[oh] = !resample::windowTaps(oh * g.strideHeight - g.padHeight, g.kernelHeight,
                                        g.dilationHeight, g.inHeight, &first, &end);
  }
  for (int64_t ow = 0; ow < g.outWidth; ++ow) {
    (*columns)[ow] = !resample::windowTaps(ow * g.strideWidth - g.padWidth, g.kernelWidth,
                                           g.dilationWidth, g.inWidth, &first, &end);
  }
}

// The index max_pool2d gives an empty window: its first stepped tap.
int64_t emptyIndex(const resample::PoolGeometry& g, int64_t oh, int64_t ow) {
  int64_t y0, x0, end;
  resample::windowTaps(oh * g.strideHeight - g.padHeight, g.kernelHeight, g.dilationHeight,
                       g.inHeight, &y0, &end);
  resample::windowTaps(ow * g.strideWidth - g.padWidth, g.kernelWidth, g.dilationWidth, g.inWidth,
                       &x0, &end);
  return y0 * g.inWidth + x0;
}

// The first output whose index is not a position of its window (INT64_MAX: none): the check of
// MaxPoolIndexCheckBody, with the window origins stepped rather than divided out of t.
int64_t firstBadPoolIndex(const int64_t* indices, const resample::PoolGeometry& g, int64_t planes,
                          const std::vector<char>& rowEmpty, const std::vector<char>& columnEmpty) {
  using Check = resample::MaxPoolIndexCheckBody;
  const int64_t inPlane = g.inHeight * g.inWidth;
  for (int64_t t = 0, plane = 0; plane < planes; ++plane) {
    for (int64_t oh = 0; oh < g.outHeight; ++oh) {
      const int64_t y0 = oh * g.strideHeight - g.padHeight;
      for (int64_t ow = 0; ow < g.outWidth; ++ow, ++t) {
        const int64_t index = indices[t];
        if (rowEmpty[oh] || columnEmpty[ow]) {  // a window in the padding alone
          if (index != emptyIndex(g, oh, ow)) return t;
          continue;
        }
        if (index < 0 || index >= inPlane) return t;
        const int64_t y = index / g.inWidth, x = index - y * g.inWidth;  // one division
        if (!Check::onAxis(y, y0, g.kernelHeight, g.dilationHeight, g.inHeight) ||
            !Check::onAxis(x, ow * g.strideWidth - g.padWidth, g.kernelWidth, g.dilationWidth,
                           g.inWidth)) {
          return t;
        }
      }
    }
  }
  return std::numeric_limits<int64_t>::max();
}

}  // namespace

Status pool2dOutputSize(const Pool2d& p, int64_t* outHeight, int64_t* outWidth) {
  const char* op = "max_pool2d";
  auto fail = [&](const std::string& why) {
    return Status::invalidArgument(std::string(op) + ": " + why);
  };
  if (p.planes < 0 || p.inHeight < 1 || p.inWidth < 1) {
    return fail("the input is " + std::to_string(p.planes) + " planes of " +
                std::to_string(p.inHeight) + " x " + std::to_string(p.inWidth) +
                "; it needs a non-empty plane");
  }
  if (p.kernelHeight < 1 || p.kernelWidth < 1) return fail("the kernel size must be positive");
  if (p.strideHeight < 1 || p.strideWidth < 1) return fail("the stride must be positive");
  if (p.dilationHeight < 1 || p.dilationWidth < 1) return fail("the dilation must be positive");
  if (p.padHeight < 0 || p.padWidth < 0 || p.padHeight > p.kernelHeight / 2 ||
      p.padWidth > p.kernelWidth / 2) {
    return fail("the padding (" + std::to_string(p.padHeight) + ", " + std::to_string(p.padWidth) +
                ") must be between 0 and half the kernel size (" + std::to_string(p.kernelHeight) +
                ", " + std::to_string(p.kernelWidth) + ")");
  }
  // Windows, strides and planes whose products fit in 64 bits with room to spare.
  for (const Status& fit :
       {sizesFit(op, {p.planes, p.inHeight, p.inWidth}),
        sizesFit(op, {p.kernelHeight, p.dilationHeight}),
        sizesFit(op, {p.kernelWidth, p.dilationWidth}), sizesFit(op, {p.strideHeight, p.inHeight}),
        sizesFit(op, {p.strideWidth, p.inWidth})}) {
    DETCOLL_RETURN_IF_ERROR(fit);
  }
  const int64_t h = poolOutput(p.inHeight, p.kernelHeight, p.padHeight, p.strideHeight,
                               p.dilationHeight, p.ceilMode);
  const int64_t w =
      poolOutput(p.inWidth, p.kernelWidth, p.padWidth, p.strideWidth, p.dilationWidth, p.ceilMode);
  if (h < 1 || w < 1) {
    return fail("the output of an input of " + std::to_string(p.inHeight) + " x " +
                std::to_string(p.inWidth) + " would be " + std::to_string(h) + " x " +
                std::to_string(w) + ": too small");
  }
  if (outHeight != nullptr) *outHeight = h;
  if (outWidth != nullptr) *outWidth = w;
  return Status::ok();
}

Status checkBilinear(const void* gradInput, const void* gradOutput, DataType type,
                     const Bilinear& s) {
  const char* op = "upsample_bilinear2d_backward";
  DETCOLL_RETURN_IF_ERROR(needFloating(op, type));
  if (s.planes < 0 || s.inHeight < 1 || s.inWidth < 1 || s.outHeight < 1 || s.outWidth < 1) {
    return Status::invalidArgument(
        std::string(op) + ": sizes must be positive: " + std::to_string(s.planes) +
        " planes, input " + std::to_string(s.inHeight) + " x " + std::to_string(s.inWidth) +
        ", output " + std::to_string(s.outHeight) + " x " + std::to_string(s.outWidth));
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {s.planes, s.inHeight, s.inWidth}));
  DETCOLL_RETURN_IF_ERROR(sizesFit(op, {s.planes, s.outHeight, s.outWidth}));
  for (double scale : {s.scaleHeight, s.scaleWidth}) {
    if (std::isnan(scale) || (scale > 0 && !std::isfinite(static_cast<float>(1.0 / scale)))) {
      return Status::invalidArgument(std::string(op) + ": scale factor " + showNumber(scale) +
                                     " gives no finite source position");
    }
  }
  if (s.planes > 0 && (gradInput == nullptr || gradOutput == nullptr)) {
    return Status::invalidArgument(std::string(op) + ": a null tensor");
  }
  return Status::ok();
}

Status checkMaxPool(const char* op, DataType type, const Pool2d& p,
                    std::initializer_list<const void*> tensors, int64_t* outHeight,
                    int64_t* outWidth) {
  DETCOLL_RETURN_IF_ERROR(needFloating(op, type));
  const Status size = pool2dOutputSize(p, outHeight, outWidth);  // its messages name max_pool2d
  if (!size.isOk()) return std::string(op) == "max_pool2d" ? size : size.prefixed(op);
  for (const void* t : tensors) {
    if (p.planes > 0 && t == nullptr) {
      return Status::invalidArgument(std::string(op) + ": a null tensor");
    }
  }
  return Status::ok();
}

Status badPoolIndex(const char* op, int64_t at, int64_t value, const Pool2d& p, int64_t oh,
                    int64_t ow) {
  return Status::invalidArgument(
      std::string(op) + ": indices[" + std::to_string(at) + "] = " + std::to_string(value) +
      " is not a position of output " + std::to_string(at % (oh * ow)) + "'s window in a " +
      std::to_string(p.inHeight) + " x " + std::to_string(p.inWidth) + " plane");
}

Status bilinear2dBackward(void* gradInput, const void* gradOutput, DataType type, const Bilinear& s,
                          int threads) {
  DETCOLL_RETURN_IF_ERROR(checkBilinear(gradInput, gradOutput, type, s));
  visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      using A = typename kernels::Traits<T>::Acc;
      const auto h =
          resample::linearAxis<A>(s.inHeight, s.outHeight, s.alignCorners, s.scaleHeight);
      const auto w = resample::linearAxis<A>(s.inWidth, s.outWidth, s.alignCorners, s.scaleWidth);
      forEachIndex(s.planes, threads, std::max<int64_t>(1, (64 << 10) / (s.outHeight * s.outWidth)),
                   [&](int64_t plane) {
                     bilinearPlane<T>(static_cast<T*>(gradInput), static_cast<const T*>(gradOutput),
                                      s, h, w, plane);
                   });
    }
  });
  return Status::ok();
}

Status maxPool2d(void* out, int64_t* indices, const void* in, DataType type, const Pool2d& p,
                 int threads) {
  int64_t oh = 0, ow = 0;
  DETCOLL_RETURN_IF_ERROR(checkMaxPool("max_pool2d", type, p, {out, indices, in}, &oh, &ow));
  visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      const resample::MaxPoolForwardBody<T> body{
          static_cast<T*>(out), indices, static_cast<const T*>(in), resample::geometry(p, oh, ow)};
      forEachIndex(p.planes * oh, threads, std::max<int64_t>(1, (16 << 10) / ow),
                   [&body](int64_t r) { body.row(r); });
    }
  });
  return Status::ok();
}

Status maxPool2dBackward(void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& p, int threads) {
  const char* op = "max_pool2d_backward";
  int64_t oh = 0, ow = 0;
  DETCOLL_RETURN_IF_ERROR(checkMaxPool(op, type, p, {gradInput, gradOutput, indices}, &oh, &ow));
  const resample::PoolGeometry g = resample::geometry(p, oh, ow);
  std::vector<char> rowEmpty, columnEmpty;
  emptyWindows(g, &rowEmpty, &columnEmpty);
  const int64_t bad = firstBadPoolIndex(indices, g, p.planes, rowEmpty, columnEmpty);
  if (bad != std::numeric_limits<int64_t>::max()) {
    return badPoolIndex(op, bad, indices[bad], p, oh, ow);
  }
  visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      forEachIndex(p.planes, threads, std::max<int64_t>(1, (64 << 10) / (oh * ow)),
                   [&](int64_t plane) {
                     maxPoolPlane<T>(static_cast<T*>(gradInput), static_cast<const T*>(gradOutput),
                                     indices, g, rowEmpty, columnEmpty, plane);
                   });
    }
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
