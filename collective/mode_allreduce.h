#pragma once

// The allreduce of a mode on arguments every rank has already agreed on (by the call agreement,
// or the fusion engine's negotiation), one buffer per rank. Average divides the sum of the
// buffers by `divisor` (the world size when 0 or less; the number of leaves when each buffer is a
// rank's leaves folded together).

#include <cstddef>
#include <cstdint>

#include "collective/ordered_allreduce.h"
#include "collective/transport/communicator.h"

namespace detcoll::collective {

Status modeAllreduce(Communicator& comm, Mode mode, const void* send, void* recv, size_t count,
                     DataType type, ReduceOp op, const OrderedAllreduceOptions& options = {},
                     int64_t divisor = 0);

}  // namespace detcoll::collective
