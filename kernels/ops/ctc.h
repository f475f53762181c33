#pragma once

// ctc_loss's backward (docs/design.md, "Patching torch's operators"): the bodies shared by the CPU
// reference (ctc.cc runs them in loops) and the executor's formulation (bodies/ctc.h). Batch
// element b has the extended target l' = blank, l1, blank, l2, ..., blank (2 L_b + 1 positions s)
// and the forward's log α. In float64:
//   log β at time t and position s, for t from T - 1 down: at t = T_b - 1, log p(t, l'(s)) for
//   the last two positions and -inf elsewhere; before it,
//     m = max(β(t+1, s), β(t+1, s+1), β(t+1, s+2) where s may skip)   (0 where all are -inf)
//     β(t, s) = log(e^(β(t+1,s) - m) + e^(β(t+1,s+1) - m) + e^(β(t+1,s+2) - m)) + m + log p(t,
//     l'(s))
//   (s skips to s + 2 where l'(s) is a label other than l'(s + 2)); -inf from T_b on.
//   The gradient at (t, b, c), t < T_b: with m' the largest log α + log β over s (0 if -inf),
//   (both, and the class sums below, computed once per (t, b)),
//     S = Σ over s with l'(s) = c, in increasing s, of e^(log α + log β - m'),
//     (e^(log p) - e^(log S + m' + nll_b - log p)) · grad_b
//   rounded once to the dtype; 0 from T_b on, and for b whose nll is infinite with zeroInfinity.
// exp and log are the platform's: the CPU reference and the serial run agree bit for bit; a
// device's exp and log differ from the host's in their last bits.

#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops {

struct Ctc {
  int64_t steps = 0, batch = 0, classes = 0;  // T, B, C of log_probs [T, B, C]
  int64_t blank = 0;
  int64_t targetStride = 0;  // labels per row of targets [B, targetStride]
  int64_t width = 1;         // 2 · max L_b + 1
  int64_t alphaWidth = 0;    // log_alpha [B, T, alphaWidth], alphaWidth >= width
  bool zeroInfinity = false;
};

// Checks the sizes, lengths (host arrays) and buffers, and sets ctc->width from the lengths.
Status checkCtc(Ctc* ctc, const int64_t* inputLengths, const int64_t* targetLengths,
                const void* gradLogProbs, const void* grad, const void* logProbs,
                const int64_t* targets, const void* nll, const void* logAlpha);

// A label outside the classes, at flat position `at` of targets.
Status ctcTargetError(const Ctc& c, int64_t at, int64_t value);

namespace ctc {

DETCOLL_HOST_DEVICE inline double negInf() {
  return -HUGE_VAL;
}

// l'(s) of batch element b (-1 past its extended target).
DETCOLL_HOST_DEVICE inline int64_t label(const Ctc& c, const int64_t* targets,
                                         const int64_t* targetLengths, int64_t b, int64_t s) {
  if (s >= 2 * targetLengths[b] + 1) return -1;
  return s % 2 == 0 ? c.blank : targets[b * c.targetStride + (s - 1) / 2];
}

}  // namespace ctc

// targets[i] (i = b · targetStride + j): a label read (j < L_b) outside the classes goes to *bad.
struct CtcTargetCheckBody {
  Ctc c;
  const int64_t *targets, *targetLengths;
  int64_t* bad;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / c.targetStride, j = i % c.targetStride;
    if (j < targetLengths[b] && (targets[i] < 0 || targets[i] >= c.classes)) {
      resample::recordFirst(bad, i);
    }
  }
};

