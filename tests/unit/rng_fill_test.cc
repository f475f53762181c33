// kernels/rng/fill.h and distributions.h: each distribution against a re-implementation of the
// formulas documented in distributions.h (built on philox4x32_10 alone, normals against libm in
// long double), statistical sanity with fixed bounds, independence of the split into calls and
// threads, and the argument checks.

#include "kernels/rng/fill.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/rng/det_math.h"
#include "kernels/rng/distributions.h"
#include "kernels/rng/key.h"
#include "kernels/rng/philox.h"

namespace detcoll::kernels::rng {
namespace {

using U128 = unsigned __int128;
constexpr uint64_t k2To48 = uint64_t{1} << 48;

// ---- The documented formulas, written again from distributions.h ----

Block refBlock(const Key& key, uint64_t b) {
  return philox4x32_10(static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), key.w[2], key.w[3],
                       key.w[0], key.w[1]);
}
uint64_t refPair(const Block& b, int j) {
  return b.v[2 * j] | static_cast<uint64_t>(b.v[2 * j + 1]) << 32;
}
float refUniform32(const Key& key, uint64_t i) {
  return std::ldexp(static_cast<float>(refBlock(key, i / 4).v[i % 4] >> 8), -24);
}
double refUniform64(const Key& key, uint64_t i) {
  return std::ldexp(static_cast<double>(refPair(refBlock(key, i / 2), i % 2) >> 11), -53);
}
uint64_t refThreshold(double p) {  // ceil(p 2^32)
  return static_cast<uint64_t>(std::ceil(std::ldexp(static_cast<long double>(p), 32)));
}
// Lemire with rejection; *attempts counts the attempts used.
uint64_t refRandint(const Key& key, uint64_t i, uint64_t n, int* attempts) {
  const uint64_t reject = static_cast<uint64_t>(((U128{1} << 64) - n) % n);
  for (uint64_t a = 0;; ++a) {
    const U128 product = U128{refPair(refBlock(key, i + a / 2 * k2To48), a % 2)} * n;
    if (static_cast<uint64_t>(product) >= reject) {
      *attempts = static_cast<int>(a + 1);
      return static_cast<uint64_t>(product >> 64);
    }
  }
}
// r cos(2 pi u2) or r sin(2 pi u2) in long double libm. 4 u2 = q + f is split exactly first, so
// that exact quarter turns give exact zeros, as they do in the exact function.
long double refBoxMuller(long double u1, long double u2, bool sine) {
  const long double r = std::sqrt(-2.0L * std::log(u1));
  const long double q = std::nearbyint(4.0L * u2);
  const long double x = (4.0L * u2 - q) * 1.5707963267948966192313216916397514L;
  long double s = std::sin(x), c = std::cos(x);
  for (int k = 0; k < (static_cast<int>(q) & 3); ++k) {  // rotate by a quarter turn
    const long double t = s;
    s = c;
    c = -t;
  }
  return r * (sine ? s : c);
}
long double refNormal32(const Key& key, uint64_t i, double mean, double stddev) {
  const Block b = refBlock(key, i / 4);
  const int j = static_cast<int>(i / 2 % 2);
  const long double u1 = std::ldexp(static_cast<long double>(b.v[2 * j]) + 1, -32);
  const long double u2 = std::ldexp(static_cast<long double>(b.v[2 * j + 1]), -32);
  return mean + stddev * refBoxMuller(u1, u2, i % 2 == 1);
}
long double refNormal64(const Key& key, uint64_t i, double mean, double stddev) {
  const Block b = refBlock(key, i / 2);
  const long double u1 = std::ldexp(static_cast<long double>((refPair(b, 0) >> 11) + 1), -53);
  const long double u2 = std::ldexp(static_cast<long double>(refPair(b, 1) >> 11), -53);
  return mean + stddev * refBoxMuller(u1, u2, i % 2 == 1);
}

FillSpec makeSpec(Distribution d, DataType t) {
  FillSpec spec;
  spec.distribution = d;
  spec.type = t;
  return spec;
}
std::vector<uint8_t> fillBytes(const Key& key, const FillSpec& spec, uint64_t offset, size_t count,
                               int threads = 1) {
  std::vector<uint8_t> out(count * dataTypeSize(spec.type), 0xa5);
  const Status status = fillHost(key, spec, offset, count, out.data(), threads);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return out;
}
template <typename T>
std::vector<T> fill(const Key& key, const FillSpec& spec, uint64_t offset, size_t count) {
  const std::vector<uint8_t> bytes = fillBytes(key, spec, offset, count);
  std::vector<T> out(count);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

const Key kKey{{0x8c2f1d07u, 0x3b9e55a1u, 0xd40f7e63u, 0x17c4a9f2u}};
constexpr uint64_t kOffset = 0x2b5e17a9c3ull;  // odd, blocks above 2^32, elements below 2^48
constexpr size_t kCount = 20001;

TEST(RngFillTest, UniformIsTheDocumentedFormulaBitForBit) {
  const auto f32 =
      fill<float>(kKey, makeSpec(Distribution::kUniform, DataType::kFloat32), kOffset, kCount);
  const auto f64 =
      fill<double>(kKey, makeSpec(Distribution::kUniform, DataType::kFloat64), kOffset, kCount);
  for (size_t j = 0; j < kCount; ++j) {
    ASSERT_EQ(doubleBits(f32[j]), doubleBits(refUniform32(kKey, kOffset + j))) << j;
    ASSERT_EQ(doubleBits(f64[j]), doubleBits(refUniform64(kKey, kOffset + j))) << j;
    ASSERT_LT(f32[j], 1.0f);
    ASSERT_LT(f64[j], 1.0);
  }
}

TEST(RngFillTest, BernoulliIsTheDocumentedThresholdBitForBit) {
  FillSpec spec = makeSpec(Distribution::kBernoulli, DataType::kInt32);
  for (double p : {0.0, 1.0, 0.3, 1e-300, 0.7310585786300049, 0.5, 1 - 1e-16}) {
    spec.p = p;
    const auto got = fill<int32_t>(kKey, spec, kOffset, kCount);
    const uint64_t t = refThreshold(p);
    EXPECT_EQ(bernoulliThreshold(p), t) << p;
    for (size_t j = 0; j < kCount; ++j) {
      const uint64_t i = kOffset + j;
      ASSERT_EQ(got[j], refBlock(kKey, i / 4).v[i % 4] < t ? 1 : 0) << "p " << p << " j " << j;
    }
  }
}

TEST(RngFillTest, RandintIsLemireWithRejectionBitForBit) {
  struct Case {
    DataType type;
    uint64_t n;
  };
  const Case cases[] = {
      {DataType::kInt32, 1},
      {DataType::kInt32, 3},
      {DataType::kInt32, 1000003},
      {DataType::kInt32, uint64_t{1} << 31},
      {DataType::kInt64, 1},
      {DataType::kInt64, 3},
      {DataType::kInt64, uint64_t{1} << 63},
      {DataType::kInt64, (uint64_t{3} << 61) + 1},  // rejects about 1/4 of attempts
      {DataType::kInt64, 0x5555555555555556ull},    // ceil(2^64 / 3): rejects about 1/3
  };
  for (const Case& c : cases) {
    FillSpec spec = makeSpec(Distribution::kRandint, c.type);
    spec.n = c.n;
    const std::vector<uint8_t> got = fillBytes(kKey, spec, kOffset, kCount);
    int maxAttempts = 0;
    for (size_t j = 0; j < kCount; ++j) {
      int attempts = 0;
      const uint64_t expected = refRandint(kKey, kOffset + j, c.n, &attempts);
      maxAttempts = std::max(maxAttempts, attempts);
      int64_t value;
      if (c.type == DataType::kInt32) {
        int32_t v;
        std::memcpy(&v, &got[4 * j], 4);
        value = v;
      } else {
        std::memcpy(&value, &got[8 * j], 8);
      }
      ASSERT_EQ(static_cast<uint64_t>(value), expected) << "n " << c.n << " element " << j;
      ASSERT_EQ(randint(kKey, kOffset + j, c.n), expected) << "n " << c.n << " element " << j;
    }
    // The heavy-rejection ranges reach the third and later attempts (blocks i + 2^48 and above).
    if (c.n > (uint64_t{1} << 62) && c.n != (uint64_t{1} << 63)) {
      EXPECT_GE(maxAttempts, 4) << c.n;
    }
  }
}

uint32_t floatOrder(float f) {  // monotone map of float bits, for ulp distances
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return (b & 0x80000000u) ? 0x80000000u - (b & 0x7fffffffu) : 0x80000000u + b;
}

TEST(RngFillTest, NormalFloat32IsWithinOneUlpOfLibmBoxMuller) {
  for (const double mean : {0.0, 0.3125}) {
    FillSpec spec = makeSpec(Distribution::kNormal, DataType::kFloat32);
    spec.mean = mean;
    spec.stddev = mean == 0 ? 1.0 : 2.75;
    const auto got = fill<float>(kKey, spec, kOffset, kCount);
    size_t differ = 0;
    for (size_t j = 0; j < kCount; ++j) {
      const float expected =
          static_cast<float>(refNormal32(kKey, kOffset + j, spec.mean, spec.stddev));
      const uint32_t a = floatOrder(got[j]), b = floatOrder(expected);
      ASSERT_LE(a > b ? a - b : b - a, 1u) << j << ": " << got[j] << " vs " << expected;
      differ += a != b;
      ASSERT_LE(std::fabs(got[j] - mean) / spec.stddev, 6.661f) << "|z| <= sqrt(64 ln 2)";
    }
    std::cout << "normal float32 (mean " << mean << "): " << differ << " of " << kCount
              << " differ by 1 ulp from libm\n";
    EXPECT_LE(differ, kCount / 1000);
  }
  FillSpec constant = makeSpec(Distribution::kNormal, DataType::kFloat32);
  constant.mean = -1.1;
  constant.stddev = 0.0;
  for (float v : fill<float>(kKey, constant, kOffset, 64)) EXPECT_EQ(v, -1.1f);
}

TEST(RngFillTest, NormalFloat64IsWithin1e14OfLibmBoxMuller) {
  FillSpec spec = makeSpec(Distribution::kNormal, DataType::kFloat64);
  spec.mean = -0.4375;
  spec.stddev = 1.625;
  const auto got = fill<double>(kKey, spec, kOffset, kCount);
  for (size_t j = 0; j < kCount; ++j) {
    const long double expected = refNormal64(kKey, kOffset + j, spec.mean, spec.stddev);
    // sin and cos are accurate in absolute terms, so near a zero of z the bound is absolute.
    const long double scale =
        std::fabs(spec.mean) +
        spec.stddev * std::max(1.0L, std::fabs((expected - spec.mean) / spec.stddev));
    ASSERT_LE(std::fabs(got[j] - expected), 1e-14L * scale) << j << ": " << got[j];
  }
}

// ---- Statistics of 10^6 draws under a fixed key ----
//
// Bounds are 5 sigma, so a correct generator fails with odds near 3e-7 per check (and never, for
// the fixed key). Mean of N = 10^6 draws: sigma = sd / 1000. Sample variance: sigma =
// sqrt((mu4 - var^2) / N); uniform: mu4 = 1/80, var = 1/12 -> 7.45e-5; normal: sqrt(2) / 1000.
// Chi-square: the 5 sigma quantiles (tail 2.87e-7) of the chi-square distribution are
// [43.8, 186.0] for 99 degrees of freedom, below 47.7 for 9 and below 41.0 for 6.

constexpr size_t kDraws = 1000000;
const Key kStatsKey = rootKey(20240611);

double chiSquare(const std::vector<size_t>& bins, size_t total) {
  const double expected = static_cast<double>(total) / bins.size();
  double sum = 0;
  for (size_t b : bins) sum += (b - expected) * (b - expected) / expected;
  return sum;
}

// z are standard draws (or uniforms when `normal` is false).
void checkMoments(const std::vector<double>& x, bool normal, const char* what) {
  double mean = 0, var = 0;
  std::vector<size_t> bins(100);
  for (double v : x) mean += v;
  mean /= x.size();
  for (double v : x) {
    var += (v - mean) * (v - mean);
    const double cdf = normal ? 0.5 * std::erfc(-v / std::sqrt(2.0)) : v;
    bins[std::min<size_t>(99, static_cast<size_t>(cdf * 100))]++;
  }
  var /= x.size() - 1;
  EXPECT_NEAR(mean, normal ? 0.0 : 0.5, normal ? 5e-3 : 5 * 2.887e-4) << what;
  EXPECT_NEAR(var, normal ? 1.0 : 1.0 / 12, normal ? 7.07e-3 : 5 * 7.45e-5) << what;
  const double chi = chiSquare(bins, x.size());
  EXPECT_GT(chi, 43.8) << what << ": suspiciously even";
  EXPECT_LT(chi, 186.0) << what;
}

TEST(RngFillTest, UniformAndNormalMomentsAndChiSquare) {
  const auto u32 =
      fill<float>(kStatsKey, makeSpec(Distribution::kUniform, DataType::kFloat32), 0, kDraws);
  checkMoments(std::vector<double>(u32.begin(), u32.end()), false, "uniform float32");
  checkMoments(
      fill<double>(kStatsKey, makeSpec(Distribution::kUniform, DataType::kFloat64), 0, kDraws),
      false, "uniform float64");
  FillSpec spec = makeSpec(Distribution::kNormal, DataType::kFloat32);
  spec.mean = 1.5;
  spec.stddev = 2.5;
  std::vector<double> z;
  for (float v : fill<float>(kStatsKey, spec, 0, kDraws)) z.push_back((v - 1.5) / 2.5);
  checkMoments(z, true, "normal float32");
  spec.type = DataType::kFloat64;
  z = fill<double>(kStatsKey, spec, 0, kDraws);
  for (double& v : z) v = (v - 1.5) / 2.5;
  checkMoments(z, true, "normal float64");
}

TEST(RngFillTest, BernoulliAndRandintFrequencies) {
  FillSpec spec = makeSpec(Distribution::kBernoulli, DataType::kInt64);
  spec.p = 0.3;
  size_t ones = 0;
  for (int64_t v : fill<int64_t>(kStatsKey, spec, 0, kDraws)) ones += v;
  EXPECT_NEAR(ones / 1e6, 0.3, 5 * std::sqrt(0.21 / kDraws));  // 2.29e-3
  spec = makeSpec(Distribution::kRandint, DataType::kInt32);
  for (auto [n, bound] : {std::pair<int, double>{10, 47.7}, {7, 41.0}}) {
    spec.n = n;
    std::vector<size_t> bins(n);
    for (int32_t v : fill<int32_t>(kStatsKey, spec, 0, kDraws)) {
      ASSERT_GE(v, 0);
      ASSERT_LT(v, n);
      bins[v]++;
    }
    EXPECT_LT(chiSquare(bins, kDraws), bound) << "randint n = " << n;
  }
}

// n = 3 2^61: 2^64 = 2n + 2^62. A plain x mod n gives the 2^62 values below 2n/3 three
// preimages and the rest two, so P(value < n/2) = 3 (n/2) / 2^64 = 9/16 = 0.5625 instead of 1/2.
// Lemire's multiply without the rejection gives floor(3x/8): values v with v mod 3 = 2 get two
// preimages and the others three, so P(v mod 3 = 2) = 1/4 instead of 1/3. The 5 sigma bounds are
// 2.5e-3 and 2.36e-3, far below both gaps.
TEST(RngFillTest, RandintHasNoModuloOrMultiplyBias) {
  FillSpec spec = makeSpec(Distribution::kRandint, DataType::kInt64);
  spec.n = uint64_t{3} << 61;
  size_t below = 0, residue2 = 0;
  for (int64_t v : fill<int64_t>(kStatsKey, spec, 0, kDraws)) {
    ASSERT_GE(v, 0);
    ASSERT_LT(static_cast<uint64_t>(v), spec.n);
    below += static_cast<uint64_t>(v) < spec.n / 2;
    residue2 += v % 3 == 2;
  }
  EXPECT_NEAR(below / 1e6, 0.5, 5 * 0.5 / 1000);
  EXPECT_NEAR(residue2 / 1e6, 1.0 / 3, 5 * std::sqrt(2.0 / 9 / kDraws));
}

// ---- Splits into calls and threads ----

std::vector<FillSpec> everyDistributionAndType() {
  std::vector<FillSpec> specs;
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    specs.push_back(makeSpec(Distribution::kUniform, t));
    FillSpec normal = makeSpec(Distribution::kNormal, t);
    normal.mean = 0.3;
    normal.stddev = 2.5;
    specs.push_back(normal);
  }
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                     DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
    FillSpec bernoulli = makeSpec(Distribution::kBernoulli, t);
    bernoulli.p = 0.37;
    specs.push_back(bernoulli);
  }
  FillSpec randint = makeSpec(Distribution::kRandint, DataType::kInt32);
  randint.n = 1000003;
  specs.push_back(randint);
  randint.type = DataType::kInt64;
  randint.n = (uint64_t{3} << 61) + 1;
  specs.push_back(randint);
  return specs;
}

