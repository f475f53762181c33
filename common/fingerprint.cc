#include "common/fingerprint.h"

#include <cstdio>

#if DETCOLL_XXHASH_DISPATCH
// libxxhash's XXH3 with run-time dispatch: the widest vector code the CPU runs (SSE2, AVX2,
// AVX-512), the same hash from each. This build's own code is baseline x86-64 (SSE2), which hashes
// at about half the speed of AVX2.
#include <immintrin.h>
#include <xxh_x86dispatch.h>
#else
// The header's portable implementation compiled into this file alone.
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

namespace detcoll {

#if DETCOLL_XXHASH_DISPATCH
namespace {
// Clears the upper halves of the vector registers that the AVX2 or AVX-512 hash leaves dirty:
// without it, the legacy-SSE code that runs next (the training's kernels between two recorded
// ops) pays a transition penalty on every instruction, which slowed a CNN's ops 1.5-2x.
__attribute__((target("avx"))) void clearUpperVectorState() {
  _mm256_zeroupper();
}
// Read once, at load; __builtin_cpu_init first, since this may run before libgcc's own.
const bool g_hasAvx = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") != 0;
}();
}  // namespace
#endif

uint64_t fingerprint(const void* data, size_t bytes) {
#if DETCOLL_XXHASH_DISPATCH
  const uint64_t value = XXH3_64bits_dispatch(data, bytes);
  if (g_hasAvx) clearUpperVectorState();
  return value;
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
