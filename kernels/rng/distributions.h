#pragma once

// The value of element i of a fill: a pure function of (key, i, parameters), the same on the host
// and the device. Element i of a stream draws from the 128-bit Philox blocks
//   block(key, b) = Philox4x32-10(counter = (b mod 2^32, b div 2^32, key.w[2], key.w[3]),
//                                 key = (key.w[0], key.w[1]))
// as follows (w0..w3 the words of one block, u32(w) = w * 2^-32):
//   uniform float32   4 per block: element i takes word i mod 4 of block i div 4;
//                     value (w >> 8) * 2^-24, in [0, 1 - 2^-24]
//   uniform float64   2 per block: element i takes words 2j, 2j+1 (j = i mod 2) of block i div 2
//                     as x = w_2j + 2^32 w_2j+1; value (x >> 11) * 2^-53, in [0, 1 - 2^-53]
//   normal float32    Box-Muller, 4 per block: element i takes the pair (w_2j, w_2j+1),
//                     j = (i div 2) mod 2, of block i div 4; u1 = (w_2j + 1) 2^-32 in (0, 1],
//                     u2 = w_2j+1 2^-32; r = sqrt(-2 ln u1); z = r cos(2 pi u2) for even i,
//                     r sin(2 pi u2) for odd i; value float(mean + stddev * z), all in double
//   normal float64    Box-Muller, 2 per block: u1 = ((x01 >> 11) + 1) 2^-53 from words 0-1,
//                     u2 = (x23 >> 11) 2^-53 from words 2-3 of block i div 2; z as above
//   bernoulli(p)      4 per block: element i is 1 when word i mod 4 of block i div 4 is below
//                     ceil(p 2^32), so P(1) = ceil(p 2^32) / 2^32 exactly
//   randint(n)        [0, n) for 1 <= n <= 2^63 with no modulo bias (Lemire's multiply with
//                     rejection): attempt a of element i takes the 64-bit word pair a mod 2 of
//                     block i + floor(a / 2) 2^48, x * n = hi 2^64 + lo; accept hi unless
//                     lo < (2^64 - n) mod n. An attempt is rejected with probability below 1/2;
//                     i must be below 2^48.
// ln, sin and cos are the deterministic ones of det_math.h.

#include <cstdint>

#include "common/host_device.h"
#include "kernels/rng/det_math.h"
#include "kernels/rng/key.h"
#include "kernels/rng/philox.h"

