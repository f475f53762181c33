#pragma once

// The combiners of the rank-order fold (kernels/fold.h), as types so that each loop is compiled
// (and vectorized) for its operator, for the host and the device alike.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "common/host_device.h"
#include "kernels/accumulate.h"

namespace detcoll::kernels {

struct AddCombine {
  template <typename A>
  DETCOLL_HOST_DEVICE static A apply(A a, A b) {
    return wrapAdd(a, b);
  }
};

DETCOLL_HOST_DEVICE inline bool signBitOf(float v) {
  return (floatBits(v) >> 31) != 0;
}
DETCOLL_HOST_DEVICE inline bool signBitOf(double v) {
#if defined(__CUDA_ARCH__)
  return __double_as_longlong(v) < 0;
#else
  int64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits < 0;
#endif
}

// Order-independent min/max: NaN wins, -0 < +0.
template <bool kMin>
struct PickCombine {
  template <typename A>
  DETCOLL_HOST_DEVICE static A apply(A a, A b) {
    if constexpr (!std::is_integral_v<A>) {
      if (a != a) return a;
      if (b != b) return b;
      if (a == b) return (signBitOf(a) == kMin) ? a : b;
    }
    if constexpr (kMin) {
      return b < a ? b : a;
    } else {
      return a < b ? b : a;
    }
  }
};

// f(combiner, average) for a reduction op.
template <typename F>
void visitCombine(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum:
      return f(AddCombine{}, std::false_type{});
    case ReduceOp::kAverage:
      return f(AddCombine{}, std::true_type{});
    case ReduceOp::kMin:
      return f(PickCombine<true>{}, std::false_type{});
    case ReduceOp::kMax:
      return f(PickCombine<false>{}, std::false_type{});
  }
}

}  // namespace detcoll::kernels
