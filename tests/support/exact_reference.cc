#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"

// Written independently of kernels/fixed_point.cc: values are decoded with the compiler's float,
// double and _Float16 (bfloat16 as the top half of a float), the grid comes from MPFR's exponent
// of each leaf, leaves are rounded to the grid with mpfr_rint (ties to even), summed exactly, and
// the sum is rounded once to the dtype by MPFR in the dtype's exponent range (mpfr_check_range and
// mpfr_subnormalize, which use the ternary value so the rounding to a subnormal is not a double
// rounding).

#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace detcoll::testing {
namespace {

// H of docs/design.md ("The invariant mode"): the grid of an element is 2^(e + 1 - 62 + H), e the
// largest leaf's exponent.
constexpr int kHeadroom = 16;
constexpr int kGridBits = 62 - kHeadroom;  // 46

struct Format {
  int precision;  // significand bits, the implicit one included
  int minNormal;  // smallest normal exponent (unbiased)
  int maxNormal;  // largest exponent
};

Format formatOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return {24, -126, 127};
    case DataType::kFloat64:
      return {53, -1022, 1023};
    case DataType::kFloat16:
      return {11, -14, 15};
    case DataType::kBFloat16:
      return {8, -126, 127};
    default:
      throw std::invalid_argument("exact reference: not a float dtype");
  }
}

bool isFloat(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

void storeBits(void* out, size_t i, DataType type, uint64_t bits) {
  char* p = static_cast<char*>(out) + i * dataTypeSize(type);
  switch (dataTypeSize(type)) {
    case 2: {
      const uint16_t v = static_cast<uint16_t>(bits);
      std::memcpy(p, &v, 2);
      return;
    }
    case 4: {
      const uint32_t v = static_cast<uint32_t>(bits);
      std::memcpy(p, &v, 4);
      return;
    }
    default:
      std::memcpy(p, &bits, 8);
  }
}

uint64_t canonicalNaN(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 0x7fc00000u;
    case DataType::kFloat64:
      return 0x7ff8000000000000ull;
    case DataType::kFloat16:
      return 0x7e00u;
    default:
      return 0x7fc0u;
  }
}

uint64_t infinityBits(DataType type, bool negative) {
  switch (type) {
    case DataType::kFloat32:
      return negative ? 0xff800000u : 0x7f800000u;
    case DataType::kFloat64:
      return negative ? 0xfff0000000000000ull : 0x7ff0000000000000ull;
    case DataType::kFloat16:
      return negative ? 0xfc00u : 0x7c00u;
    default:
      return negative ? 0xff80u : 0x7f80u;
  }
}

