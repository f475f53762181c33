#pragma once

// nll_loss with a fixed summation order (docs/design.md, "Patching torch's operators"): the body
// shared by the CPU reference (losses.cc) and the executor's formulation (bodies/losses.h).
// input is [outer, classes, inner] log-probabilities, target [outer, inner] class indices, weight
// [classes] or none. Sample k = n · inner + i, with t its target, is kept where t != ignoreIndex
// (and then t must be a class); its loss is (-input[n][t][i]) · w_t, the product rounded to the
// dtype as torch forms it (w_t = weight[t], or 1), and its weight w_t; an ignored sample's are 0.
// Reduction none gives the losses; sum and mean give the fixed-tree sums of the losses and of
// the weights (axis_sums.h), mean dividing the first by the second once, in the dtype's
// arithmetic, a NaN being the dtype's canonical one.

#include <cstdint>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"
#include "kernels/ops/resample_kernels.h"

namespace detcoll::kernels::ops {

struct NllLoss {
  int64_t outer = 0, classes = 0, inner = 1;
  int64_t ignoreIndex = -100;
  int reduction = 1;  // 0 none, 1 mean, 2 sum
};

Status checkNllLoss(const NllLoss& l, DataType type, const void* output, const void* totalWeight,
                    const void* input, const int64_t* target);

// Sample k's loss and weight; a kept target outside the classes goes to *bad.
template <typename T>
struct NllSampleBody {
  NllLoss l;
  const T *input, *weight;  // weight null: 1
  const int64_t* target;
  T *losses, *weights;  // sample k's at [k - first]
  int64_t* bad;
  int64_t first = 0;
  DETCOLL_HOST_DEVICE void operator()(int64_t k) const {
    using A = typename kernels::Traits<T>::Acc;
    const int64_t t = target[k];
    bool kept = t != l.ignoreIndex;
    if (kept && (t < 0 || t >= l.classes)) {
      resample::recordFirst(bad, k);
      kept = false;
    }
    if (!kept) {
      losses[k - first] = kernels::Traits<T>::store(A(0));
      weights[k - first] = kernels::Traits<T>::store(A(0));
      return;
    }
    const int64_t n = l.inner == 1 ? k : k / l.inner, i = l.inner == 1 ? 0 : k % l.inner;
    const A x = kernels::Traits<T>::load(input[(n * l.classes + t) * l.inner + i]);
    const A w = weight != nullptr ? kernels::Traits<T>::load(weight[t]) : A(1);
    losses[k - first] = kernels::Traits<T>::round(-x * w);
    weights[k - first] = kernels::Traits<T>::round(w);
  }
};

// mean: *sum / *total, in the dtype's arithmetic, into *out.
template <typename T>
struct NllMeanBody {
  const T *sum, *total;
  T* out;
  DETCOLL_HOST_DEVICE void operator()(int64_t) const {
    *out = kernels::Traits<T>::store(kernels::Traits<T>::load(*sum) /
                                     kernels::Traits<T>::load(*total));
  }
};

Status nllLossError(const NllLoss& l, int64_t at, int64_t value);

// The CPU reference: output [outer · inner] (none) or a scalar; totalWeight a scalar, or null
// (none only).
Status nllLoss(void* output, void* totalWeight, const void* input, const int64_t* target,
               const void* weight, DataType type, const NllLoss& l, int threads);

}  // namespace detcoll::kernels::ops
