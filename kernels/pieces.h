#pragma once

// The P pieces of a reduction as every allreduce kernel takes them (the CPU kernels of
// kernels/host_reduce_kernels.h and the bodies of kernels/bodies/reduce.h alike): a table of
// pointers, or pieces at a fixed stride in one buffer (the pipeline's staging slots) with one of
// them elsewhere (this rank's own piece, read in place).

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/host_device.h"

namespace detcoll::kernels {

// The bytes of one vector access: the kernels read and write 16 bytes at a time where every
// buffer they touch is aligned to it.
constexpr int kVectorBytes = 16;

// Whether every pointer is aligned to kVectorBytes.
inline bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % kVectorBytes != 0) return false;
  }
  return true;
}

// Piece j: table[j] when there is a table (in memory the executor can read), else base + j *
// stride; piece `own` (if >= 0) is ownPtr instead; every piece advanced by `offset` bytes to its
// first element.
struct Pieces {
  const char* const* table = nullptr;
  const char* base = nullptr;
  size_t stride = 0;
  int own = -1;
  const char* ownPtr = nullptr;
  size_t offset = 0;

  template <typename T>
  DETCOLL_HOST_DEVICE const T* at(int j) const {
    const char* p = j == own ? ownPtr : (table != nullptr ? table[j] : base + j * stride);
    return reinterpret_cast<const T*>(p + offset);
  }
  // The same pieces from `bytes` further on.
  DETCOLL_HOST_DEVICE Pieces advanced(size_t bytes) const {
    Pieces p = *this;
    p.offset += bytes;
    return p;
  }
};

}  // namespace detcoll::kernels
