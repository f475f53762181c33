#pragma once

// Inputs for the op tests: wide-range random values of any dtype (reference.h's randomBuffer)
// and random indices, many of them repeated; and the comparison of two results' bits.

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/half.h"
#include "tests/support/reference.h"

namespace detcoll::testing {

inline std::vector<uint8_t> opValues(DataType type, int64_t n, uint64_t seed) {
  return randomBuffer(type, static_cast<size_t>(n), seed);
}

// Wide-range, non-integer float32 values, seeded from g.
inline std::vector<float> wideFloats(size_t n, std::mt19937_64& g) {
  const std::vector<uint8_t> bytes = randomBuffer(DataType::kFloat32, n, g());
  std::vector<float> v(n);
  if (n > 0) std::memcpy(v.data(), bytes.data(), n * sizeof(float));  // no null pointers at 0
  return v;
}

// Each value in the dtype: rounded (through float for float16 and bfloat16), or converted to the
// integer (which must hold it).
inline std::vector<uint8_t> fromDoubles(const std::vector<double>& x, DataType t) {
  std::vector<uint8_t> out(x.size() * dataTypeSize(t));
  for (size_t i = 0; i < x.size(); ++i) {
    const float f = static_cast<float>(x[i]);
    const Half h = floatToHalf(f);
    const BFloat16 b = floatToBFloat16(f);
    const int64_t l = isFloatingPoint(t) ? 0 : static_cast<int64_t>(x[i]);
    const int32_t w = static_cast<int32_t>(l);
    const void* from = t == DataType::kFloat64   ? static_cast<const void*>(&x[i])
                       : t == DataType::kFloat32 ? static_cast<const void*>(&f)
                       : t == DataType::kFloat16 ? static_cast<const void*>(&h)
                       : t == DataType::kInt64   ? static_cast<const void*>(&l)
                       : t == DataType::kInt32   ? static_cast<const void*>(&w)
                                                 : static_cast<const void*>(&b);
    std::memcpy(out.data() + i * dataTypeSize(t), from, dataTypeSize(t));
  }
  return out;
}

// n indices drawn uniformly from [lo, hi).
inline std::vector<int64_t> opIndices(int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> pick(lo, hi - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = pick(g);
  return v;
}

// "" when a and b hold the same bits; otherwise the first element that differs, as
// "element i is <a's> in <aName> and <b's> in <bName>" (or the sizes, when they differ).
inline std::string bitsDiffer(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                              DataType type, const char* aName, const char* bName) {
  if (a.size() != b.size()) {
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + " bytes";
  }
  const long at = firstDifference(a.data(), b.data(), a.size() / dataTypeSize(type), type);
  if (at < 0) return "";
  return dataTypeName(type) + " element " + std::to_string(at) + " is " +
         describeElement(a.data(), at, type) + " in " + aName + " and " +
         describeElement(b.data(), at, type) + " in " + bName;
}

}  // namespace detcoll::testing
