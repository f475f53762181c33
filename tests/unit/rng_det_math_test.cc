// kernels/rng/det_math.h against libm: detLog within 2 ulp of std::log, detSinCos2Pi within 2^-52
// of sin and cos of 2 pi u computed in long double, the accuracy the header states.

#include "kernels/rng/det_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

namespace detcoll::kernels::rng {
namespace {

double ulpOf(double x) {
  x = std::fabs(x);
  return std::nextafter(x, INFINITY) - x;
}

std::vector<double> logInputs() {
  std::mt19937_64 random(0x1065eed);
  std::vector<double> xs = {0.5, 0.75, 1 - 0x1p-53, 1 - 0x1p-52, 0x1p-1074, 0x1p-1022,
                            // both sides of the sqrt(1/2) split, and the input with the largest
                            // error against the exact log found in 2e7 random draws (2.003 ulp)
                            0x1.6a09e667f3bcdp-1, 0x1.6a09e667f3bcep-1, 0x1.68e07e27879f1p-1,
                            0x1p-32, 0x1p-53, 0x1.fffffffffffffp-1023, 1 + 0x1p-52, 2.0, 1e300};
  for (int k = 0; k < 200000; ++k) {
    const uint64_t bits = random();
    switch (k % 4) {
      case 0:  // any exponent below 1, subnormals included
        xs.push_back(bitsDouble((bits % 1023) << 52 | (bits >> 12)));
        break;
      case 1:  // subnormal
        xs.push_back(bitsDouble(bits >> 12 | 1));
        break;
      case 2:  // the u1 of the float32 and float64 normal fills
        xs.push_back(std::ldexp(static_cast<double>((bits >> 32) + 1), -32));
        xs.push_back(std::ldexp(static_cast<double>((bits >> 11) + 1), -53));
        break;
      default:  // near 1, where the result is tiny
        xs.push_back(1.0 - std::ldexp(static_cast<double>(bits >> 40), -53));
        break;
    }
  }
  return xs;
}

TEST(RngDetMathTest, DetLogIsWithinTwoUlpOfLibm) {
  EXPECT_EQ(doubleBits(detLog(1.0)), doubleBits(0.0));
  double worst = 0, worstExact = 0;
  const std::vector<double> xs = logInputs();
  for (double x : xs) {
    ASSERT_GT(x, 0.0);
    const double libm = std::log(x);
    const double error = std::fabs(detLog(x) - libm) / ulpOf(libm);
    worst = std::max(worst, error);
    ASSERT_LE(error, 2.0) << "detLog(" << std::hexfloat << x << ") = " << detLog(x) << ", std::log "
                          << libm;
    const long double exact = std::log(static_cast<long double>(x));
    worstExact =
        std::max(worstExact, static_cast<double>(std::fabs(detLog(x) - exact)) / ulpOf(libm));
  }
  std::cout << "detLog over " << xs.size() << " inputs: worst " << worst << " ulp from std::log, "
            << worstExact << " ulp from the long double log\n";
}

TEST(RngDetMathTest, DetSinCos2PiIsWithin2To52OfLibm) {
  std::mt19937_64 random(0x51c05);
  std::vector<double> us;
  for (double b : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    if (b < 1) us.push_back(b);  // the quadrant boundaries
    double v = b;
    for (int k = 0; k < 4 && v > 0; ++k) us.push_back(v = std::nextafter(v, 0.0));  // just below
    if (b < 1) us.push_back(std::nextafter(b, 1.0));                                // just above
  }
  for (int k = 0; k < 200000; ++k) {
    const uint64_t bits = random();
    us.push_back(k % 2 ? std::ldexp(static_cast<double>(bits >> 11), -53)
                       : std::ldexp(static_cast<double>((bits >> 11) | 1), -53 - k % 64));
  }
  const long double kTwoPi = 6.283185307179586476925286766559005768L;
  double worst = 0;
  for (double u : us) {
    double s = 2, c = 2;
    detSinCos2Pi(u, &s, &c);
    const long double ds = std::fabs(s - std::sin(kTwoPi * u));
    const long double dc = std::fabs(c - std::cos(kTwoPi * u));
    worst = std::max(worst, static_cast<double>(std::max(ds, dc)));
    ASSERT_LE(ds, 0x1p-52L) << "sin, u = " << std::hexfloat << u << ": " << s;
    ASSERT_LE(dc, 0x1p-52L) << "cos, u = " << std::hexfloat << u << ": " << c;
  }
  // Exact quarter turns give exact values.
  const double exact[][3] = {{0.0, 0, 1}, {0.25, 1, 0}, {0.5, 0, -1}, {0.75, -1, 0}};
  for (const auto& e : exact) {
    double s, c;
    detSinCos2Pi(e[0], &s, &c);
    EXPECT_EQ(s, e[1]) << e[0];
    EXPECT_EQ(c, e[2]) << e[0];
  }
  std::cout << "detSinCos2Pi over " << us.size() << " inputs: worst " << worst / 0x1p-52
            << " * 2^-52\n";
}

}  // namespace
}  // namespace detcoll::kernels::rng
