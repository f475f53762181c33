#include "kernels/fold.h"

#include "common/half.h"
#include "kernels/accumulate.h"
#include "kernels/combine.h"

namespace detcoll::kernels {
namespace {

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

}  // namespace

void foldRankOrder(void* out, const void* const* inputs, int k, size_t count, DataType type,
                   ReduceOp op, int64_t divisor) {
  visitType(type, [&](auto tag) {
    visitCombine(op, [&](auto combine, auto average) {
      foldTyped<typename decltype(tag)::type, decltype(combine), decltype(average)::value>(
          out, inputs, k, count, divisor);
    });
  });
}

}  // namespace detcoll::kernels