// Bits of a value that is exactly representable in the dtype (zero and infinities included).
uint64_t exactBits(mpfr_srcptr x, DataType type) {
  if (type == DataType::kFloat64) {
    const double d = mpfr_get_d(x, MPFR_RNDN);
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    return bits;
  }
  const float f = mpfr_get_flt(x, MPFR_RNDN);  // exact: float holds every float16 and bfloat16
  if (type == DataType::kFloat16) {
    const _Float16 h = static_cast<_Float16>(f);  // exact
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (type == DataType::kBFloat16) {
    if ((u & 0xffffu) != 0) throw std::logic_error("exact reference: not a bfloat16 value");
    return u >> 16;
  }
  return u;
}

// The exact value `exact / divisor` rounded once, to nearest even, to the dtype: subnormals,
// underflow and overflow to infinity included. exact must be nonzero and finite.
uint64_t roundOnce(mpfr_srcptr exact, int64_t divisor, DataType type) {
  const Format f = formatOf(type);
  mpfr_t r;
  mpfr_init2(r, f.precision);
  // In MPFR's (unbounded, here) exponent range: the correctly rounded p-bit value and its
  // ternary value.
  int t = divisor > 1 ? mpfr_div_si(r, exact, static_cast<long>(divisor), MPFR_RNDN)
                      : mpfr_set(r, exact, MPFR_RNDN);
  // Then the dtype's range. MPFR's significands lie in [1/2, 1): the smallest subnormal
  // 2^(minNormal - p + 1) has MPFR exponent minNormal - p + 2, the largest finite value
  // maxNormal + 1.
  const mpfr_exp_t oldMin = mpfr_get_emin();
  const mpfr_exp_t oldMax = mpfr_get_emax();
  mpfr_set_emin(f.minNormal - f.precision + 2);
  mpfr_set_emax(f.maxNormal + 1);
  t = mpfr_check_range(r, t, MPFR_RNDN);
  t = mpfr_subnormalize(r, t, MPFR_RNDN);
  mpfr_set_emin(oldMin);
  mpfr_set_emax(oldMax);
  const uint64_t bits = exactBits(r, type);
  mpfr_clear(r);
  return bits;
}

// Non-finite leaves of one element: returns true and sets *bits when there is one.
bool nonFinite(const std::vector<const void*>& leaves, size_t i, DataType type, uint64_t* bits) {
  bool nan = false, positive = false, negative = false;
  for (const void* leaf : leaves) {
    const double v = elementAsDouble(leaf, i, type);
    if (std::isnan(v)) nan = true;
    if (std::isinf(v)) (v > 0 ? positive : negative) = true;
  }
  if (nan || (positive && negative)) {
    *bits = canonicalNaN(type);
    return true;
  }
  if (positive || negative) {
    *bits = infinityBits(type, negative);
    return true;
  }
  return false;
}

// Min and max: NaN if any leaf is NaN, -0 below +0; the chosen leaf's bits. Order-independent.
void minMax(void* out, const std::vector<const void*>& leaves, size_t count, DataType type,
            ReduceOp op) {
  const size_t es = dataTypeSize(type);
  const bool isMin = op == ReduceOp::kMin;
  for (size_t i = 0; i < count; ++i) {
    size_t best = 0;
    if (isFloat(type)) {
      uint64_t bits;
      bool anyNaN = false;
      for (const void* leaf : leaves) anyNaN = anyNaN || std::isnan(elementAsDouble(leaf, i, type));
      if (anyNaN) {
        bits = canonicalNaN(type);
        storeBits(out, i, type, bits);
        continue;
      }
      for (size_t l = 1; l < leaves.size(); ++l) {
        const double a = elementAsDouble(leaves[best], i, type);
        const double b = elementAsDouble(leaves[l], i, type);
        bool better = isMin ? b < a : b > a;
        if (a == b)
          better =
              isMin ? (std::signbit(b) && !std::signbit(a)) : (!std::signbit(b) && std::signbit(a));
        if (better) best = l;
      }
    } else {
      auto load = [&](size_t l) {
        const char* p = static_cast<const char*>(leaves[l]) + i * es;
        if (type == DataType::kInt32) {
          int32_t v;
          std::memcpy(&v, p, 4);
          return static_cast<int64_t>(v);
        }
        int64_t v;
        std::memcpy(&v, p, 8);
        return v;
      };
      for (size_t l = 1; l < leaves.size(); ++l) {
        if (isMin ? load(l) < load(best) : load(l) > load(best)) best = l;
      }
    }
    std::memcpy(static_cast<char*>(out) + i * es, static_cast<const char*>(leaves[best]) + i * es,
                es);
  }
}

// Integers: the sum in int64 with two's complement wrapping (exact for int32: at most 2^16 leaves
// of 32 bits), average truncated toward zero, int32 wrapped at the end.
void integers(void* out, const std::vector<const void*>& leaves, size_t count, DataType type,
              ReduceOp op) {
  const size_t es = dataTypeSize(type);
  for (size_t i = 0; i < count; ++i) {
    uint64_t sum = 0;
    for (const void* leaf : leaves) {
      const char* p = static_cast<const char*>(leaf) + i * es;
      if (type == DataType::kInt32) {
        int32_t v;
        std::memcpy(&v, p, 4);
        sum += static_cast<uint64_t>(static_cast<int64_t>(v));
      } else {
        int64_t v;
        std::memcpy(&v, p, 8);
        sum += static_cast<uint64_t>(v);
      }
    }
    int64_t result = static_cast<int64_t>(sum);
    if (op == ReduceOp::kAverage) result /= static_cast<int64_t>(leaves.size());  // truncates
    if (type == DataType::kInt32) {
      const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(result));
      std::memcpy(static_cast<char*>(out) + i * 4, &v, 4);
    } else {
      std::memcpy(static_cast<char*>(out) + i * 8, &result, 8);
    }
  }
}

