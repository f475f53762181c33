#pragma once

// kthvalue and median with indices that do not depend on the kernel (docs/design.md, "Patching
// torch's operators"). The order of a slice is the stable ascending order of its values: -0 and
// +0 equal, NaN after every number (all NaNs equal), ties by position. kthvalue is the k-th
// element (1-based) of that order, with its position; median is the lower median (k = (n + 1)
// / 2) of a slice without NaN, and for a slice with one the dtype's canonical NaN with the
// position of the slice's first NaN, as torch.median propagates NaN. The input is [outer,
// length, inner], the slices running along length; values and indices are [outer, inner]. The
// order is unique, so the CPU reference (a selection by that order) and the executor's
// formulation (bodies/selection.h: two stable radix sorts, by value key, then by slice) agree.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/status.h"
#include "kernels/accumulate.h"

namespace detcoll::kernels::ops {

struct Selection {
  int64_t outer = 1, length = 0, inner = 1;
  int64_t k = 1;        // kthvalue's; median: (length + 1) / 2
  bool median = false;  // NaN propagates
};

Status checkSelection(const Selection& s, DataType type, const void* values, const int64_t* indices,
                      const void* input);

// An unsigned key whose order is the value order above (all NaNs the largest, -0 as +0), of
// orderKeyBits(type) bits: float16 and bfloat16 through float (exact), integers with the sign bit
// flipped.
DETCOLL_HOST_DEVICE inline uint64_t orderKey32(float v) {
  if (v != v) return 0xffffffffull;
  if (v == 0.0f) v = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(v);
#else
  uint32_t u;
  std::memcpy(&u, &v, 4);
#endif
  return (u & 0x80000000u) ? static_cast<uint32_t>(~u) : (u | 0x80000000u);
}
DETCOLL_HOST_DEVICE inline uint64_t orderKey64(double v) {
  if (v != v) return ~0ull;
  if (v == 0.0) v = 0.0;
#if defined(__CUDA_ARCH__)
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t u;
  std::memcpy(&u, &v, 8);
#endif
  return (u >> 63) ? ~u : (u | (1ull << 63));
}
template <typename T>
DETCOLL_HOST_DEVICE uint64_t orderKey(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return orderKey64(v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<uint64_t>(v) ^ (1ull << 63);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<uint32_t>(v) ^ 0x80000000u;
  } else {
    return orderKey32(kernels::Traits<T>::load(v));
  }
}
inline int orderKeyBits(DataType type) {
  return type == DataType::kFloat64 || type == DataType::kInt64 ? 64 : 32;
}

template <typename T>
DETCOLL_HOST_DEVICE bool isNaNValue(T v) {
  if constexpr (kernels::isFloatingStorage<T>()) {
    const auto a = kernels::Traits<T>::load(v);
    return a != a;
  } else {
    return false;
  }
}

// Element i of the input (flat, row-major): its key and its slice (o · inner + r).
template <typename T>
struct SelectKeyBody {
  Selection s;
  const T* input;
  uint64_t* keys;
  int64_t* positions;
  DETCOLL_HOST_DEVICE void operator()(int64_t i) const {
    keys[i] = orderKey(input[i]);
    positions[i] = i;
  }
};
struct SliceKeyBody {
  Selection s;
  const int64_t* positions;  // flat input positions, in value order
  uint64_t* slices;
  DETCOLL_HOST_DEVICE void operator()(int64_t m) const {
    const int64_t i = positions[m];
    slices[m] = static_cast<uint64_t>((i / (s.length * s.inner)) * s.inner + i % s.inner);
  }
};

// Slice q, its elements in order at sorted[q · length ...]: the k-th (or the median) and its
// position along length.
template <typename T>
struct PickBody {
  Selection s;
  const T* input;
  const int64_t* sorted;  // flat input positions, grouped by slice, each slice in order
  T* values;
  int64_t* indices;
  DETCOLL_HOST_DEVICE void operator()(int64_t q) const {
    const int64_t* order = sorted + q * s.length;
    int64_t at = order[s.k - 1];
    if (s.median && isNaNValue(input[order[s.length - 1]])) {
      int64_t lo = 0, hi = s.length - 1;  // the first NaN: NaNs are last, in position order
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (isNaNValue(input[order[mid]])) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      at = order[lo];
      values[q] = kernels::Traits<T>::store(kernels::Traits<T>::load(input[at]));  // canonical
    } else {
      values[q] = input[at];
    }
    indices[q] = (at / s.inner) % s.length;
  }
};

// The CPU reference: values and indices [outer, inner].
Status select(void* values, int64_t* indices, const void* input, DataType type, const Selection& s,
              int threads);

}  // namespace detcoll::kernels::ops