// Element i by the per-element functions of distributions.h, as bytes of the spec's dtype.
void elementBytes(const Key& key, const FillSpec& s, uint64_t i, uint8_t* out) {
  const bool f32 = s.type == DataType::kFloat32;
  float f = 0;
  double d = 0;
  uint64_t v = 0;
  switch (s.distribution) {
    case Distribution::kUniform:
      f = uniformFloat32(key, i);
      d = uniformFloat64(key, i);
      break;
    case Distribution::kNormal:
      f = normalFloat32(key, i, s.mean, s.stddev);
      d = normalFloat64(key, i, s.mean, s.stddev);
      break;
    case Distribution::kBernoulli: {
      // The bits of 1 in float32, float64, float16, bfloat16, int32, int64.
      const uint64_t one[] = {0x3f800000u, 0x3ff0000000000000u, 0x3c00, 0x3f80, 1, 1};
      v = bernoulli(key, i, bernoulliThreshold(s.p)) ? one[static_cast<int>(s.type)] : 0;
      break;
    }
    case Distribution::kRandint:
      v = randint(key, i, s.n);
      break;
  }
  const bool floating =
      s.distribution == Distribution::kUniform || s.distribution == Distribution::kNormal;
  const void* src = !floating ? static_cast<const void*>(&v)
                    : f32     ? static_cast<const void*>(&f)
                              : &d;
  std::memcpy(out, src, dataTypeSize(s.type));  // little-endian: the low bytes of v
}

