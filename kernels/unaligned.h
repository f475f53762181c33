#pragma once

// Elements of a caller's buffer, which may start at any byte address (a slice of a byte buffer, a
// packed record). An access through a T* that is not aligned to T is undefined behaviour, so the
// kernels read and write callers' elements through these.
//
// loadAt and storeAt copy the bytes, which the host compiler turns into plain (vector) loads and
// stores, allowed at any address on x86. It may choose other instructions around them than around
// a T* (gcc 12 selects the NaN canonicalization of a float32 store loop with integer operations,
// slower on AMD), so the fold takes the T* where every buffer is aligned and these where one is
// not; the invariant codec's loops run as fast through these. loadElement and storeElement, for
// the data-parallel bodies, access through the T* where it is aligned and copy bytes only where it
// is not: on the GPU a copy of unknown alignment is made of byte accesses.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace detcoll::kernels {

template <typename T>
inline T loadAt(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
inline void storeAt(void* p, size_t i, T v) {
  std::memcpy(static_cast<char*>(p) + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE bool alignedFor(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(T) == 0;
}

template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE T loadElement(const T* p, int64_t i) {
  if (alignedFor<T>(p)) return p[i];
  T v;
  const char* at = reinterpret_cast<const char*>(p) + i * static_cast<int64_t>(sizeof(T));
#if defined(__CUDA_ARCH__)
  memcpy(&v, at, sizeof(T));
#else
  std::memcpy(&v, at, sizeof(T));
#endif
  return v;
}

template <typename T>
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void storeElement(T* p, int64_t i, T v) {
  if (alignedFor<T>(p)) {
    p[i] = v;
    return;
  }
  char* at = reinterpret_cast<char*>(p) + i * static_cast<int64_t>(sizeof(T));
#if defined(__CUDA_ARCH__)
  memcpy(at, &v, sizeof(T));
#else
  std::memcpy(at, &v, sizeof(T));
#endif
}

}  // namespace detcoll::kernels
