#include "common/fingerprint.h"

#include <cstdio>

// The implementation compiled into this file alone: no run-time dependency on libxxhash.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace detcoll {

uint64_t fingerprint(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
}

std::string fingerprintHex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace detcoll
