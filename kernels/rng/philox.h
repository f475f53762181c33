#pragma once

// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), the counter-based generator of Random123, cuRAND and PyTorch: a keyed bijection of a
// 128-bit counter. Ten rounds; each multiplies two words by fixed constants, mixes the high halves
// with the other two words and the round key, and the key advances by the Weyl constants between
// rounds. Integer arithmetic only, so host and device give the same bits.

#include <cstdint>

#include "common/host_device.h"

namespace detcoll::kernels::rng {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kPhiloxRounds = 10;

struct Block {
  uint32_t v[4];
};

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE void philoxRound(uint32_t& c0, uint32_t& c1, uint32_t& c2,
                                                          uint32_t& c3, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
  const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
  const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
  c1 = static_cast<uint32_t>(p1);
  c3 = static_cast<uint32_t>(p0);
  c0 = n0;
  c2 = n2;
}

// out = Philox4x32-10(ctr, key).
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE Block philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2,
                                                             uint32_t c3, uint32_t k0,
                                                             uint32_t k1) {
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int round = 0; round < kPhiloxRounds; ++round) {
    philoxRound(c0, c1, c2, c3, k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return Block{{c0, c1, c2, c3}};
}

}  // namespace detcoll::kernels::rng