// log β at time t for (b, s), i = b · width + s, into beta [T, B, width] (β at t + 1 written).
template <typename T>
struct CtcBetaBody {
  Ctc c;
  const T* logProbs;
  const int64_t *targets, *inputLengths, *targetLengths;
  double* beta;
  int64_t t;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / c.width, s = i % c.width;
    double* out = beta + (t * c.batch + b) * c.width + s;
    const int64_t l = ctc::label(c, targets, targetLengths, b, s), last = inputLengths[b] - 1;
    const int64_t ends = 2 * targetLengths[b];
    if (l < 0 || t > last) {
      *out = ctc::negInf();
      return;
    }
    const double emit =
        static_cast<double>(kernels::Traits<T>::load(logProbs[(t * c.batch + b) * c.classes + l]));
    if (t == last) {
      *out = s == ends || s == ends - 1 ? emit : ctc::negInf();
      return;
    }
    const double* next = beta + ((t + 1) * c.batch + b) * c.width;
    const double one = next[s];
    const double two = s + 1 < c.width ? next[s + 1] : ctc::negInf();
    const bool skips =
        s % 2 == 1 && s + 2 < c.width && ctc::label(c, targets, targetLengths, b, s + 2) != l;
    const double three = skips ? next[s + 2] : ctc::negInf();
    double top = one > two ? one : two;
    top = top > three ? top : three;
    if (top == ctc::negInf()) top = 0;
    *out = ::log(::exp(one - top) + ::exp(two - top) + ::exp(three - top)) + top + emit;
  }
};

// (t, b), j = t · B + b: m' (tops[j]) and each class's sum of e^(log α + log β - m') over its
// positions in increasing s (sums[j · C + c], 0 for a class no position has).
template <typename T>
struct CtcSharesBody {
  Ctc c;
  const T* logAlpha;
  const int64_t *targets, *targetLengths;
  const double* beta;
  double *tops, *sums;
  DETCOLL_HOST_DEVICE void operator()(int64_t j) const {
    const int64_t b = j % c.batch, t = j / c.batch;
    const T* alpha = logAlpha + (b * c.steps + t) * c.alphaWidth;
    const double* betas = beta + j * c.width;
    const int64_t used = 2 * targetLengths[b] + 1;
    double top = ctc::negInf();
    for (int64_t s = 0; s < used; ++s) {
      const double both = static_cast<double>(kernels::Traits<T>::load(alpha[s])) + betas[s];
      top = both > top ? both : top;
    }
    if (top == ctc::negInf()) top = 0;
    tops[j] = top;
    double* sum = sums + j * c.classes;
    for (int64_t k = 0; k < c.classes; ++k) sum[k] = 0;
    for (int64_t s = 0; s < used; ++s) {
      const int64_t k = ctc::label(c, targets, targetLengths, b, s);
      sum[k] =
          sum[k] + ::exp(static_cast<double>(kernels::Traits<T>::load(alpha[s])) + betas[s] - top);
    }
  }
};

// The gradient at (t, b, c), i = (t · B + b) · C + c, into gradLogProbs [T, B, C].
template <typename T>
struct CtcGradientBody {
  Ctc c;
  const T *logProbs, *nll, *grad;
  const int64_t* inputLengths;
  const double *tops, *sums;
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    using A = typename kernels::Traits<T>::Acc;
    const int64_t b = (i / c.classes) % c.batch, t = i / (c.classes * c.batch);
    const double loss = static_cast<double>(kernels::Traits<T>::load(nll[b]));
    if (t >= inputLengths[b] || (c.zeroInfinity && (loss == HUGE_VAL || loss == -HUGE_VAL))) {
      out[i] = kernels::Traits<T>::store(A(0));
      return;
    }
    const double top = tops[i / c.classes];
    const double lp = static_cast<double>(kernels::Traits<T>::load(logProbs[i]));
    const double g = static_cast<double>(kernels::Traits<T>::load(grad[b]));
    const double r = (::exp(lp) - ::exp(::log(sums[i]) + top + loss - lp)) * g;
    out[i] = kernels::Traits<T>::store(static_cast<A>(r));
  }
};

// The CPU reference: gradLogProbs [T, B, C] from grad [B], log_probs [T, B, C], targets [B,
// targetStride], the lengths (host arrays [B]), neg_log_likelihood [B] and log_alpha [B, T,
// alphaWidth], all but the lengths and targets in the dtype. threads <= 0: the hardware's.
Status ctcLossBackward(void* gradLogProbs, const void* grad, const void* logProbs,
                       const int64_t* targets, const int64_t* inputLengths,
                       const int64_t* targetLengths, const void* nll, const void* logAlpha,
                       DataType type, Ctc ctc, int threads);

}  // namespace detcoll::kernels::ops
