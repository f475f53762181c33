// common/half.h against independent conversions: the compiler's _Float16 for IEEE binary16 and a
// nearest-of-two-candidates rounding, computed in double, for bfloat16.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"

namespace detcoll {
namespace {

uint16_t compilerHalfBits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

float compilerHalfToFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

std::string hex(float f) {
  char text[80];
  std::snprintf(text, sizeof(text), "%.9g (%a, bits 0x%08x)", f, f, floatBits(f));
  return text;
}

// Checks floatToHalf(f) against the compiler; NaN must give the canonical 0x7e00.
::testing::AssertionResult halfMatchesCompiler(float f) {
  const uint16_t ours = floatToHalf(f).bits;
  const uint16_t expected = std::isnan(f) ? kHalfCanonicalNaN : compilerHalfBits(f);
  if (ours == expected) return ::testing::AssertionSuccess();
  char text[64];
  std::snprintf(text, sizeof(text), ": floatToHalf gives 0x%04x, expected 0x%04x", ours, expected);
  return ::testing::AssertionFailure() << hex(f) << text;
}

TEST(HalfTest, AllHalfPatternsConvertToFloatLikeTheCompiler) {
  int nans = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float ours = halfToFloat(Half{bits});
    const float expected = compilerHalfToFloat(bits);
    if (std::isnan(expected)) {
      ++nans;
      ASSERT_TRUE(std::isnan(ours)) << "half 0x" << std::hex << b << " gives " << hex(ours);
      continue;
    }
    ASSERT_EQ(floatBits(ours), floatBits(expected))
        << "half 0x" << std::hex << b << ": ours " << hex(ours) << ", compiler " << hex(expected);
  }
  EXPECT_EQ(nans, 2 * 1023);  // exponent 31 with a non-zero mantissa, either sign
}

TEST(HalfTest, AllHalfPatternsRoundTripThroughFloat) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const bool isNaN = (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
    const uint16_t back = floatToHalf(halfToFloat(Half{bits})).bits;
    const uint16_t expected = isNaN ? kHalfCanonicalNaN : bits;
    ASSERT_EQ(back, expected) << "half 0x" << std::hex << b << " came back as 0x" << back;
  }
}

TEST(HalfTest, EdgeCasesMatchTheCompiler) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> cases = {0.0f,
                              -0.0f,
                              1.0f,
                              -1.0f,
                              65504.0f,
                              -65504.0f,
                              65519.99f,
                              -65519.99f,
                              65520.0f,
                              -65520.0f,
                              65536.0f,
                              1e10f,
                              std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max(),
                              inf,
                              -inf,
                              0x1p-24f,
                              -0x1p-24f,
                              0x1p-25f,
                              -0x1p-25f,
                              std::nextafter(0x1p-25f, 1.0f),
                              -std::nextafter(0x1p-25f, 1.0f),
                              std::nextafter(0x1p-25f, 0.0f),
                              0x1.8p-24f,
                              0x1.8p-25f,
                              0x1p-14f,
                              std::nextafter(0x1p-14f, 0.0f),
                              0x1.ffcp-15f,
                              0x1.ffep-15f,
                              0x1.ffdp-15f,
                              0x1.ffe1p-15f,
                              0x1p-26f,
                              0x1p-30f,
                              std::numeric_limits<float>::denorm_min(),
                              -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(),
                              1.0f + 0x1p-11f,
                              1.0f + 0x1p-11f + 0x1p-23f,
                              1.0f + 0x1.8p-10f,
                              2048.0f + 1.0f,
                              2048.0f + 3.0f,
                              0.1f,
                              3.14159265f,
                              1.0f / 3.0f,
                              std::numeric_limits<float>::quiet_NaN(),
                              -std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::signaling_NaN(),
                              bitsToFloat(0x7f800001u),
                              bitsToFloat(0xffffffffu),
                              bitsToFloat(0x7fc12345u)};
  for (float f : cases) EXPECT_TRUE(halfMatchesCompiler(f));

  // The documented values, stated once outright.
  EXPECT_EQ(floatToHalf(65504.0f).bits, 0x7bffu);
  EXPECT_EQ(floatToHalf(65519.99f).bits, 0x7bffu);
  EXPECT_EQ(floatToHalf(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(floatToHalf(-65520.0f).bits, 0xfc00u);
  EXPECT_EQ(floatToHalf(0x1p-24f).bits, 0x0001u);
  EXPECT_EQ(floatToHalf(0x1p-25f).bits, 0x0000u);
  EXPECT_EQ(floatToHalf(std::nextafter(0x1p-25f, 1.0f)).bits, 0x0001u);
  EXPECT_EQ(floatToHalf(-0.0f).bits, 0x8000u);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::quiet_NaN()).bits, kHalfCanonicalNaN);
}

