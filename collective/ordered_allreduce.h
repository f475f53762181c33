#pragma once

#include <cstddef>

#include "collective/communicator.h"

namespace detcoll::collective {

struct OrderedAllreduceOptions {
  // Elements of each shard handled per pipeline round, in bytes of the dtype. Memory held by the
  // algorithm is 2 * size * segmentBytes; the pipeline overlaps round q's fold with round q+1's
  // transfers and round q's allgather.
  size_t segmentBytes = 1 << 20;
};

// The ordered allreduce (DESIGN.md section 1): every element of the result is the rank-order fold
// of kernels/fold.h, identical on every rank, independent of how the buffer is split.
//
// A direct reduce-scatter keeps ring bandwidth: each round of P * segment elements is split into
// P shards; rank j sends its piece of shard s to rank s, and rank s folds the P pieces of its
// shard in rank order (its own piece read in place). Then the reduced shards are allgathered.
// Every rank sends and receives 2(P-1)/P of the buffer, like a ring, in one step instead of P-1.
//
// No argument checks: the callers (collectives.h) have already agreed on the call on all ranks.
// send == recv is in place.
Status orderedAllreduce(Communicator& comm, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op, const OrderedAllreduceOptions& options = {});

}  // namespace detcoll::collective
