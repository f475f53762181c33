#include "kernels/fold.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/half.h"
#include "kernels/accumulate.h"

namespace detcoll::kernels {
namespace {

// Combiners as types, so that each loop is compiled (and vectorized) for its operator.
struct AddOp {
  template <typename A>
  static A apply(A a, A b) {
    return wrapAdd(a, b);
  }
};

// Order-independent min/max: NaN wins, -0 < +0.
template <bool kMin>
struct PickOp {
  template <typename A>
  static A apply(A a, A b) {
    if constexpr (!std::is_integral_v<A>) {
      if (a != a) return a;
      if (b != b) return b;
      if (a == b) return (std::signbit(a) == kMin) ? a : b;
    }
    if constexpr (kMin) {
      return b < a ? b : a;
    } else {
      return a < b ? b : a;
    }
  }
};

// Elements per block: the accumulator block stays in L1 while the inputs stream through.
constexpr size_t kBlock = 2048;

template <typename T, typename Op, bool kAverage>
void foldBlock(T* out, const void* const* inputs, int k, size_t base, size_t n,
               typename Traits<T>::Acc divisor) {
  using Acc = typename Traits<T>::Acc;
  alignas(64) Acc acc[kBlock];
  const T* x0 = static_cast<const T*>(inputs[0]) + base;
  if (k == 1) {
    for (size_t i = 0; i < n; ++i) acc[i] = Traits<T>::load(x0[i]);
  } else {
    // The first step reads two inputs at once: one pass fewer over the accumulator.
    const T* x1 = static_cast<const T*>(inputs[1]) + base;
    for (size_t i = 0; i < n; ++i)
      acc[i] = Op::apply(Traits<T>::load(x0[i]), Traits<T>::load(x1[i]));
  }
  for (int j = 2; j < k; ++j) {
    const T* xj = static_cast<const T*>(inputs[j]) + base;
    for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], Traits<T>::load(xj[i]));
  }
  T* o = out + base;
  if constexpr (kAverage) {
    for (size_t i = 0; i < n; ++i) o[i] = Traits<T>::store(acc[i] / divisor);
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = Traits<T>::store(acc[i]);
  }
}

template <typename T, typename Op, bool kAverage>
void foldTyped(void* out, const void* const* inputs, int k, size_t count, int64_t divisor) {
  using Acc = typename Traits<T>::Acc;
  const Acc d = static_cast<Acc>(divisor);
  for (size_t base = 0; base < count; base += kBlock) {
    foldBlock<T, Op, kAverage>(static_cast<T*>(out), inputs, k, base,
                               count - base < kBlock ? count - base : kBlock, d);
  }
}

template <typename T>
void foldForType(void* out, const void* const* inputs, int k, size_t count, ReduceOp op,
                 int64_t divisor) {
  switch (op) {
    case ReduceOp::kSum:
      return foldTyped<T, AddOp, false>(out, inputs, k, count, divisor);
    case ReduceOp::kAverage:
      return foldTyped<T, AddOp, true>(out, inputs, k, count, divisor);
    case ReduceOp::kMin:
      return foldTyped<T, PickOp<true>, false>(out, inputs, k, count, divisor);
    case ReduceOp::kMax:
      return foldTyped<T, PickOp<false>, false>(out, inputs, k, count, divisor);
  }
}

}  // namespace

void foldRankOrder(void* out, const void* const* inputs, int k, size_t count, DataType type,
                   ReduceOp op, int64_t divisor) {
  visitType(type, [&](auto tag) {
    foldForType<typename decltype(tag)::type>(out, inputs, k, count, op, divisor);
  });
}

}  // namespace detcoll::kernels
