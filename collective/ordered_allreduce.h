#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/transport/communicator.h"

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
// It runs on the direct reduce-scatter + allgather pipeline of direct_allreduce.h, which keeps ring
// bandwidth; the owner of each shard folds the P pieces in rank order.
//
// No argument checks: the callers (collectives.h) have already agreed on the call on all ranks.
// send == recv is in place. Average divides by `divisor` (the world size when 0 or less; the
// number of leaves when ranks contribute several).
Status orderedAllreduce(Communicator& comm, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op, const OrderedAllreduceOptions& options = {},
                        int64_t divisor = 0);

}  // namespace detcoll::collective
