#include "kernels/fold.h"

#include <algorithm>
#include <type_traits>

#include "common/half.h"
#include "kernels/accumulate.h"
#include "kernels/combine.h"
#include "kernels/convert16.h"
#include "kernels/simd.h"
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

// Average's last step, out[i] = acc[i] / divisor. Where the divisor is a power of two (np 2, 4, 8,
// ...), `reciprocal` is its exact inverse and the step multiplies by it: a / 2^k and a * 2^-k are
// the same real number, rounded once to nearest even either way, so the bits are the same
// (subnormal, infinite and NaN results included), and a multiply costs a fraction of a divide.
// reciprocal is 0 otherwise, and for the integer types, whose division truncates.
template <typename Acc, typename Store>
DETCOLL_FORCE_INLINE void finishAverage(Acc* acc, size_t n, Acc divisor, Acc reciprocal,
                                        const Store& store) {
  if (reciprocal != 0) {
    for (size_t i = 0; i < n; ++i) store(i, acc[i] * reciprocal);
  } else {
    for (size_t i = 0; i < n; ++i) store(i, acc[i] / divisor);
  }
}

template <typename T, typename Op, bool kAverage, bool kAligned>
DETCOLL_FORCE_INLINE void foldBlock(void* out, const void* const* inputs, int k, size_t base,
                                    size_t n, typename Traits<T>::Acc divisor,
                                    typename Traits<T>::Acc reciprocal) {
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
    finishAverage(acc, n, divisor, reciprocal,
                  [&](size_t i, Acc v) { E::store(o, i, Traits<T>::store(v)); });
  } else {
    for (size_t i = 0; i < n; ++i) E::store(o, i, Traits<T>::store(acc[i]));
  }
}

// float16 and bfloat16: each input block widens to float once, in a vectorized pass, and the
// result narrows once; the arithmetic is foldBlock's, in float.
template <typename T, typename Op, bool kAverage>
DETCOLL_FORCE_INLINE void foldBlock16(void* out, const void* const* inputs, int k, size_t base,
                                      size_t n, float divisor, float reciprocal) {
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
    finishAverage(acc, n, divisor, reciprocal, [&](size_t i, float v) { acc[i] = v; });
  }
  char* o = static_cast<char*>(out) + base * sizeof(T);
  kHalf ? narrowHalf(o, acc, n) : narrowBFloat16(o, acc, n);
}

template <typename T, typename Op, bool kAverage>
DETCOLL_FORCE_INLINE void foldTyped(void* out, const void* const* inputs, int k, size_t count,
                                    int64_t divisor) {
  using Acc = typename Traits<T>::Acc;
  const Acc d = static_cast<Acc>(divisor);
  const bool powerOfTwo = divisor > 0 && (divisor & (divisor - 1)) == 0;
  const Acc reciprocal = std::is_floating_point_v<Acc> && powerOfTwo ? Acc(1) / d : Acc(0);
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    for (size_t base = 0; base < count; base += kBlock) {
      foldBlock16<T, Op, kAverage>(out, inputs, k, base, std::min(kBlock, count - base), d,
                                   reciprocal);
    }
    return;
  }
  bool aligned = alignedFor<T>(out);
  for (int j = 0; j < k; ++j) aligned = aligned && alignedFor<T>(inputs[j]);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = count - base < kBlock ? count - base : kBlock;
    if (aligned) {
      foldBlock<T, Op, kAverage, true>(out, inputs, k, base, n, d, reciprocal);
    } else {
      foldBlock<T, Op, kAverage, false>(out, inputs, k, base, n, d, reciprocal);
    }
  }
}

template <typename T>
DETCOLL_FORCE_INLINE void foldOp(void* out, const void* const* inputs, int k, size_t count,
                                 ReduceOp op, int64_t divisor) {
  switch (op) {
    case ReduceOp::kSum:
      return foldTyped<T, AddCombine, false>(out, inputs, k, count, divisor);
    case ReduceOp::kAverage:
      return foldTyped<T, AddCombine, true>(out, inputs, k, count, divisor);
    case ReduceOp::kMin:
      return foldTyped<T, PickCombine<true>, false>(out, inputs, k, count, divisor);
    case ReduceOp::kMax:
      return foldTyped<T, PickCombine<false>, false>(out, inputs, k, count, divisor);
  }
}

// One function per dtype, compiled for each vector width (kernels/simd.h) with its loops inlined:
// the fold of the ordered mode and of every average runs at the machine's widest vectors. The
// operations are the same IEEE ones on every path, so the bits are too.
#define DETCOLL_FOLD_DTYPE(name, T)                                                          \
  DETCOLL_VECTOR_CLONES void name(void* out, const void* const* inputs, int k, size_t count, \
                                  ReduceOp op, int64_t divisor) {                            \
    foldOp<T>(out, inputs, k, count, op, divisor);                                           \
  }
DETCOLL_FOLD_DTYPE(foldFloat32, float)
DETCOLL_FOLD_DTYPE(foldFloat64, double)
DETCOLL_FOLD_DTYPE(foldHalf, Half)
DETCOLL_FOLD_DTYPE(foldBFloat16, BFloat16)
DETCOLL_FOLD_DTYPE(foldInt32, int32_t)
DETCOLL_FOLD_DTYPE(foldInt64, int64_t)
#undef DETCOLL_FOLD_DTYPE

}  // namespace

void foldRankOrder(void* out, const void* const* inputs, int k, size_t count, DataType type,
                   ReduceOp op, int64_t divisor) {
  switch (type) {
    case DataType::kFloat32:
      return foldFloat32(out, inputs, k, count, op, divisor);
    case DataType::kFloat64:
      return foldFloat64(out, inputs, k, count, op, divisor);
    case DataType::kFloat16:
      return foldHalf(out, inputs, k, count, op, divisor);
    case DataType::kBFloat16:
      return foldBFloat16(out, inputs, k, count, op, divisor);
    case DataType::kInt32:
      return foldInt32(out, inputs, k, count, op, divisor);
    case DataType::kInt64:
      return foldInt64(out, inputs, k, count, op, divisor);
  }
}

}  // namespace detcoll::kernels
