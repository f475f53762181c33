#pragma once

// ctc_loss's backward (kernels/ops/ctc.h) on an executor: the labels checked, log β one launch per
// time step (every batch element and position at once, each from the step after it), the class
// sums one body per (time, batch element), then one body per gradient element.

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ops/bodies/executor.h"
#include "kernels/ops/bodies/taps.h"
#include "kernels/ops/ctc.h"

namespace detcoll::kernels::ops::bodies {

template <typename E>
Status ctcLossBackward(E& e, void* gradLogProbs, const void* grad, const void* logProbs,
                       const int64_t* targets, const int64_t* inputLengths,
                       const int64_t* targetLengths, const void* nll, const void* logAlpha,
                       DataType type, Ctc c) {
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument("ctc_loss_backward: dtype " + dataTypeName(type) +
                                   "; floating point only");
  }
  DETCOLL_RETURN_IF_ERROR(checkCtc(&c, inputLengths, targetLengths, gradLogProbs, grad, logProbs,
                                   targets, nll, logAlpha));
  const std::vector<int64_t> inputs(inputLengths, inputLengths + c.batch),
      lengths(targetLengths, targetLengths + c.batch);
  const int64_t* inputsOn = upload(e, inputs);
  const int64_t* lengthsOn = upload(e, lengths);
  int64_t failed = kNoFailure;
  if (c.batch * c.targetStride > 0) {
    DETCOLL_RETURN_IF_ERROR(runCheck(
        e, c.batch * c.targetStride,
        [&](int64_t* bad) {
          return CtcTargetCheckBody{c, targets, lengthsOn, bad};
        },
        &failed));
  }
  if (failed != kNoFailure) return ctcTargetError(c, failed, readIndex(e, targets, failed));
  const int64_t n = c.steps * c.batch * c.classes;
  if (n == 0) return e.status();
  double* beta = e.template alloc<double>(c.steps * c.batch * c.width);
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kernels::isFloatingStorage<T>()) {
      const T* lp = static_cast<const T*>(logProbs);
      for (int64_t t = c.steps - 1; t >= 0; --t) {
        e.launch(c.batch * c.width, CtcBetaBody<T>{c, lp, targets, inputsOn, lengthsOn, beta, t});
      }
      double* tops = e.template alloc<double>(c.steps * c.batch);
      double* sums = e.template alloc<double>(n);
      e.launch(c.steps * c.batch, CtcSharesBody<T>{c, static_cast<const T*>(logAlpha), targets,
                                                   lengthsOn, beta, tops, sums});
      e.launch(n, CtcGradientBody<T>{c, lp, static_cast<const T*>(nll), static_cast<const T*>(grad),
                                     inputsOn, tops, sums, static_cast<T*>(gradLogProbs)});
    }
  });
  return e.status();
}

}  // namespace detcoll::kernels::ops::bodies
