#include "kernels/ops/ctc.h"

#include <string>
#include <vector>

#include "kernels/ops/for_each_index.h"
#include "kernels/ops/op_checks.h"

namespace detcoll::kernels::ops {

Status checkCtc(Ctc* c, const int64_t* inputLengths, const int64_t* targetLengths,
                const void* gradLogProbs, const void* grad, const void* logProbs,
                const int64_t* targets, const void* nll, const void* logAlpha) {
  const std::string op = "ctc_loss_backward: ";
  if (c->steps < 0 || c->batch < 0 || c->classes < 0 || c->targetStride < 0 || c->alphaWidth < 0) {
    return Status::invalidArgument(op + "negative size");
  }
  DETCOLL_RETURN_IF_ERROR(sizesFit("ctc_loss_backward", {c->steps, c->batch, c->classes}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("ctc_loss_backward", {c->batch, c->steps, c->alphaWidth}));
  DETCOLL_RETURN_IF_ERROR(sizesFit("ctc_loss_backward", {c->batch, c->targetStride}));
  if (c->blank < 0 || c->blank >= c->classes) {
    return Status::invalidArgument(op + "blank " + std::to_string(c->blank) + " is not one of " +
                                   std::to_string(c->classes) + " classes");
  }
  if (c->batch > 0 && (inputLengths == nullptr || targetLengths == nullptr)) {
    return Status::invalidArgument(op + "input_lengths or target_lengths is null");
  }
  int64_t longest = 0;
  for (int64_t b = 0; b < c->batch; ++b) {
    if (inputLengths[b] < 0 || inputLengths[b] > c->steps || targetLengths[b] < 0 ||
        targetLengths[b] > c->targetStride) {
      return Status::invalidArgument(op + "batch element " + std::to_string(b) + ": input length " +
                                     std::to_string(inputLengths[b]) + " must lie in [0, " +
                                     std::to_string(c->steps) + "] and target length " +
                                     std::to_string(targetLengths[b]) + " in [0, " +
                                     std::to_string(c->targetStride) + "]");
    }
    longest = targetLengths[b] > longest ? targetLengths[b] : longest;
  }
  c->width = 2 * longest + 1;
  if (c->alphaWidth < c->width) {
    return Status::invalidArgument(op + "log_alpha holds " + std::to_string(c->alphaWidth) +
                                   " positions per step; the targets need " +
                                   std::to_string(c->width));
  }
  const bool any = c->steps * c->batch * c->classes > 0;
  if ((any && (gradLogProbs == nullptr || grad == nullptr || logProbs == nullptr ||
               nll == nullptr || logAlpha == nullptr)) ||
      (longest > 0 && targets == nullptr)) {
    return Status::invalidArgument(op + "a buffer is null");
  }
  return Status::ok();
}

Status ctcTargetError(const Ctc& c, int64_t at, int64_t value) {
  return Status::invalidArgument(
      "ctc_loss_backward: targets[" + std::to_string(at / c.targetStride) + "][" +
      std::to_string(at % c.targetStride) + "] = " + std::to_string(value) + " is not one of " +
      std::to_string(c.classes) + " classes");
}

Status ctcLossBackward(void* gradLogProbs, const void* grad, const void* logProbs,
                       const int64_t* targets, const int64_t* inputLengths,
                       const int64_t* targetLengths, const void* nll, const void* logAlpha,
                       DataType type, Ctc c, int threads) {
  if (!isFloatingPoint(type)) {
    return Status::invalidArgument("ctc_loss_backward: dtype " + dataTypeName(type) +
                                   "; floating point only");
  }
  DETCOLL_RETURN_IF_ERROR(checkCtc(&c, inputLengths, targetLengths, gradLogProbs, grad, logProbs,
                                   targets, nll, logAlpha));
  for (int64_t b = 0; b < c.batch; ++b) {  // the labels read, in order
    for (int64_t i = 0; i < targetLengths[b]; ++i) {
      const int64_t v = targets[b * c.targetStride + i];
      if (v < 0 || v >= c.classes) return ctcTargetError(c, b * c.targetStride + i, v);
    }
  }
  const int64_t n = c.steps * c.batch * c.classes;
  if (n == 0) return Status::ok();
  std::vector<double> beta(static_cast<size_t>(c.steps * c.batch * c.width));
  kernels::visitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatingStorage<T>()) {
      const T* lp = static_cast<const T*>(logProbs);
      for (int64_t t = c.steps - 1; t >= 0; --t) {
        const CtcBetaBody<T> step{c, lp, targets, inputLengths, targetLengths, beta.data(), t};
        for (int64_t i = 0; i < c.batch * c.width; ++i) step(i);
      }
      std::vector<double> tops(static_cast<size_t>(c.steps * c.batch)),
          sums(static_cast<size_t>(n));
      const CtcSharesBody<T> shares{c,           static_cast<const T*>(logAlpha),
                                    targets,     targetLengths,
                                    beta.data(), tops.data(),
                                    sums.data()};
      forEachIndex(c.steps * c.batch, threads, 64, shares);
      const CtcGradientBody<T> body{c,
                                    lp,
                                    static_cast<const T*>(nll),
                                    static_cast<const T*>(grad),
                                    inputLengths,
                                    tops.data(),
                                    sums.data(),
                                    static_cast<T*>(gradLogProbs)};
      forEachIndex(n, threads, 4096, body);
    }
  });
  return Status::ok();
}

}  // namespace detcoll::kernels::ops