// Both entry points share everything but the grid.
void reduceExactly(void* out, const std::vector<const void*>& leaves, size_t count, DataType type,
                   ReduceOp op, bool grid) {
  if (leaves.empty()) throw std::invalid_argument("exact reference: no leaves");
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) return minMax(out, leaves, count, type, op);
  if (!isFloat(type)) {
    if (!grid) throw std::invalid_argument("exactSumRounded: float dtypes only");
    return integers(out, leaves, count, type, op);
  }
  const Format f = formatOf(type);
  const int64_t divisor = op == ReduceOp::kAverage ? static_cast<int64_t>(leaves.size()) : 1;
  // Without a grid the exact sum spans every binade of the dtype plus the carries of 2^16
  // leaves; with the grid every rounded leaf is an integer below 2^47 and the sum below 2^63.
  const mpfr_prec_t sumPrecision =
      grid ? 128 : (f.maxNormal - f.minNormal + f.precision + 2 * kHeadroom + 8);
  mpfr_t value, sum;
  mpfr_init2(value, 64);
  mpfr_init2(sum, sumPrecision);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits;
    if (nonFinite(leaves, i, type, &bits)) {
      storeBits(out, i, type, bits);
      continue;
    }
    // The grid: 2^(e + 1 - 46), e the unbiased exponent of the largest leaf, at least the smallest
    // normal exponent. MPFR's exponent of x is e + 1 (significand in [1/2, 1)).
    bool anyNonzero = false;
    long e = f.minNormal;
    for (const void* leaf : leaves) {
      const double v = elementAsDouble(leaf, i, type);
      if (v == 0) continue;
      anyNonzero = true;
      mpfr_set_d(value, v, MPFR_RNDN);  // exact
      e = std::max<long>(e, static_cast<long>(mpfr_get_exp(value)) - 1);
    }
    if (!anyNonzero) {
      storeBits(out, i, type, 0);  // +0
      continue;
    }
    const long gridExponent = e + 1 - kGridBits;
    mpfr_set_zero(sum, 1);
    for (const void* leaf : leaves) {
      const double v = elementAsDouble(leaf, i, type);
      int inexact = mpfr_set_d(value, v, MPFR_RNDN);
      if (grid) {
        inexact |= mpfr_mul_2si(value, value, -gridExponent, MPFR_RNDN);  // exact
        mpfr_rint(value, value, MPFR_RNDN);  // to the grid, ties to even
      }
      inexact |= mpfr_add(sum, sum, value, MPFR_RNDN);
      if (inexact != 0) throw std::logic_error("exact reference: an exact step was inexact");
    }
    if (grid && mpfr_mul_2si(sum, sum, gridExponent, MPFR_RNDN) != 0) {
      throw std::logic_error("exact reference: scaling was inexact");
    }
    if (mpfr_zero_p(sum)) {
      storeBits(out, i, type, 0);  // an exact zero is +0
      continue;
    }
    storeBits(out, i, type, roundOnce(sum, divisor, type));
  }
  mpfr_clear(value);
  mpfr_clear(sum);
}

}  // namespace

void exactInvariantReference(void* out, const std::vector<const void*>& leaves, size_t count,
                             DataType type, ReduceOp op) {
  reduceExactly(out, leaves, count, type, op, true);
}

void exactSumRounded(void* out, const std::vector<const void*>& leaves, size_t count, DataType type,
                     ReduceOp op) {
  reduceExactly(out, leaves, count, type, op, false);
}

}  // namespace detcoll::testing
