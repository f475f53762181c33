#pragma once

// Storage types and their accumulation types, for every kernel that reduces: the rank-order fold
// (fold.cc) and the deterministic ops (ops/). float32, float16 and bfloat16 accumulate in float
// (16-bit values convert exactly), float64 in double, int32 and int64 in int64 (two's complement
// wrap). And the dispatch from a DataType to its storage type.

#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/dtype.h"
#include "common/half.h"

namespace detcoll::kernels {

// load: exact conversion to Acc. round: one rounding back (float16 and bfloat16 canonicalize
// NaN, the others keep any NaN as it is). store: round, with every NaN the dtype's canonical
// quiet NaN, so that a result does not depend on which NaN met which.
template <typename T>
struct Traits;

template <>
struct Traits<float> {
  using Acc = float;
  static Acc load(float v) { return v; }
  static float round(Acc a) { return a; }
  static float store(Acc a) { return a != a ? std::numeric_limits<float>::quiet_NaN() : a; }
};
template <>
struct Traits<double> {
  using Acc = double;
  static Acc load(double v) { return v; }
  static double round(Acc a) { return a; }
  static double store(Acc a) { return a != a ? std::numeric_limits<double>::quiet_NaN() : a; }
};
template <>
struct Traits<Half> {
  using Acc = float;
  static Acc load(Half v) { return halfToFloat(v); }
  static Half round(Acc a) { return floatToHalf(a); }
  static Half store(Acc a) { return floatToHalf(a); }
};
template <>
struct Traits<BFloat16> {
  using Acc = float;
  static Acc load(BFloat16 v) { return bfloat16ToFloat(v); }
  static BFloat16 round(Acc a) { return floatToBFloat16(a); }
  static BFloat16 store(Acc a) { return floatToBFloat16(a); }
};
template <>
struct Traits<int32_t> {
  using Acc = int64_t;
  static Acc load(int32_t v) { return v; }
  static int32_t round(Acc a) { return static_cast<int32_t>(static_cast<uint32_t>(a)); }
  static int32_t store(Acc a) { return round(a); }
};
template <>
struct Traits<int64_t> {
  using Acc = int64_t;
  static Acc load(int64_t v) { return v; }
  static int64_t round(Acc a) { return a; }
  static int64_t store(Acc a) { return a; }
};

// a + b and a * b in an accumulation type; integers wrap.
template <typename A>
A wrapAdd(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}
template <typename A>
A wrapMultiply(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

template <typename T>
struct TypeTag {
  using type = T;
};

// f(TypeTag<T>{}) for the storage type T of `type`.
template <typename F>
void visitType(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32:
      return f(TypeTag<float>{});
    case DataType::kFloat64:
      return f(TypeTag<double>{});
    case DataType::kFloat16:
      return f(TypeTag<Half>{});
    case DataType::kBFloat16:
      return f(TypeTag<BFloat16>{});
    case DataType::kInt32:
      return f(TypeTag<int32_t>{});
    case DataType::kInt64:
      return f(TypeTag<int64_t>{});
  }
}

}  // namespace detcoll::kernels