namespace detcoll::kernels::rng {

// Randint element indices stay below this; the bits above carry the attempt number.
constexpr uint64_t kRandintIndexLimit = uint64_t{1} << 48;
// Attempts per randint element before giving up (probability below 2^-131072 for any n).
constexpr uint64_t kRandintMaxAttempts = uint64_t{1} << 17;

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE Block streamBlock(const Key& key, uint64_t block) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key.w[2],
                       key.w[3], key.w[0], key.w[1]);
}

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE uint64_t wordPair(const Block& b, int pair) {
  return static_cast<uint64_t>(b.v[2 * pair]) | static_cast<uint64_t>(b.v[2 * pair + 1]) << 32;
}

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE float uniformFloat32FromWord(uint32_t w) {
  return static_cast<float>(w >> 8) * 5.9604644775390625e-08f;  // 2^-24, exact
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double uniformFloat64FromBits(uint64_t x) {
  return static_cast<double>(x >> 11) * 1.1102230246251565404e-16;  // 2^-53, exact
}

// Box-Muller on (u1, u2): r cos(2 pi u2) and r sin(2 pi u2).
DETCOLL_HOST_DEVICE inline void boxMuller(double u1, double u2, double* zCos, double* zSin) {
  const double r = dSqrt(dMul(-2.0, detLog(u1)));
  double s, c;
  detSinCos2Pi(u2, &s, &c);
  *zCos = dMul(r, c);
  *zSin = dMul(r, s);
}

// The uniforms of element i's Box-Muller pair (elements 2m and 2m + 1 share one).
DETCOLL_HOST_DEVICE inline void normalFloat32Uniforms(const Block& b, uint64_t i, double* u1,
                                                      double* u2) {
  const int pair = static_cast<int>((i >> 1) & 1);
  *u1 = dMul(dAdd(static_cast<double>(b.v[2 * pair]), 1.0), 2.3283064365386963e-10);
  *u2 = dMul(static_cast<double>(b.v[2 * pair + 1]), 2.3283064365386963e-10);
}
DETCOLL_HOST_DEVICE inline void normalFloat64Uniforms(const Block& b, double* u1, double* u2) {
  *u1 = dMul(static_cast<double>((wordPair(b, 0) >> 11) + 1), 1.1102230246251565404e-16);
  *u2 = uniformFloat64FromBits(wordPair(b, 1));
}

// z of element i (block b holds it): the cosine for even i, the sine for odd i.
DETCOLL_HOST_DEVICE inline double normalFloat32Z(const Block& b, uint64_t i) {
  double u1, u2, zc, zs;
  normalFloat32Uniforms(b, i, &u1, &u2);
  boxMuller(u1, u2, &zc, &zs);
  return (i & 1) ? zs : zc;
}
DETCOLL_HOST_DEVICE inline double normalFloat64Z(const Block& b, uint64_t i) {
  double u1, u2, zc, zs;
  normalFloat64Uniforms(b, &u1, &u2);
  boxMuller(u1, u2, &zc, &zs);
  return (i & 1) ? zs : zc;
}

DETCOLL_HOST_DEVICE inline float uniformFloat32(const Key& key, uint64_t i) {
  return uniformFloat32FromWord(streamBlock(key, i >> 2).v[i & 3]);
}
DETCOLL_HOST_DEVICE inline double uniformFloat64(const Key& key, uint64_t i) {
  return uniformFloat64FromBits(wordPair(streamBlock(key, i >> 1), static_cast<int>(i & 1)));
}
DETCOLL_HOST_DEVICE inline float normalFloat32(const Key& key, uint64_t i, double mean,
                                               double stddev) {
  return static_cast<float>(dAdd(mean, dMul(stddev, normalFloat32Z(streamBlock(key, i >> 2), i))));
}
DETCOLL_HOST_DEVICE inline double normalFloat64(const Key& key, uint64_t i, double mean,
                                                double stddev) {
  return dAdd(mean, dMul(stddev, normalFloat64Z(streamBlock(key, i >> 1), i)));
}

// The integer threshold of bernoulli(p) for p in [0, 1]: ceil(p 2^32), exact.
DETCOLL_HOST_DEVICE inline uint64_t bernoulliThreshold(double p) {
  const double scaled = dMul(p, 4294967296.0);
  uint64_t t = static_cast<uint64_t>(scaled);
  if (static_cast<double>(t) < scaled) ++t;
  return t;
}
DETCOLL_HOST_DEVICE inline bool bernoulli(const Key& key, uint64_t i, uint64_t threshold) {
  return streamBlock(key, i >> 2).v[i & 3] < threshold;
}

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE uint64_t mulHigh64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// Lemire's multiply with rejection: x * n = hi 2^64 + lo; an attempt is rejected when lo is below
// (2^64 - n) mod n, which leaves every value of [0, n) the same number of x.
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE uint64_t lemireRejectBelow(uint64_t n) {
  return (0 - n) % n;
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE bool lemireAccept(uint64_t x, uint64_t n,
                                                           uint64_t rejectBelow, uint64_t* value) {
  *value = mulHigh64(x, n);
  return x * n >= rejectBelow;
}

// Element i (< 2^48) of randint(n), 1 <= n <= 2^63.
DETCOLL_HOST_DEVICE inline uint64_t randint(const Key& key, uint64_t i, uint64_t n) {
  const uint64_t reject = lemireRejectBelow(n);
  uint64_t value = 0;
  for (uint64_t attempt = 0; attempt < kRandintMaxAttempts; attempt += 2) {
    const Block b = streamBlock(key, i + (attempt >> 1) * kRandintIndexLimit);
    if (lemireAccept(wordPair(b, 0), n, reject, &value) ||
        lemireAccept(wordPair(b, 1), n, reject, &value)) {
      return value;
    }
  }
  return value;
}

}  // namespace detcoll::kernels::rng