TEST(RngFillTest, ResultDoesNotDependOnSplitsOrThreads) {
  std::mt19937_64 random(0xc4a11);
  const uint64_t offset = 0x1234567891ull;  // odd
  const size_t count = 7 * 65536 + 12347;   // 7 threads engage (one per 65536)
  for (const FillSpec& spec : everyDistributionAndType()) {
    const std::string what = distributionName(spec.distribution) + " " + dataTypeName(spec.type);
    const size_t size = dataTypeSize(spec.type);
    const std::vector<uint8_t> whole = fillBytes(kKey, spec, offset, count);
    std::vector<uint8_t> pieces(whole.size(), 0xa5);
    for (size_t at = 0; at < count;) {
      const size_t n =
          std::min<size_t>(count - at, random() % 4 ? 1 + random() % 7 : random() % 9000);
      ASSERT_TRUE(fillHost(kKey, spec, offset + at, n, &pieces[at * size]).isOk());
      at += n;
    }
    EXPECT_TRUE(pieces == whole) << what << ": split into calls";
    for (int threads : {2, 3, 7}) {
      EXPECT_TRUE(fillBytes(kKey, spec, offset, count, threads) == whole)
          << what << " on " << threads << " threads";
    }
    std::vector<uint8_t> one(size);
    for (size_t j = 0; j < count; ++j) {
      elementBytes(kKey, spec, offset + j, one.data());
      ASSERT_EQ(std::memcmp(one.data(), &whole[j * size], size), 0) << what << " element " << j;
    }
  }
}

