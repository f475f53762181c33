// The invariant codec's vector paths for float16, bfloat16 and float64
// (kernels/fixed_point_formats.h), through the public kernels of kernels/fixed_point.h, against
// the element-by-element codec of kernels/codec.h and the MPFR reference: random bit patterns over
// every exponent, sums built to land exactly on a tie of the target format, averages over counts
// that are not powers of two, results in the subnormal range and beyond the format's range, and
// sums too large for the double path.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/fixed_point.h"
#include "tests/support/exact_reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using kernels::codec::Format;
using kernels::codec::formatOf;

const DataType kTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64};

uint64_t loadBits(const std::vector<uint8_t>& b, size_t i, int bytes) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + i * bytes, bytes);
  return v;
}

void storeBits(std::vector<uint8_t>& b, size_t i, int bytes, uint64_t v) {
  std::memcpy(b.data() + i * bytes, &v, bytes);
}

uint32_t loadKey(const std::vector<uint8_t>& keys, size_t i, size_t kb) {
  uint32_t k = 0;
  std::memcpy(&k, keys.data() + i * kb, kb);
  return k;
}

// A random value of the format: every exponent field equally likely (a tenth of them zero, so
// that subnormals and zeros are common), random sign and fraction, inf and NaN only when asked.
uint64_t randomValue(std::mt19937_64& rng, const Format& f, bool nonFinite) {
  const uint64_t special = (uint64_t{1} << f.exponentBits) - 1;
  uint64_t exponent = rng() % (nonFinite ? special + 1 : special);
  if (rng() % 10 == 0) exponent = 0;
  const uint64_t fraction = rng() & ((uint64_t{1} << f.mantissaBits) - 1);
  const uint64_t sign = rng() & 1;
  return (sign << (f.exponentBits + f.mantissaBits)) | (exponent << f.mantissaBits) | fraction;
}

// Leaves whose values sit within a few binades of each other (so their sums carry and tie), or
// anywhere, as `spread` says.
std::vector<std::vector<uint8_t>> randomLeaves(DataType type, int nleaves, size_t n, int spread,
                                               bool nonFinite, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Format f = formatOf(type);
  std::vector<std::vector<uint8_t>> leaves(nleaves, std::vector<uint8_t>(n * f.bytes));
  const uint64_t special = (uint64_t{1} << f.exponentBits) - 1;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t center = 1 + rng() % (special - 1);
    for (int l = 0; l < nleaves; ++l) {
      uint64_t v = randomValue(rng, f, nonFinite && rng() % 50 == 0);
      if (spread >= 0) {
        const int64_t e = static_cast<int64_t>(center) - static_cast<int64_t>(rng() % (spread + 1));
        const uint64_t exponent = e < 0 ? 0 : static_cast<uint64_t>(e);
        v = (v & ~(special << f.mantissaBits)) | (exponent << f.mantissaBits);
      }
      storeBits(leaves[l], i, f.bytes, v);
    }
  }
  return leaves;
}

// Runs localMaxKeys, encodeLeaves and decodeSums (in two pieces, as a distributed reduction
// does) and checks each against the element-by-element codec.
void checkAgainstCodec(DataType type, const std::vector<std::vector<uint8_t>>& leaves, size_t n,
                       ReduceOp op, int64_t divisorLeaves, const std::string& what) {
  const Format f = formatOf(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  const int nleaves = static_cast<int>(leaves.size());
  std::vector<const void*> in;
  for (const auto& l : leaves) in.push_back(l.data());
  std::vector<uint8_t> keys(n * kb);
  kernels::localMaxKeys(keys.data(), in.data(), nleaves, 0, n, type);
  // Two pieces, as two ranks would hold them; one leaf makes the second piece all zeros.
  const int half = (nleaves + 1) / 2;
  std::vector<int64_t> first(n, 7), second(n, 0);
  kernels::encodeLeaves(first.data(), in.data(), half, keys.data(), 0, n, type);
  if (nleaves > half) {
    kernels::encodeLeaves(second.data(), in.data() + half, nleaves - half, keys.data(), 0, n, type);
  }
  const int64_t* pieces[2] = {first.data(), second.data()};
  std::vector<uint8_t> out(n * f.bytes);
  kernels::decodeSums(out.data(), pieces, 2, keys.data(), n, type, op, divisorLeaves);
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    uint32_t key = 0;
    for (int l = 0; l < nleaves; ++l)
      key = std::max(key, kernels::codec::keyOf(loadBits(leaves[l], i, f.bytes), f));
    int64_t a = 0, b = 0;
    for (int l = 0; l < nleaves; ++l) {
      (l < half ? a : b) +=
          kernels::codec::leafContribution(loadBits(leaves[l], i, f.bytes), key, f);
    }
    const uint64_t want =
        kernels::codec::decodeElement(a + b, key, f, op == ReduceOp::kAverage, divisorLeaves);
    const bool ok = loadKey(keys, i, kb) == key && first[i] == a && second[i] == b &&
                    loadBits(out, i, f.bytes) == want;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": key " << loadKey(keys, i, kb) << " want "
                    << key << ", sums " << first[i] << "+" << second[i] << " want " << a << "+" << b
                    << ", result 0x" << std::hex << loadBits(out, i, f.bytes) << " want 0x" << want;
    }
  }
}