// Every tie and its two neighbours: the midpoint between two consecutive halfs (exact in float)
// and the floats just below and above it, for every finite half.
TEST(HalfTest, EveryMidpointBetweenHalfsRoundsLikeTheCompiler) {
  for (uint32_t b = 0; b < 0x7c00u; ++b) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float lo = halfToFloat(Half{static_cast<uint16_t>(sign | b)});
      const float hi = b + 1 == 0x7c00u ? (sign ? -65536.0f : 65536.0f)
                                        : halfToFloat(Half{static_cast<uint16_t>(sign | (b + 1))});
      const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
      const float towardInf =
          sign ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      ASSERT_TRUE(halfMatchesCompiler(lo));
      ASSERT_TRUE(halfMatchesCompiler(mid));
      ASSERT_TRUE(halfMatchesCompiler(std::nextafter(mid, 0.0f)));
      ASSERT_TRUE(halfMatchesCompiler(std::nextafter(mid, towardInf)));
    }
  }
}

TEST(HalfTest, RandomFloatsOverTheWholeExponentRangeMatchTheCompiler) {
  std::mt19937 rng(12345);
  // Uniform bit patterns: every exponent, NaNs and infinities included.
  for (int i = 0; i < 2000000; ++i) ASSERT_TRUE(halfMatchesCompiler(bitsToFloat(rng())));
  // Concentrated where half has values: exponents 2^-27 .. 2^17, random mantissa and sign.
  std::uniform_int_distribution<uint32_t> exponent(127 - 27, 127 + 17);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = (rng() & 0x807fffffu) | (exponent(rng) << 23);
    ASSERT_TRUE(halfMatchesCompiler(bitsToFloat(bits)));
  }
  // Low mantissa bits near the rounding boundary (bit 12 and below), in the half range.
  for (int i = 0; i < 500000; ++i) {
    const uint32_t low = (rng() & 1) ? (0x1000u + (rng() % 5) - 2) : (rng() % 3);
    const uint32_t bits = (rng() & 0x807fe000u) | (exponent(rng) << 23) | (low & 0x1fffu);
    ASSERT_TRUE(halfMatchesCompiler(bitsToFloat(bits)));
  }
}

// bfloat16 -----------------------------------------------------------------------------------

// An independent value of a bfloat16 pattern: sign * mantissa * 2^exponent, built with ldexp.
double bfloat16Value(uint16_t bits) {
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  if (exponent == 0xff) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -126 - 7);
  return sign * std::ldexp(128 + mantissa, exponent - 127 - 7);
}

// Round to nearest, ties to even, by comparing the distances to the two candidates in double
// (exact: both differences fit in 53 bits). Beyond the largest finite bfloat16 the upper candidate
// is 2^128, which rounds to infinity.
uint16_t nearestBFloat16(float f) {
  if (std::isnan(f)) return kBFloat16CanonicalNaN;
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7f80u;
  // Largest bfloat16 magnitude pattern not above a (bfloat16 order equals magnitude order).
  uint16_t lower = 0;
  for (int bit = 14; bit >= 0; --bit) {
    const uint16_t candidate = static_cast<uint16_t>(lower | (1u << bit));
    if (candidate <= 0x7f80u && bfloat16Value(candidate) <= a) lower = candidate;
  }
  if (bfloat16Value(lower) == a) return sign | lower;
  const uint16_t upper = static_cast<uint16_t>(lower + 1);
  const double upperValue = upper == 0x7f80u ? std::ldexp(1.0, 128) : bfloat16Value(upper);
  const double below = a - bfloat16Value(lower);
  const double above = upperValue - a;
  uint16_t pick = below < above ? lower : above < below ? upper : ((lower & 1u) ? upper : lower);
  return sign | pick;
}