// A range may end anywhere below 2^64 (checkFill accepts offset + count = 2^64 - 1). Run in a
// child process, since a fill that writes out of bounds must fail the test, not end the run.
void fillAtTheTopAndExit(const FillSpec& spec, uint64_t end) {
  alarm(20);
  const size_t count = 6, size = dataTypeSize(spec.type);
  std::vector<uint8_t> out((count + 8) * size, 0xa5);
  if (!fillHost(kKey, spec, end - count, count, out.data()).isOk()) std::_Exit(2);
  std::vector<uint8_t> one(size);
  for (size_t j = 0; j < count; ++j) {
    elementBytes(kKey, spec, end - count + j, one.data());
    if (std::memcmp(one.data(), &out[j * size], size) != 0) std::_Exit(3);
  }
  for (size_t b = count * size; b < out.size(); ++b) {
    if (out[b] != 0xa5) std::_Exit(4);
  }
  std::_Exit(0);
}

TEST(RngFillDeathTest, RangesEndingAtTheTopOfTheStream) {
  for (const FillSpec& spec : everyDistributionAndType()) {
    if (spec.distribution == Distribution::kRandint) continue;  // elements below 2^48
    for (uint64_t end : {UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 2, UINT64_MAX - 3}) {
      EXPECT_EXIT(fillAtTheTopAndExit(spec, end), ::testing::ExitedWithCode(0), "")
          << distributionName(spec.distribution) << " " << dataTypeName(spec.type)
          << ", range ending at 2^64 - " << (0 - end);
    }
  }
}

