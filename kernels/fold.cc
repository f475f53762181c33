#include "kernels/fold.h"

#include <algorithm>
#include <type_traits>

#include "common/half.h"
#include "kernels/accumulate.h"
#include "kernels/combine.h"
#include "kernels/convert16.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels {
namespace {

// Elements per block: the accumulator block stays in L1 while the inputs stream through.
constexpr size_t kBlock = 2048;

// Element i of a buffer of T: through a T* where every buffer of the call is aligned to T (the
// loops the compiler vectorizes best), through bytes where one is not (a caller's buffer may start
// at any byte address: kernels/unaligned.h).
template <typename T, bool kAligned>
struct Elements {
  static T load(const char* p, size_t i) {
    if constexpr (kAligned) {
      return reinterpret_cast<const T*>(p)[i];
    } else {
      return loadAt<T>(p, i);
    }
  }
  static void store(char* p, size_t i, T v) {
    if constexpr (kAligned) {
      reinterpret_cast<T*>(p)[i] = v;
    } else {
      storeAt<T>(p, i, v);
    }
  }
};

template <typename T, typename Op, bool kAverage, bool kAligned>
void foldBlock(void* out, const void* const* inputs, int k, size_t base, size_t n,
               typename Traits<T>::Acc divisor) {
  using Acc = typename Traits<T>::Acc;
  using E = Elements<T, kAligned>;
  alignas(64) Acc acc[kBlock];
  const size_t offset = base * sizeof(T);
  const char* x0 = static_cast<const char*>(inputs[0]) + offset;
  if (k == 1) {
    for (size_t i = 0; i < n; ++i) acc[i] = Traits<T>::load(E::load(x0, i));
  } else {
    // The first step reads two inputs at once: one pass fewer over the accumulator.
    const char* x1 = static_cast<const char*>(inputs[1]) + offset;
    for (size_t i = 0; i < n; ++i)
      acc[i] = Op::apply(Traits<T>::load(E::load(x0, i)), Traits<T>::load(E::load(x1, i)));
  }
  for (int j = 2; j < k; ++j) {
    const char* xj = static_cast<const char*>(inputs[j]) + offset;
    for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], Traits<T>::load(E::load(xj, i)));
  }
  char* o = static_cast<char*>(out) + offset;
  if constexpr (kAverage) {
    for (size_t i = 0; i < n; ++i) E::store(o, i, Traits<T>::store(acc[i] / divisor));
  } else {
    for (size_t i = 0; i < n; ++i) E::store(o, i, Traits<T>::store(acc[i]));
  }
}

// float16 and bfloat16: each input block widens to float once, in a vectorized pass, and the
// result narrows once; the arithmetic is foldBlock's, in float.
template <typename T, typename Op, bool kAverage>
void foldBlock16(void* out, const void* const* inputs, int k, size_t base, size_t n,
                 float divisor) {
  constexpr bool kHalf = std::is_same_v<T, Half>;
  auto widen = [&](float* to, int j) {
    const char* x = static_cast<const char*>(inputs[j]) + base * sizeof(T);
    kHalf ? widenHalf(to, x, n) : widenBFloat16(to, x, n);
  };
  alignas(64) float acc[kBlock];
  alignas(64) float x[kBlock];
  widen(acc, 0);
  for (int j = 1; j < k; ++j) {
    widen(x, j);
    for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], x[i]);
  }
  if constexpr (kAverage) {
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] / divisor;
  }
  char* o = static_cast<char*>(out) + base * sizeof(T);
  kHalf ? narrowHalf(o, acc, n) : narrowBFloat16(o, acc, n);
}

template <typename T, typename Op, bool kAverage>
void foldTyped(void* out, const void* const* inputs, int k, size_t count, int64_t divisor) {
  using Acc = typename Traits<T>::Acc;
  const Acc d = static_cast<Acc>(divisor);
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    for (size_t base = 0; base < count; base += kBlock) {
      foldBlock16<T, Op, kAverage>(out, inputs, k, base, std::min(kBlock, count - base), d);
    }
    return;
  }
  bool aligned = alignedFor<T>(out);
  for (int j = 0; j < k; ++j) aligned = aligned && alignedFor<T>(inputs[j]);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = count - base < kBlock ? count - base : kBlock;
    if (aligned) {
      foldBlock<T, Op, kAverage, true>(out, inputs, k, base, n, d);
    } else {
      foldBlock<T, Op, kAverage, false>(out, inputs, k, base, n, d);
    }
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
