#include "kernels/fixed_point_formats.h"  // reduceFewLeaves

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "kernels/convert16.h"
#include "kernels/format_bits.h"
#include "kernels/simd.h"
#include "kernels/unaligned.h"

// The invariant reduction of a few leaves in one pass (docs/design.md, "The invariant mode"): the
// block paths (kernels/fixed_point.cc, kernels/fixed_point_formats.cc) make a pass over their
// scratch for each step (keys, each leaf's encodings, the rounding); with the number of leaves
// known at compile time, one loop does every step of an element in registers. This is the
// reduction of every shard when each rank holds one leaf: at P ranks, P leaves.
//
// The values are the block paths': the key is the largest exponent field (at least 1), each leaf
// is rounded onto its element's grid (below: with no scaling), at most kFewLeaves of them sum
// exactly in double, and the sum, times a power-of-two divisor's reciprocal, rounds once to the
// dtype. Non-finite leaves need no count here: they round to themselves (inf or NaN), so the
// double sum is NaN where a leaf is NaN or both infinities meet and the infinity otherwise, the
// rule of codec::nonFiniteBits; a NaN result is replaced by the canonical NaN. Averages over
// other divisors are left to the block paths, which settle their double rounding.

namespace detcoll::kernels::formats {
namespace {

constexpr size_t kBlock = 256;  // elements staged on the stack at a time

// out's elements [0, n) = element(i), staged in blocks on the stack: the output may alias a leaf,
// and a loop that stores to it directly would not vectorize.
template <typename Bits, typename Element>
DETCOLL_FORCE_INLINE void staged(void* out, size_t n, Element element) {
  alignas(64) Bits result[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) result[i] = element(base + i);
    std::memcpy(static_cast<char*>(out) + sizeof(Bits) * base, result, sizeof(Bits) * m);
  }
}

// A leaf x rounds onto its element's grid of unit g, to nearest even, as (x + M) - M with M =
// 1.5 * 2^52 * g: |x| < 2^51 g, so x + M lies in M's binade, whose last bit is g, and M / g is
// even, so the tie goes where round(x / g) puts it. The rounded leaves are multiples of g of at
// most 2^46 g, and up to kFewLeaves of them sum exactly in double. No scaling is needed: the sum is
// the exact grid sum itself.

// float32, bfloat16 and float16, on float32's grid of the widened values (kernels/fixed_point.cc
// and sum16Body say why a 16-bit leaf's encoding is the codec's there): g = 2^(key - 172), so M =
// 1.5 * 2^(key - 120). The sum (times a power-of-two divisor's exact reciprocal) rounds once to the
// dtype.
template <typename F, int K>
DETCOLL_FORCE_INLINE void fewBody32(void* out, const void* const* x, size_t n, double reciprocal) {
  using Bits = typename F::Bits;
  staged<Bits>(out, n, [&](size_t i) -> Bits {
    uint32_t w[K];
    uint32_t magnitude = 0;
    for (int l = 0; l < K; ++l) {
      w[l] = widenedBits<F>(x[l], i);
      const uint32_t a = w[l] & 0x7fffffffu;
      magnitude = a > magnitude ? a : magnitude;
    }
    const uint64_t exponent = magnitude >> 23;
    const uint64_t key = exponent > 1 ? exponent : 1;
    const double magic = doubleFromBits(((key + 1023 - 120) << 52) | (uint64_t{1} << 51));
    double sum = 0;
    for (int l = 0; l < K; ++l) sum += (static_cast<double>(bitsToFloat(w[l])) + magic) - magic;
    const double v = sum * reciprocal;
    if constexpr (std::is_same_v<F, Float32>) {
      const uint32_t bits = floatBits(static_cast<float>(v));
      const uint32_t isNaN = -static_cast<uint32_t>((bits & 0x7fffffffu) > 0x7f800000u);
      return (bits & ~isNaN) | (0x7fc00000u & isNaN);
    } else {
      // roundDouble knows finite values; a non-finite key's sum is inf or NaN.
      const uint64_t vb = static_cast<uint64_t>(bitsFromDouble(v));
      const uint64_t isNaN =
          -static_cast<uint64_t>((vb & 0x7fffffffffffffffu) > 0x7ff0000000000000u);
      const uint64_t infinity = (F::kSpecial << F::kM) | ((vb >> 63) << (F::kM + F::kE));
      const uint64_t nan = (F::kSpecial << F::kM) | (uint64_t{1} << (F::kM - 1));
      const uint64_t special = (infinity & ~isNaN) | (nan & isNaN);
      const uint64_t isSpecial = -static_cast<uint64_t>(key == 255);
      return static_cast<Bits>((roundDouble<F>(v) & ~isSpecial) | (special & isSpecial));
    }
  });
}

// float64: g = 2^(key - 1068), so M = 1.5 * 2^(key - 1016), past double's range for keys above
// 2039. Elements with keys above 2000 have their leaves scaled by 2^-128 first (exact, or, for a
// leaf so small that it underflows, still far below g / 2, where it rounds to 0 all the same) and
// the sum back by 2^128. The grid sum has at most 49 significant bits, a multiple of g >= 2^-1067:
// the sum is exact and is the result, and so is its quotient by at most 8 (a multiple of
// 2^-1070, still a double).
template <int K>
DETCOLL_FORCE_INLINE void fewBody64(void* out, const void* const* x, size_t n, double reciprocal) {
  staged<uint64_t>(out, n, [&](size_t i) {
    uint64_t b[K];
    uint64_t exponent = 0;
    for (int l = 0; l < K; ++l) {
      b[l] = loadAt<uint64_t>(x[l], i);
      const uint64_t e = (b[l] >> 52) & 0x7ffu;
      exponent = e > exponent ? e : exponent;
    }
    const uint64_t key = exponent > 1 ? exponent : 1;
    const bool high = key > 2000;
    const double down = doubleFromBits(static_cast<uint64_t>(high ? 1023 - 128 : 1023) << 52);
    const double up = doubleFromBits(static_cast<uint64_t>(high ? 1023 + 128 : 1023) << 52);
    const uint64_t magicExponent = key + 1023 - 1016 - (high ? 128 : 0);
    const double magic = doubleFromBits((magicExponent << 52) | (uint64_t{1} << 51));
    double sum = 0;
    for (int l = 0; l < K; ++l) sum += (doubleFromBits(b[l]) * down + magic) - magic;
    const uint64_t bits = static_cast<uint64_t>(bitsFromDouble((sum * reciprocal) * up));
    const uint64_t isNaN =
        -static_cast<uint64_t>((bits & 0x7fffffffffffffffu) > 0x7ff0000000000000u);
    return (bits & ~isNaN) | (0x7ff8000000000000u & isNaN);
  });
}

// One function per format, compiled for each vector width, with every count of leaves inlined.
#define DETCOLL_FEW_LEAVES(name, body)                                              \
  DETCOLL_VECTOR_CLONES void name(void* out, const void* const* x, int k, size_t n, \
                                  double reciprocal) {                              \
    switch (k) {                                                                    \
      case 1:                                                                       \
        return body<1>(out, x, n, reciprocal);                                      \
      case 2:                                                                       \
        return body<2>(out, x, n, reciprocal);                                      \
      case 3:                                                                       \
        return body<3>(out, x, n, reciprocal);                                      \
      case 4:                                                                       \
        return body<4>(out, x, n, reciprocal);                                      \
      case 5:                                                                       \
        return body<5>(out, x, n, reciprocal);                                      \
      case 6:                                                                       \
        return body<6>(out, x, n, reciprocal);                                      \
      case 7:                                                                       \
        return body<7>(out, x, n, reciprocal);                                      \
      default:                                                                      \
        return body<8>(out, x, n, reciprocal);                                      \
    }                                                                               \
  }
template <int K>
DETCOLL_FORCE_INLINE void float32Body(void* out, const void* const* x, size_t n, double d) {
  fewBody32<Float32, K>(out, x, n, d);
}
template <int K>
DETCOLL_FORCE_INLINE void bfloat16Body(void* out, const void* const* x, size_t n, double d) {
  fewBody32<BFloat16, K>(out, x, n, d);
}
template <int K>
DETCOLL_FORCE_INLINE void float16Body(void* out, const void* const* x, size_t n, double d) {
  fewBody32<Float16, K>(out, x, n, d);
}
DETCOLL_FEW_LEAVES(fewFloat32, float32Body)
DETCOLL_FEW_LEAVES(fewBFloat16, bfloat16Body)
DETCOLL_FEW_LEAVES(fewFloat16, float16Body)
DETCOLL_FEW_LEAVES(fewFloat64, fewBody64)
#undef DETCOLL_FEW_LEAVES

}  // namespace

bool reduceFewLeaves(void* out, const void* const* leaves, int nleaves, size_t count, DataType type,
                     ReduceOp op) {
  const bool average = op == ReduceOp::kAverage;
  if (nleaves < 1 || nleaves > kFewLeaves || !(op == ReduceOp::kSum || average)) return false;
  // Average over a power of two of leaves only: a multiplication by its exact reciprocal.
  if (average && (nleaves & (nleaves - 1)) != 0) return false;
  const double reciprocal = average ? 1.0 / nleaves : 1.0;  // exact
  switch (type) {
    case DataType::kFloat32:
      fewFloat32(out, leaves, nleaves, count, reciprocal);
      return true;
    case DataType::kBFloat16:
      fewBFloat16(out, leaves, nleaves, count, reciprocal);
      return true;
    case DataType::kFloat16:
      fewFloat16(out, leaves, nleaves, count, reciprocal);
      return true;
    case DataType::kFloat64:
      fewFloat64(out, leaves, nleaves, count, reciprocal);
      return true;
    default:
      return false;
  }
}

}  // namespace detcoll::kernels::formats
