#pragma once

// The CPU references of the invariant codec's bodies (kernels/bodies/reduce.h: their serial runs
// in tests/unit/reduce_serial_test.cc, the GPU kernels in tests/gpu/reduce_gpu_test.cc), from the
// CPU kernels of kernels/fixed_point.h: the exponent keys of a set of leaves, a group's encoding
// (the non-finite counts packed where the key is the non-finite key, checked here against counts
// of the values), and the decoded sum of groups' encodings.
// Header-only, without MPI or MPFR (see tests/support/wide_bits.h).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/fixed_point.h"
#include "tests/support/reference.h"
#include "tests/support/wide_bits.h"

namespace detcoll::testing {

// Bits of each of the +inf, -inf and NaN counts in a packed element, from the low bits (the
// codec's kCountBits, written here rather than taken from it).
constexpr int kNonFiniteCountBits = 21;

// The CPU keys of all leaves (a 1-byte placeholder for integers, which have none).
inline Buffer cpuKeys(const std::vector<Buffer>& leaves, size_t count, DataType type) {
  const size_t kb = kernels::exponentKeyBytes(type);
  Buffer keys(std::max<size_t>(count * kb, 1));
  if (kb > 0) {
    kernels::localMaxKeys(keys.data(), pointersOf(leaves).data(), static_cast<int>(leaves.size()),
                          0, count, type);
  }
  return keys;
}

// What the encoding of `group` on `keys` must be: the CPU encoding, in which, where the key is the
// non-finite key, the element holds the group's +inf, -inf and NaN counts, packed. The counts are
// checked here against a count of the group's values made in this file. Adds the number of such
// elements to *specialElements.
inline std::vector<int64_t> expectedEncoding(const std::vector<Buffer>& group, const Buffer& keys,
                                             size_t count, DataType type, size_t* specialElements) {
  std::vector<int64_t> want(count + 1);  // never empty: the CPU kernel writes through data()
  const int n = static_cast<int>(group.size());
  kernels::encodeLeaves(want.data(), pointersOf(group).data(), n, keys.data(), 0, count, type);
  want.resize(count);
  if (!isFloatType(type)) return want;
  const size_t kb = kernels::exponentKeyBytes(type);
  const uint32_t special = kernels::nonFiniteKey(type);
  for (size_t i = 0; i < count; ++i) {
    if (keyAt(keys.data(), i, kb) != special) continue;
    int64_t counts[3] = {0, 0, 0};  // +inf, -inf, NaN
    for (const Buffer& leaf : group) {
      const double v = elementAsDouble(leaf.data(), i, type);
      if (std::isnan(v)) {
        ++counts[2];
      } else if (std::isinf(v)) {
        ++counts[v > 0 ? 0 : 1];
      }
    }
    EXPECT_EQ(want[i], counts[0] | (counts[1] << kNonFiniteCountBits) |
                           (counts[2] << (2 * kNonFiniteCountBits)))
        << "the packed non-finite counts of element " << i;
    ++*specialElements;
  }
  return want;
}

// The CPU reference of decoding p = cuts.size() - 1 pieces, piece j the encoding of the leaves
// [cuts[j], cuts[j + 1]) of `all` on `keys`, as op with the divisor all.size().
inline Buffer decodedReference(const std::vector<Buffer>& all, const std::vector<int>& cuts,
                               const Buffer& keys, size_t count, DataType type, ReduceOp op) {
  const std::vector<const void*> leaves = pointersOf(all);
  const int p = static_cast<int>(cuts.size()) - 1;
  const int total = static_cast<int>(all.size());
  std::vector<std::vector<int64_t>> pieces(p, std::vector<int64_t>(count + 1));
  std::vector<const int64_t*> piecePointers;
  for (int j = 0; j < p; ++j) {
    kernels::encodeLeaves(pieces[j].data(), leaves.data() + cuts[j], cuts[j + 1] - cuts[j],
                          keys.data(), 0, count, type);
    piecePointers.push_back(pieces[j].data());
  }
  Buffer want(count * dataTypeSize(type));
  kernels::decodeSums(want.data(), piecePointers.data(), p, keys.data(), count, type, op, total);
  return want;
}

}  // namespace detcoll::testing
