#pragma once

// Inputs for the op tests: wide-range random values of any dtype (reference.h's randomBuffer)
// and random indices, many of them repeated.

#include <cstdint>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "tests/support/reference.h"

namespace detcoll::testing {

inline std::vector<uint8_t> opValues(DataType type, int64_t n, uint64_t seed) {
  return randomBuffer(type, static_cast<size_t>(n), seed);
}

// n indices drawn uniformly from [lo, hi).
inline std::vector<int64_t> opIndices(int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> pick(lo, hi - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = pick(g);
  return v;
}

}  // namespace detcoll::testing
