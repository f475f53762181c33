#include "common/fingerprint.h"

#include <cstdio>

#if DETCOLL_XXHASH_DISPATCH
// libxxhash's XXH3 with run-time dispatch: the widest vector code the CPU runs (SSE2, AVX2,
// AVX-512), the same hash from each. This build's own code is baseline x86-64 (SSE2), which hashes
// at about half the speed of AVX2.
#include <xxh_x86dispatch.h>
#else
// The header's portable implementation compiled into this file alone.
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

namespace detcoll {

uint64_t fingerprint(const void* data, size_t bytes) {
#if DETCOLL_XXHASH_DISPATCH
  return XXH3_64bits_dispatch(data, bytes);
#else
  return XXH3_64bits(data, bytes);
#endif
}

std::string fingerprintHex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace detcoll
