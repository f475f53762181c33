#pragma once

// The fixed-point codec of the invariant mode (docs/design.md, "The invariant mode").
//
// Each element has its own scale (blocks of one element): its key is the largest biased exponent
// of that element over every leaf on every rank, agreed by an exact max-reduction. Every leaf
// value is rounded once (to nearest even) to an integer multiple of 2^(key - bias + 1 - 62 + H),
// which bounds every encoded magnitude by 2^(62 - H). The integers of up to 2^H leaves then sum
// exactly in int64, in any order and any grouping, and the exact sum is rounded once to the dtype
// (after an exact division by the number of leaves for average). The result therefore depends
// only on the multiset of leaves: not on world size, rank order, how leaves are spread over ranks,
// how buffers are split or fused, or the algorithm.
//
// Precision: a leaf within 62 - H - 1 - m bits of the element's largest leaf (m explicit
// mantissa bits) is encoded exactly: all of float16, bfloat16 and float32's 24 bits when within
// 22 binades of the largest leaf; float64 keeps 46 bits below the largest leaf's exponent, not
// its full 53. Each leaf's encoding error is at most half a grid step, so
//   |result - exact| <= 0.5 ulp(result) + nleaves * 2^(e_max - 46)
// with e_max the exponent of the element's largest leaf (before the division for average).
//
// Non-finite values: an element with any NaN, or with both +inf and -inf, gives NaN (canonical);
// with +inf (or -inf) only, +inf (-inf). A finite exact sum beyond the dtype's range gives +-inf.
// An exact zero is +0. The non-finite leaves travel as counts inside the same int64 sums
// (codec::kCountBits), on every executor.
//
// Integer dtypes need no scale: leaves are summed exactly in int64 (int64 sums wrap); int32 sums
// wrap to int32 at the end; average is the exact sum divided by the number of leaves, truncated
// toward zero.

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "kernels/codec.h"

namespace detcoll::kernels {

// H: headroom bits; the sum of up to 2^H leaves cannot overflow.
constexpr int kHeadroomBits = codec::kHeadroomBits;
constexpr int64_t kMaxLeaves = int64_t{1} << kHeadroomBits;

// Bytes of one element's key: 1 for float32, float16, bfloat16; 2 for float64; 0 for integers.
size_t exponentKeyBytes(DataType type);
// The key marking an element that has a non-finite leaf somewhere.
uint32_t nonFiniteKey(DataType type);

// keys[i] = max over the leaves of the key of leaves[l][begin + i] (its biased exponent, at least
// 1 for nonzero values, 0 for zero, nonFiniteKey for inf and NaN), for i < n.
void localMaxKeys(void* keys, const void* const* leaves, int nleaves, size_t begin, size_t n,
                  DataType type);
// out[i] = max over p key arrays; out may alias pieces[j].
void foldMaxKeys(void* out, const void* const* pieces, int p, size_t n, DataType type);

// out[i] = sum over the leaves of what each adds on the grid of keys[i] (keys indexed from `begin`
// as well: keys points at element `begin`'s key): its encoding, or, where the key is the
// non-finite key, its count in the fields of codec::kCountBits (codec.h). For integer dtypes keys
// is unused and the values are summed, wrapping.
void encodeLeaves(int64_t* out, const void* const* leaves, int nleaves, const void* keys,
                  size_t begin, size_t n, DataType type);

// out[i] (dtype) = the exact sum of pieces[0..p)[i], divided by `leaves` for average, rounded
// once; where the key is the non-finite key, the non-finite result of the summed counts. keys
// point at the same elements.
void decodeSums(void* out, const int64_t* const* pieces, int p, const void* keys, size_t n,
                DataType type, ReduceOp op, int64_t leaves);

// The whole invariant reduction of leaves held in one process: what every rank computes on the
// inline path. out may alias a leaf.
void invariantReduceLocal(void* out, const void* const* leaves, int nleaves, size_t count,
                          DataType type, ReduceOp op);

// Rounds magnitude * 2^exponent (exact, plus a sticky bit for discarded nonzero bits below it)
// once, to nearest even, to the float dtype's bits (returned in the low bits). Exposed for tests.
uint64_t roundToFloatBits(bool negative, unsigned __int128 magnitude, int exponent, bool sticky,
                          DataType type);

}  // namespace detcoll::kernels
