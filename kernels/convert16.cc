#include "kernels/convert16.h"

#include "kernels/simd.h"
#include "kernels/unaligned.h"

namespace detcoll::kernels {

DETCOLL_VECTOR_CLONES void widenHalf(float* out, const void* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bitsToFloat(widenHalfBits(loadAt<uint16_t>(in, i)));
}

DETCOLL_VECTOR_CLONES void widenBFloat16(float* out, const void* in, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = bitsToFloat(static_cast<uint32_t>(loadAt<uint16_t>(in, i)) << 16);
}

DETCOLL_VECTOR_CLONES void narrowHalf(void* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) storeAt<uint16_t>(out, i, narrowHalfBits(floatBits(in[i])));
}

DETCOLL_VECTOR_CLONES void narrowBFloat16(void* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) storeAt<uint16_t>(out, i, narrowBFloat16Bits(floatBits(in[i])));
}

}  // namespace detcoll::kernels
