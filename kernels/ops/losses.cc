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
  DETCOLL_RETURN_IF_ERROR(checkNllLoss(l, type, output, totalWeight, input, target));
  const int64_t samples = l.outer * l.inner;
  Status status;
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatingStorage<T>()) {
      std::vector<T> losses(static_cast<size_t>(samples)), weights(losses.size());
      int64_t bad = std::numeric_limits<int64_t>::max();
      const NllSampleBody<T> body{l,
                                  static_cast<const T*>(input),
                                  static_cast<const T*>(weight),
                                  target,
                                  losses.data(),
                                  weights.data(),
                                  &bad};
      for (int64_t k = 0; k < samples; ++k) body(k);
      if (bad != std::numeric_limits<int64_t>::max()) {
        status = nllLossError(l, bad, target[bad]);
        return;
      }
      if (totalWeight != nullptr) {
        status = sumOverAxes(weights.data(), {samples}, type, {0}, totalWeight, threads);
      }
      if (!status.isOk()) return;
      if (l.reduction == 0) {  // written only once every target is known good
        std::copy(losses.begin(), losses.end(), static_cast<T*>(output));
        return;
      }
      T sum;
      status = sumOverAxes(losses.data(), {samples}, type, {0}, &sum, threads);
      if (!status.isOk()) return;
      if (l.reduction == 2) {
        *static_cast<T*>(output) = sum;
      } else {
        NllMeanBody<T>{&sum, static_cast<const T*>(totalWeight), static_cast<T*>(output)}(0);
      }
    }
  });
  return status;
}

}  // namespace detcoll::kernels::ops
