#pragma once

// Checks on the caller's buffers shared by the checked collectives and the fusion engine.

#include <cstddef>
#include <cstdint>

namespace detcoll::collective {

// Whether [a, a + aBytes) and [b, b + bBytes) overlap without starting at the same address (the
// same buffer is "in place", which every call allows).
inline bool overlapsPartially(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (a == b || aBytes == 0 || bBytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bBytes && y < x + aBytes;
}

}  // namespace detcoll::collective
