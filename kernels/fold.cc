#include "kernels/fold.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/half.h"

namespace detcoll::kernels {
namespace {

// Storage type T <-> accumulation type Acc.
template <typename T>
struct Traits;

template <>
struct Traits<float> {
  using Acc = float;
  static Acc load(float v) { return v; }
  static float store(Acc a) { return a != a ? std::numeric_limits<float>::quiet_NaN() : a; }
};
template <>
struct Traits<double> {
  using Acc = double;
  static Acc load(double v) { return v; }
  static double store(Acc a) { return a != a ? std::numeric_limits<double>::quiet_NaN() : a; }
};
template <>
struct Traits<Half> {
  using Acc = float;
  static Acc load(Half v) { return halfToFloat(v); }
  static Half store(Acc a) { return floatToHalf(a); }
};
template <>
struct Traits<BFloat16> {
  using Acc = float;
  static Acc load(BFloat16 v) { return bfloat16ToFloat(v); }
  static BFloat16 store(Acc a) { return floatToBFloat16(a); }
};
template <>
struct Traits<int32_t> {
  using Acc = int64_t;
  static Acc load(int32_t v) { return v; }
  static int32_t store(Acc a) { return static_cast<int32_t>(static_cast<uint32_t>(a)); }
};
template <>
struct Traits<int64_t> {
  using Acc = int64_t;
  static Acc load(int64_t v) { return v; }
  static int64_t store(Acc a) { return a; }
};

// Combiners as types, so that each loop is compiled (and vectorized) for its operator.
struct AddOp {
  template <typename A>
  static A apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    } else {
      return a + b;
    }
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
  switch (type) {
    case DataType::kFloat32:
      return foldForType<float>(out, inputs, k, count, op, divisor);
    case DataType::kFloat64:
      return foldForType<double>(out, inputs, k, count, op, divisor);
    case DataType::kFloat16:
      return foldForType<Half>(out, inputs, k, count, op, divisor);
    case DataType::kBFloat16:
      return foldForType<BFloat16>(out, inputs, k, count, op, divisor);
    case DataType::kInt32:
      return foldForType<int32_t>(out, inputs, k, count, op, divisor);
    case DataType::kInt64:
      return foldForType<int64_t>(out, inputs, k, count, op, divisor);
  }
}

}  // namespace detcoll::kernels
