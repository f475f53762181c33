// kernels/convert16.h: the vectorized float16 and bfloat16 conversions against the scalar ones of
// common/half.h (themselves checked against the compiler in half_test.cc): every 16-bit pattern
// widened, and narrowed from every float around every 16-bit value and midpoint, a sweep of float
// patterns, at unaligned addresses.

#include "kernels/convert16.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/float_env.h"
#include "common/half.h"

namespace detcoll {
namespace {

// Every 16-bit pattern, stored one byte into a buffer so that the elements are unaligned.
std::vector<uint8_t> allPatterns() {
  std::vector<uint8_t> bytes(1 + 2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    std::memcpy(bytes.data() + 1 + 2 * h, &v, 2);
  }
  return bytes;
}

// Floats next to each 16-bit value of the format: the value, the midpoint to the next one, and
// the floats one and two ulps either side of both; then every 4099th float pattern.
std::vector<float> probes(bool half) {
  std::vector<float> values;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = half ? halfToFloat(Half{static_cast<uint16_t>(h)})
                         : bfloat16ToFloat(BFloat16{static_cast<uint16_t>(h)});
    const float next = half ? halfToFloat(Half{static_cast<uint16_t>(h + 1)})
                            : bfloat16ToFloat(BFloat16{static_cast<uint16_t>(h + 1)});
    for (float centre : {v, (h & 0x7fff) < 0x7bff || !half ? v + (next - v) / 2 : v}) {
      const uint32_t bits = floatBits(centre);
      for (int d = -2; d <= 2; ++d) values.push_back(bitsToFloat(bits + d));
    }
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099)
    values.push_back(bitsToFloat(static_cast<uint32_t>(bits)));
  return values;
}

TEST(Convert16Test, WideningEveryPatternMatchesTheScalarConversion) {
  const std::vector<uint8_t> in = allPatterns();
  std::vector<float> half(65536), bf16(65536);
  kernels::widenHalf(half.data(), in.data() + 1, 65536);
  kernels::widenBFloat16(bf16.data(), in.data() + 1, 65536);
  int bad = 0;
  for (uint32_t h = 0; h < 65536 && bad < 5; ++h) {
    const uint32_t wantHalf = floatBits(halfToFloat(Half{static_cast<uint16_t>(h)}));
    const uint32_t wantBf16 = floatBits(bfloat16ToFloat(BFloat16{static_cast<uint16_t>(h)}));
    if (floatBits(half[h]) != wantHalf || floatBits(bf16[h]) != wantBf16) {
      ++bad;
      ADD_FAILURE() << "pattern 0x" << std::hex << h << ": float16 0x" << floatBits(half[h])
                    << " want 0x" << wantHalf << ", bfloat16 0x" << floatBits(bf16[h]) << " want 0x"
                    << wantBf16;
    }
  }
}

TEST(Convert16Test, NarrowingMatchesTheScalarRoundingAroundEveryValueAndMidpoint) {
  const ExactFloatingPoint exact;
  for (bool half : {true, false}) {
    const std::vector<float> in = probes(half);
    std::vector<uint8_t> out(1 + 2 * in.size());
    if (half) {
      kernels::narrowHalf(out.data() + 1, in.data(), in.size());
    } else {
      kernels::narrowBFloat16(out.data() + 1, in.data(), in.size());
    }
    int bad = 0;
    for (size_t i = 0; i < in.size() && bad < 5; ++i) {
      uint16_t got;
      std::memcpy(&got, out.data() + 1 + 2 * i, 2);
      const uint16_t want = half ? floatToHalf(in[i]).bits : floatToBFloat16(in[i]).bits;
      if (got != want) {
        ++bad;
        ADD_FAILURE() << (half ? "float16" : "bfloat16") << " from float 0x" << std::hex
                      << floatBits(in[i]) << ": 0x" << got << " want 0x" << want;
      }
    }
  }
}

}  // namespace
}  // namespace detcoll
