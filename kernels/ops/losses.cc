#include "kernels/ops/losses.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/axis_sums.h"
#include "kernels/ops/op_checks.h"

namespace detcoll::kernels::ops {

Status checkNllLoss(const NllLoss& l, DataType type, const void* output, const void* totalWeight,
                    const void* input, const int64_t* target) {
  const std::string op = "nll_loss: ";
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument(op + "dtype " + dataTypeName(type) + "; floating point only");
  }
  if (l.outer < 0 || l.classes < 0 || l.inner < 0) {
    return Status::invalidArgument(op + "negative size");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit("nll_loss", {l.outer, l.classes, l.inner}));
  if (l.reduction < 0 || l.reduction > 2) {
    return Status::invalidArgument(op + "reduction " + std::to_string(l.reduction) +
                                   "; 0 (none), 1 (mean) or 2 (sum)");
  }
  const int64_t samples = l.outer * l.inner;
  if ((samples > 0 && target == nullptr) || (samples * l.classes > 0 && input == nullptr) ||
      ((l.reduction != 0 || samples > 0) && output == nullptr) ||
      (l.reduction != 0 && totalWeight == nullptr)) {
    return Status::invalidArgument(op + "output, total_weight, input or target is null");
  }
  return Status::ok();
}

Status nllLossError(const NllLoss& l, int64_t at, int64_t value) {
  return Status::invalidArgument("nll_loss: target[" + std::to_string(at) +
                                 "] = " + std::to_string(value) + " is out of range for " +
                                 std::to_string(l.classes) + " classes (ignore_index " +
                                 std::to_string(l.ignoreIndex) + ")");
}

Status nllLoss(void* output, void* totalWeight, const void* input, const int64_t* target,
               const void* weight, DataType type, const NllLoss& l, int threads) {
  (void)threads;  // one pass over the samples; the sums are made as the losses are
  DETCOLL_RETURN_IF_ERROR(checkNllLoss(l, type, output, totalWeight, input, target));
  const int64_t samples = l.outer * l.inner;
  for (int64_t k = 0; k < samples; ++k) {  // every target known good before anything is written
    const int64_t t = target[k];
    if (t != l.ignoreIndex && (t < 0 || t >= l.classes)) return nllLossError(l, k, t);
  }
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatingStorage<T>()) {
      int64_t unused = 0;  // every target is good
      NllSampleBody<T> body{l,
                            static_cast<const T*>(input),
                            static_cast<const T*>(weight),
                            target,
                            nullptr,
                            nullptr,
                            &unused};
      if (l.reduction == 0) {  // the losses into the output, the weights summed as they come
        const T total =
            sumsAsMade<T, 1>(samples, [&](int64_t start, int64_t count, T* const* into) {
              body.losses = static_cast<T*>(output) + start;
              body.weights = into[0];
              body.first = start;
              for (int64_t k = start; k < start + count; ++k) body(k);
            })[0];
        if (totalWeight != nullptr) *static_cast<T*>(totalWeight) = total;
        return;
      }
      const std::array<T, 2> sums =
          sumsAsMade<T, 2>(samples, [&](int64_t start, int64_t count, T* const* into) {
            body.losses = into[0];
            body.weights = into[1];
            body.first = start;
            for (int64_t k = start; k < start + count; ++k) body(k);
          });
      *static_cast<T*>(totalWeight) = sums[1];
      if (l.reduction == 2) {
        *static_cast<T*>(output) = sums[0];
      } else {
        NllMeanBody<T>{&sums[0], &sums[1], static_cast<T*>(output)}(0);
      }
    }
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
