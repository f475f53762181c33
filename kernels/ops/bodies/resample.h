#pragma once

// Bilinear resampling's backward and 2-D max pooling (kernels/ops/resample.h) on an executor
// (bodies/executor.h): the per-pixel bodies of resample_kernels.h over a grid, one index per
// input pixel (the gathers) or output pixel (the forward), with the bilinear axis tables copied
// to the executor.

#include <cstdint>
#include <type_traits>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops::bodies {

template <typename E, typename A>
resample::LinearAxisView<A> copyAxis(E& e, const resample::LinearAxisTable<A>& t) {
  auto copy = [&e](const auto& v) {
    using V = typename std::decay_t<decltype(v)>::value_type;
    V* p = e.template alloc<V>(static_cast<int64_t>(v.size()));
    if (!v.empty()) e.toDevice(p, v.data(), v.size() * sizeof(V));
    return static_cast<const V*>(p);
  };
  return {copy(t.l0), copy(t.l1), copy(t.offsets), copy(t.outputs), copy(t.masks)};
}

template <typename E>
Status bilinear2dBackward(E& e, void* gradInput, const void* gradOutput, DataType type,
                          const Bilinear& s) {
  DETCOLL_RETURN_IF_ERROR(checkBilinear(gradInput, gradOutput, type, s));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      using A = typename kernels::Traits<T>::Acc;
      const auto h =
          resample::linearAxis<A>(s.inHeight, s.outHeight, s.alignCorners, s.scaleHeight);
      const auto w = resample::linearAxis<A>(s.inWidth, s.outWidth, s.alignCorners, s.scaleWidth);
      e.launch(s.planes * s.inHeight * s.inWidth,
               resample::BilinearBackwardBody<T>{
                   static_cast<T*>(gradInput), static_cast<const T*>(gradOutput), s.inHeight,
                   s.inWidth, s.outHeight, s.outWidth, copyAxis(e, h), copyAxis(e, w)});
    }
  });
  return e.status();
}

template <typename E>
Status maxPool2d(E& e, void* out, int64_t* indices, const void* in, DataType type,
                 const Pool2d& p) {
  int64_t oh = 0, ow = 0;
  DETCOLL_RETURN_IF_ERROR(checkMaxPool("max_pool2d", type, p, {out, indices, in}, &oh, &ow));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      e.launch(p.planes * oh * ow, resample::MaxPoolForwardBody<T>{static_cast<T*>(out), indices,
                                                                   static_cast<const T*>(in),
                                                                   resample::geometry(p, oh, ow)});
    }
  });
  return e.status();
}

template <typename E>
Status maxPool2dBackward(E& e, void* gradInput, const void* gradOutput, const int64_t* indices,
                         DataType type, const Pool2d& p) {
  const char* op = "max_pool2d_backward";
  int64_t oh = 0, ow = 0;
  DETCOLL_RETURN_IF_ERROR(checkMaxPool(op, type, p, {gradInput, gradOutput, indices}, &oh, &ow));
  const resample::PoolGeometry g = resample::geometry(p, oh, ow);
  int64_t failed = kNoFailure;
  DETCOLL_RETURN_IF_ERROR(runCheck(
      e, p.planes * oh * ow,
      [&](int64_t* bad) {
        return resample::MaxPoolIndexCheckBody{indices, g, bad};
      },
      &failed));
  if (failed != kNoFailure) {
    return badPoolIndex(op, failed, readIndex(e, indices, failed), p, oh, ow);
  }
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      e.launch(p.planes * p.inHeight * p.inWidth,
               resample::MaxPoolBackwardBody<T>{static_cast<T*>(gradInput),
                                                static_cast<const T*>(gradOutput), indices, g});
    }
  });
  return e.status();
}

}  // namespace detcoll::kernels::ops::bodies
