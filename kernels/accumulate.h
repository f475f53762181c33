#pragma once

// Storage types and their accumulation types, for every kernel that reduces: the rank-order fold
// (fold.cc) and the deterministic ops (ops/). float32, float16 and bfloat16 accumulate in float
// (16-bit values convert exactly), float64 in double, int32 and int64 in int64 (two's complement
// wrap). And the dispatch from a DataType to its storage type. Everything but the dispatch
// compiles for the device too, so that a CUDA kernel rounds exactly as its CPU reference.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/dtype.h"
#include "common/half.h"
#include "common/host_device.h"

namespace detcoll::kernels {

// load: exact conversion to Acc. round: one rounding back (float16 and bfloat16 canonicalize
// NaN, the others keep any NaN as it is). store: round, with every NaN the dtype's canonical
// quiet NaN, so that a result does not depend on which NaN met which.
template <typename T>
struct Traits;

// The canonical quiet NaN of float64 (positive, top mantissa bit only).
DETCOLL_HOST_DEVICE inline double canonicalNaN64() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff8000000000000ll);
#else
  const uint64_t bits = 0x7ff8000000000000ull;
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
#endif
}

template <>
struct Traits<float> {
  using Acc = float;
  DETCOLL_HOST_DEVICE static Acc load(float v) { return v; }
  DETCOLL_HOST_DEVICE static float round(Acc a) { return a; }
  DETCOLL_HOST_DEVICE static float store(Acc a) { return a != a ? bitsToFloat(0x7fc00000u) : a; }
};
template <>
struct Traits<double> {
  using Acc = double;
  DETCOLL_HOST_DEVICE static Acc load(double v) { return v; }
  DETCOLL_HOST_DEVICE static double round(Acc a) { return a; }
  DETCOLL_HOST_DEVICE static double store(Acc a) { return a != a ? canonicalNaN64() : a; }
};
template <>
struct Traits<Half> {
  using Acc = float;
  DETCOLL_HOST_DEVICE static Acc load(Half v) { return halfToFloat(v); }
  DETCOLL_HOST_DEVICE static Half round(Acc a) { return floatToHalf(a); }
  DETCOLL_HOST_DEVICE static Half store(Acc a) { return floatToHalf(a); }
};
template <>
struct Traits<BFloat16> {
  using Acc = float;
  DETCOLL_HOST_DEVICE static Acc load(BFloat16 v) { return bfloat16ToFloat(v); }
  DETCOLL_HOST_DEVICE static BFloat16 round(Acc a) { return floatToBFloat16(a); }
  DETCOLL_HOST_DEVICE static BFloat16 store(Acc a) { return floatToBFloat16(a); }
};
template <>
struct Traits<int32_t> {
  using Acc = int64_t;
  DETCOLL_HOST_DEVICE static Acc load(int32_t v) { return v; }
  DETCOLL_HOST_DEVICE static int32_t round(Acc a) {
    return static_cast<int32_t>(static_cast<uint32_t>(a));
  }
  DETCOLL_HOST_DEVICE static int32_t store(Acc a) { return round(a); }
};
template <>
struct Traits<int64_t> {
  using Acc = int64_t;
  DETCOLL_HOST_DEVICE static Acc load(int64_t v) { return v; }
  DETCOLL_HOST_DEVICE static int64_t round(Acc a) { return a; }
  DETCOLL_HOST_DEVICE static int64_t store(Acc a) { return a; }
};

// a + b and a * b in an accumulation type; integers wrap.
template <typename A>
DETCOLL_HOST_DEVICE A wrapAdd(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}
template <typename A>
DETCOLL_HOST_DEVICE A wrapMultiply(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

// Whether a storage type is a floating-point one.
template <typename T>
DETCOLL_HOST_DEVICE constexpr bool isFloatingStorage() {
  return std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
         std::is_same_v<T, BFloat16>;
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
