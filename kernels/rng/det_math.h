#pragma once

// The transcendental functions of the normal fill, written with IEEE double additions,
// multiplications and divisions only, so that the host and the device round every step alike.
// Library log/sin/cos differ between glibc and CUDA's libdevice; these do not. On the device each
// operation is an explicit round-to-nearest intrinsic, which the compiler never fuses into an FMA
// whatever --fmad says; on the host the build turns contraction off (-ffp-contract=off).
//
// Accuracy (checked against glibc in the unit tests): detLog within 2 ulp of glibc's log (about
// 2.01 ulp of the exact value at worst); detSinCos2Pi within 2^-52 absolute.

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace detcoll::kernels::rng {

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double dAdd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double dSub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double dMul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double dDiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double dSqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);  // IEEE correctly rounded, as __dsqrt_rn
#endif
}

DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE uint64_t doubleBits(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}
DETCOLL_HOST_DEVICE DETCOLL_FORCE_INLINE double bitsDouble(uint64_t bits) {
  double x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

// Natural logarithm of a positive finite x (normal or subnormal). x = 2^e * m with m in
// [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716, by its series
// to s^23; e * ln 2 in two parts.
DETCOLL_HOST_DEVICE inline double detLog(double x) {
  uint64_t bits = doubleBits(x);
  int e = static_cast<int>((bits >> 52) & 0x7ff);
  if (e == 0) {  // subnormal: scale into the normal range first
    bits = doubleBits(dMul(x, 18014398509481984.0));  // 2^54
    e = static_cast<int>((bits >> 52) & 0x7ff) - 54;
  }
  e -= 1023;
  uint64_t mantissa = bits & 0x000fffffffffffffull;
  double m = bitsDouble(mantissa | 0x3ff0000000000000ull);  // [1, 2)
  if (mantissa > 0x6a09e667f3bcdull) {                      // m > sqrt(2): halve, exactly
    m = bitsDouble(mantissa | 0x3fe0000000000000ull);
    e += 1;
  }
  const double f = dSub(m, 1.0);
  const double s = dDiv(f, dAdd(2.0, f));
  const double z = dMul(s, s);
  // 1/3 + z/5 + ... + z^10/23, by Horner from the smallest term.
  double r = 1.0 / 23;
  r = dAdd(1.0 / 21, dMul(z, r));
  r = dAdd(1.0 / 19, dMul(z, r));
  r = dAdd(1.0 / 17, dMul(z, r));
  r = dAdd(1.0 / 15, dMul(z, r));
  r = dAdd(1.0 / 13, dMul(z, r));
  r = dAdd(1.0 / 11, dMul(z, r));
  r = dAdd(1.0 / 9, dMul(z, r));
  r = dAdd(1.0 / 7, dMul(z, r));
  r = dAdd(1.0 / 5, dMul(z, r));
  r = dAdd(1.0 / 3, dMul(z, r));
  // log m = 2s + 2s * z * r, with 2s exact.
  const double twoS = dMul(2.0, s);
  const double logM = dAdd(twoS, dMul(twoS, dMul(z, r)));
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3fe62e42fee00000: e * kLn2Hi exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return dAdd(dMul(de, kLn2Hi), dAdd(logM, dMul(de, kLn2Lo)));
}

// sin(2 pi u) and cos(2 pi u) for u in [0, 1): 4u = q + f with q the nearest integer and
// |f| <= 1/2 (both exact), x = f pi / 2 in [-pi/4, pi/4], Taylor series of sin x to x^17 and of
// cos x to x^16, then a rotation by q quarter turns.
DETCOLL_HOST_DEVICE inline void detSinCos2Pi(double u, double* sinOut, double* cosOut) {
  const double t = dMul(u, 4.0);
  const int q = static_cast<int>(dAdd(t, 0.5));
  const double f = dSub(t, static_cast<double>(q));
  constexpr double kHalfPi = 1.57079632679489661923;
  const double x = dMul(f, kHalfPi);
  const double x2 = dMul(x, x);
  double sp = -1.0 / 355687428096000.0;  // -1/17!
  sp = dAdd(1.0 / 1307674368000.0, dMul(x2, sp));
  sp = dAdd(-1.0 / 6227020800.0, dMul(x2, sp));
  sp = dAdd(1.0 / 39916800.0, dMul(x2, sp));
  sp = dAdd(-1.0 / 362880.0, dMul(x2, sp));
  sp = dAdd(1.0 / 5040.0, dMul(x2, sp));
  sp = dAdd(-1.0 / 120.0, dMul(x2, sp));
  sp = dAdd(1.0 / 6.0, dMul(x2, sp));
  // sin x = x - x^3 sp' where sp' = 1/6 - x^2/120 + ...
  const double s = dSub(x, dMul(dMul(x, x2), sp));
  double cp = 1.0 / 20922789888000.0;  // 1/16!
  cp = dAdd(-1.0 / 87178291200.0, dMul(x2, cp));
  cp = dAdd(1.0 / 479001600.0, dMul(x2, cp));
  cp = dAdd(-1.0 / 3628800.0, dMul(x2, cp));
  cp = dAdd(1.0 / 40320.0, dMul(x2, cp));
  cp = dAdd(-1.0 / 720.0, dMul(x2, cp));
  cp = dAdd(1.0 / 24.0, dMul(x2, cp));
  // cos x = 1 - x^2/2 + x^4 cp, cp = 1/24 - x^2/720 + ...
  const double c = dAdd(dSub(1.0, dMul(x2, 0.5)), dMul(dMul(x2, x2), cp));
  switch (q & 3) {
    case 0:
      *sinOut = s;
      *cosOut = c;
      break;
    case 1:
      *sinOut = c;
      *cosOut = -s;
      break;
    case 2:
      *sinOut = -s;
      *cosOut = -c;
      break;
    default:
      *sinOut = -c;
      *cosOut = s;
      break;
  }
}

}  // namespace detcoll::kernels::rng