// ---- Bad arguments ----

struct BadFill {
  FillSpec spec;
  uint64_t offset;
  size_t count;
  bool nullOut;
  int threads;
  std::string needle;  // what the message must name
};

std::vector<BadFill> badFills() {
  using D = Distribution;
  using T = DataType;
  const uint64_t top = UINT64_MAX;
  auto spec = [](D d, T t, double mean, double stddev, double p, uint64_t n) {
    FillSpec s = makeSpec(d, t);
    s.mean = mean, s.stddev = stddev, s.p = p, s.n = n;
    return s;
  };
  const double nan = std::nan(""), inf = INFINITY;
  return {
      {makeSpec(D::kUniform, T::kInt32), 0, 8, false, 1, "not int32"},
      {makeSpec(D::kUniform, T::kFloat16), 0, 8, false, 1, "not float16"},
      {makeSpec(D::kNormal, T::kInt64), 0, 8, false, 1, "not int64"},
      {makeSpec(D::kNormal, T::kBFloat16), 0, 8, false, 1, "not bfloat16"},
      {makeSpec(D::kRandint, T::kFloat32), 0, 8, false, 1, "not float32"},
      {makeSpec(D::kRandint, T::kFloat64), 0, 8, false, 1, "not float64"},
      {makeSpec(D::kBernoulli, static_cast<T>(9)), 0, 8, false, 1, "dtype 9"},
      {makeSpec(static_cast<D>(7), T::kFloat32), 0, 8, false, 1, "distribution(7)"},
      {spec(D::kBernoulli, T::kFloat32, 0, 1, -0.01, 1), 0, 8, false, 1, "probability -0.01"},
      {spec(D::kBernoulli, T::kInt32, 0, 1, 1.0000001, 1), 0, 8, false, 1, "probability 1.0"},
      {spec(D::kBernoulli, T::kInt32, 0, 1, nan, 1), 0, 8, false, 1, "probability nan"},
      {spec(D::kRandint, T::kInt32, 0, 1, 0.5, 0), 0, 8, false, 1, "n = 0"},
      {spec(D::kRandint, T::kInt32, 0, 1, 0.5, (1ull << 31) + 1), 0, 8, false, 1, "2147483649"},
      {spec(D::kRandint, T::kInt64, 0, 1, 0.5, (1ull << 63) + 1), 0, 8, false, 1,
       "9223372036854775809"},
      {spec(D::kRandint, T::kInt64, 0, 1, 0.5, 7), k2To48 - 7, 8, false, 1, "2^48"},
      {spec(D::kRandint, T::kInt32, 0, 1, 0.5, 7), k2To48 + 1, 0, false, 1, "2^48"},
      {makeSpec(D::kUniform, T::kFloat32), top - 5, 8, false, 1, "2^64"},
      {makeSpec(D::kUniform, T::kFloat64), top, 1, false, 1, "2^64"},
      {makeSpec(D::kUniform, T::kFloat32), 0, 8, true, 1, "out is null"},
      {makeSpec(D::kUniform, T::kFloat32), 0, 8, false, 0, "threads"},
      {makeSpec(D::kBernoulli, T::kInt32), 0, 8, false, -2, "threads"},
      {spec(D::kNormal, T::kFloat32, nan, 1, 0.5, 1), 0, 8, false, 1, "mean"},
      {spec(D::kNormal, T::kFloat64, inf, 1, 0.5, 1), 0, 8, false, 1, "mean"},
      {spec(D::kNormal, T::kFloat32, 0, -0.5, 0.5, 1), 0, 8, false, 1, "stddev >= 0"},
      {spec(D::kNormal, T::kFloat64, 0, nan, 0.5, 1), 0, 8, false, 1, "stddev"},
  };
}

