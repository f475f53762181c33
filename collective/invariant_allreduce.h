#pragma once

// The invariant allreduce (DESIGN.md section 1): an exact sum whose bits depend only on the
// multiset of leaves, whatever the world size, rank order, spread of leaves over ranks, buffer
// splitting or algorithm. The codec is kernels/fixed_point.h. Since the result is one function of
// the multiset, two transports give the same bits:
//
// Leaves, when every rank holds one leaf (a plain allreduce): the leaves are reduce-scattered as
// they are, in the dtype, on the pipeline of direct_allreduce.h; the owner of each shard reduces
// its P leaves exactly with kernels::invariantReduceLocal, and the results are allgathered. Bytes
// on the wire are those of the ordered mode, and there is no key pass.
//
// Encodings, when some rank holds several leaves: each rank first sums its leaves exactly, so
// what travels per element is one int64 whatever the number of leaves. The buffer is reduced in
// chunks of one pipeline round (P * segmentBytes of int64), so a chunk's leaves are still in
// cache when they are read the second time; each chunk runs these passes on the pipeline of
// direct_allreduce.h:
//   1. keys: each element's largest exponent over every leaf (reduce-scatter of 1- or 2-byte
//      keys, max, allgather), so every rank knows every element's grid;
//   2. non-finite counts, only when a key says some leaf is inf or NaN (rare; int64 sums);
//   3. sums: each rank encodes and sums its leaves to int64 per round, the owner of a shard adds
//      the P pieces exactly and rounds once to the dtype, and the results are allgathered.
// Min and max are order-independent already: leaves are folded locally, then across ranks.
// Integers skip the keys.

#include <cstddef>
#include <cstdint>

#include "collective/transport/communicator.h"

namespace detcoll::collective {

enum class InvariantTransport {
  kAuto,       // leaves when every rank holds one leaf, else encodings
  kLeaves,     // requires one leaf on every rank (totalLeaves == world size)
  kEncodings,  // any spread
};

// leaves: this rank's nleaves >= 1 buffers of count elements; recv may equal one of them.
// totalLeaves: the number of leaves over all ranks (at most kernels::kMaxLeaves), the divisor of
// average. No argument checks (see collectives.h).
Status invariantAllreduce(Communicator& comm, const void* const* leaves, int nleaves, void* recv,
                          size_t count, DataType type, ReduceOp op, int64_t totalLeaves,
                          size_t segmentBytes = 1 << 20,
                          InvariantTransport transport = InvariantTransport::kAuto);

}  // namespace detcoll::collective