TEST(FixedPointFormatsTest, RandomLeavesMatchTheCodecInEveryDtype) {
  for (DataType type : kTypes) {
    for (int nleaves : {1, 2, 3, 5, 8, 33}) {
      for (int spread : {0, 2, 12, -1}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          const auto leaves = randomLeaves(type, nleaves, 3001, spread, true,
                                           nleaves * 1000 + spread * 10 + static_cast<int>(op));
          checkAgainstCodec(type, leaves, 3001, op, nleaves,
                            dataTypeName(type) + " leaves " + std::to_string(nleaves) + " spread " +
                                std::to_string(spread));
        }
      }
    }
  }
}

TEST(FixedPointFormatsTest, AveragesOverOddCountsMatchTheCodec) {
  // Sums of equal-exponent values carry into ties of the format; dividing by 3, 7, 1000 or 65535
  // then puts quotients next to ties, where a second rounding could differ.
  for (DataType type : kTypes) {
    for (int64_t divisor : {3, 7, 1000, 65535}) {
      const auto leaves = randomLeaves(type, 4, 5000, 1, false, 77 + divisor);
      checkAgainstCodec(type, leaves, 5000, ReduceOp::kAverage, divisor,
                        dataTypeName(type) + " average over " + std::to_string(divisor));
    }
  }
}

// decodeSums straight from sums built to be ties of the format, or off a tie by one grid step,
// under every key, against the codec.
TEST(FixedPointFormatsTest, DecodingOfTiesAndNearTiesMatchesTheCodec) {
  for (DataType type : kTypes) {
    const Format f = formatOf(type);
    const size_t kb = kernels::exponentKeyBytes(type);
    const uint32_t special = (1u << f.exponentBits) - 1;
    std::mt19937_64 rng(5);
    const size_t n = 20000;
    std::vector<uint8_t> keys(n * kb);
    std::vector<int64_t> sums(n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = 1 + rng() % (special - 1);
      std::memcpy(keys.data() + i * kb, &key, kb);
      // An odd multiple of 2^s has its lowest set bit at s: with s next to where the format's
      // mantissa ends, the value is a tie, or one step either side of one.
      const int bits = 1 + static_cast<int>(rng() % 50);
      const int64_t odd = static_cast<int64_t>((rng() & ((uint64_t{1} << bits) - 1)) | 1);
      const int s = static_cast<int>(rng() % 12);
      int64_t t = (odd << s) + static_cast<int64_t>(rng() % 3) - 1;
      if (rng() % 2) t = -t;
      if (rng() % 20 == 0) t = static_cast<int64_t>(rng() >> 2) * (rng() % 2 ? 1 : -1);  // >= 2^51
      sums[i] = t;
    }
    const int64_t* pieces[1] = {sums.data()};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (int64_t leaves : {1, 2, 3, 6, 1000}) {
        if (op == ReduceOp::kSum && leaves > 1) continue;
        std::vector<uint8_t> out(n * f.bytes);
        kernels::decodeSums(out.data(), pieces, 1, keys.data(), n, type, op, leaves);
        int bad = 0;
        for (size_t i = 0; i < n && bad < 5; ++i) {
          const uint64_t want = kernels::codec::decodeElement(sums[i], loadKey(keys, i, kb), f,
                                                              op == ReduceOp::kAverage, leaves);
          if (loadBits(out, i, f.bytes) != want) {
            ++bad;
            ADD_FAILURE() << dataTypeName(type) << " sum " << sums[i] << " key "
                          << loadKey(keys, i, kb) << " leaves " << leaves << ": 0x" << std::hex
                          << loadBits(out, i, f.bytes) << " want 0x" << want;
          }
        }
      }
    }
  }
}

TEST(FixedPointFormatsTest, LocalReductionMatchesTheExactReference) {
  // The whole one-process reduction against MPFR, with many leaves (sums past 2^51 take the exact
  // path), values close together (ties) and far apart, inf and NaN.
  // float16 and bfloat16 up to 64 leaves take the double path of formats::reduceLocal.
  for (DataType type : kTypes) {
    for (int nleaves : {1, 2, 3, 4, 7, 64, 70}) {
      for (int spread : {0, 3, -1}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          const size_t n = 2500;
          const auto leaves = randomLeaves(type, nleaves, n, spread, true, nleaves * 10 + spread);
          std::vector<const void*> in;
          for (const auto& l : leaves) in.push_back(l.data());
          const size_t bytes = n * dataTypeSize(type);
          std::vector<uint8_t> got(bytes), want(bytes);
          kernels::invariantReduceLocal(got.data(), in.data(), nleaves, n, type, op);
          testing::exactInvariantReference(want.data(), in, n, type, op);
          EXPECT_TRUE(testing::sameBits(got.data(), want.data(), n, type))
              << dataTypeName(type) << " leaves " << nleaves << " spread " << spread << " op "
              << reduceOpName(op);
        }
      }
    }
  }
}

}  // namespace
}  // namespace detcoll