TEST(RngFillTest, BadArgumentsAreRejectedAndWriteNothing) {
  for (const BadFill& bad : badFills()) {
    std::vector<uint8_t> out(8 * 8, 0xa5);
    void* dst = bad.nullOut ? nullptr : out.data();
    const Status status = fillHost(kKey, bad.spec, bad.offset, bad.count, dst, bad.threads);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad.needle;
    EXPECT_NE(status.message().find(bad.needle), std::string::npos)
        << "message does not name '" << bad.needle << "': " << status.message();
    EXPECT_EQ(status.message().rfind("fill: ", 0), 0u) << status.message();
    for (uint8_t b : out) ASSERT_EQ(b, 0xa5) << "a rejected fill wrote its output";
    if (bad.threads >= 1) {
      const Status checked = checkFill("my_call", bad.spec, bad.offset, bad.count, dst);
      EXPECT_EQ(checked.code(), StatusCode::kInvalidArgument) << bad.needle;
      EXPECT_EQ(checked.message().rfind("my_call: ", 0), 0u) << checked.message();
    }
  }
}

TEST(RngFillTest, OutputNotAlignedToItsDtypeIsRejected) {
  alignas(8) uint8_t out[72];
  std::memset(out, 0xa5, sizeof out);
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64}) {
    FillSpec spec =
        makeSpec(t == DataType::kInt64 ? Distribution::kRandint : Distribution::kUniform, t);
    spec.n = 10;
    for (size_t shift = 1; shift < dataTypeSize(t); ++shift) {
      const Status status = fillHost(kKey, spec, 0, 4, out + shift);
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << dataTypeName(t) << " +" << shift;
      EXPECT_NE(status.message().find("not aligned"), std::string::npos) << status.message();
    }
    EXPECT_TRUE(fillHost(kKey, spec, 0, 4, out + dataTypeSize(t)).isOk()) << dataTypeName(t);
    std::memset(out, 0xa5, sizeof out);
  }
  for (size_t i = 0; i < sizeof out; ++i) ASSERT_EQ(out[i], 0xa5) << "a rejected fill wrote";
}

TEST(RngFillTest, EdgeArgumentsThatAreValid) {
  FillSpec spec = makeSpec(Distribution::kRandint, DataType::kInt64);
  spec.n = 5;
  EXPECT_TRUE(fillHost(kKey, spec, 0, 0, nullptr).isOk()) << "count 0 needs no buffer";
  int64_t last[3];
  ASSERT_TRUE(fillHost(kKey, spec, k2To48 - 3, 3, last).isOk());
  for (int j = 0; j < 3; ++j)
    EXPECT_EQ(last[j], static_cast<int64_t>(randint(kKey, k2To48 - 3 + j, 5)));
  spec.type = DataType::kInt32;
  spec.n = uint64_t{1} << 31;
  EXPECT_TRUE(checkFill("x", spec, 0, 1, last).isOk());
  spec.type = DataType::kInt64;
  spec.n = uint64_t{1} << 63;
  EXPECT_TRUE(checkFill("x", spec, 0, 1, last).isOk());
  FillSpec normal = makeSpec(Distribution::kNormal, DataType::kFloat64);
  normal.stddev = 0;
  EXPECT_TRUE(checkFill("x", normal, UINT64_MAX - 1, 1, last).isOk());
}

}  // namespace
}  // namespace detcoll::kernels::rng