::testing::AssertionResult bfloat16MatchesReference(float f) {
  const uint16_t ours = floatToBFloat16(f).bits;
  const uint16_t expected = nearestBFloat16(f);
  if (ours == expected) return ::testing::AssertionSuccess();
  char text[80];
  std::snprintf(text, sizeof(text), ": floatToBFloat16 gives 0x%04x, expected 0x%04x", ours,
                expected);
  return ::testing::AssertionFailure() << hex(f) << text;
}

TEST(BFloat16Test, ToFloatIsExactForEveryPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float ours = bfloat16ToFloat(BFloat16{bits});
    const double expected = bfloat16Value(bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(ours)) << "bfloat16 0x" << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(ours), expected) << "bfloat16 0x" << std::hex << b;
    ASSERT_EQ(std::signbit(ours), (bits & 0x8000u) != 0) << "bfloat16 0x" << std::hex << b;
  }
}

TEST(BFloat16Test, RoundTripsEveryNonNaNPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const bool isNaN = (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
    const uint16_t back = floatToBFloat16(bfloat16ToFloat(BFloat16{bits})).bits;
    ASSERT_EQ(back, isNaN ? kBFloat16CanonicalNaN : bits) << "bfloat16 0x" << std::hex << b;
  }
}

TEST(BFloat16Test, EveryUpperHalfWithBoundaryLowBitsRoundsToNearestEven) {
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x4000u, 0xc000u};
  for (uint32_t high = 0; high <= 0xffffu; ++high) {
    for (uint32_t low : lows) {
      ASSERT_TRUE(bfloat16MatchesReference(bitsToFloat((high << 16) | low)));
    }
  }
}

TEST(BFloat16Test, RandomFloatsAndEdgeCasesRoundToNearestEven) {
  std::mt19937 rng(777);
  for (int i = 0; i < 2000000; ++i) ASSERT_TRUE(bfloat16MatchesReference(bitsToFloat(rng())));
  const float edges[] = {std::numeric_limits<float>::max(),
                         -std::numeric_limits<float>::max(),
                         bitsToFloat(0x7f7f7fffu),  // just below the tie at the top
                         bitsToFloat(0x7f7f8000u),  // the tie between max bfloat16 and 2^128
                         bitsToFloat(0x7f7f8001u),
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::denorm_min(),
                         bitsToFloat(0x00008000u),
                         bitsToFloat(0x00018000u),
                         -0.0f,
                         0.0f,
                         std::numeric_limits<float>::quiet_NaN(),
                         -std::numeric_limits<float>::quiet_NaN(),
                         bitsToFloat(0x7f800001u),
                         bitsToFloat(0xff812345u)};
  for (float f : edges) EXPECT_TRUE(bfloat16MatchesReference(f));
  EXPECT_EQ(floatToBFloat16(bitsToFloat(0x7f7f8000u)).bits, 0x7f80u);
  EXPECT_EQ(floatToBFloat16(bitsToFloat(0x7f7f7fffu)).bits, 0x7f7fu);
  EXPECT_EQ(floatToBFloat16(bitsToFloat(0x3f808000u)).bits, 0x3f80u);  // tie, even stays
  EXPECT_EQ(floatToBFloat16(bitsToFloat(0x3f818000u)).bits, 0x3f82u);  // tie, odd goes up
  EXPECT_EQ(floatToBFloat16(-std::numeric_limits<float>::quiet_NaN()).bits, kBFloat16CanonicalNaN);
}

}  // namespace
}  // namespace detcoll
