#pragma once

// nll_loss (kernels/ops/losses.h) on an executor: one body per sample, then the fixed-tree sums
// (bodies/axis_sums.h) and, for mean, one division.

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/axis_sums.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/bodies/taps.h"
#include "kernels/ops/losses.h"

namespace detcoll::kernels::ops::bodies {

template <typename E>
Status nllLoss(E& e, void* output, void* totalWeight, const void* input, const int64_t* target,
               const void* weight, DataType type, const NllLoss& l) {
  DETCOLL_RETURN_IF_ERROR(checkNllLoss(l, type, output, totalWeight, input, target));
  const int64_t samples = l.outer * l.inner;
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      T* losses = e.template alloc<T>(samples);  // the output only once the targets are good
      T* weights = e.template alloc<T>(samples);
      int64_t failed = kNoFailure;
      status = runCheck(
          e, samples,
          [&](int64_t* bad) {
            return NllSampleBody<T>{l,
                                    static_cast<const T*>(input),
                                    static_cast<const T*>(weight),
                                    target,
                                    losses,
                                    weights,
                                    bad};
          },
          &failed);
      if (status.isOk() && failed != kNoFailure) {
        status = nllLossError(l, failed, readIndex(e, target, failed));
      }
      if (status.isOk() && totalWeight != nullptr) {
        status = sumOverAxes(e, weights, {samples}, type, {0}, totalWeight);
      }
      if (!status.isOk()) return;
      if (l.reduction == 0) {
        e.launch(samples, CopyBody<T>{losses, static_cast<T*>(output)});
        return;
      }
      T* sum = l.reduction == 2 ? static_cast<T*>(output) : e.template alloc<T>(1);
      status = sumOverAxes(e, losses, {samples}, type, {0}, sum);
      if (status.isOk() && l.reduction == 1) {
        e.launch(1,
                 NllMeanBody<T>{sum, static_cast<const T*>(totalWeight), static_cast<T*>(output)});
      }
    }
  });
  DETCOLL_RETURN_IF_ERROR(status);
  return e.status();
}

}  // namespace detcoll::kernels::ops::bodies
