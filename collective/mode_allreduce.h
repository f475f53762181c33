#pragma once

// The allreduce of a mode, on arguments every rank has already agreed on, one buffer (leaf) per
// rank: the fusion engine's negotiation does the agreeing. Average divides by the world size.

#include <cstddef>

#include "collective/communicator.h"
#include "collective/ordered_allreduce.h"

namespace detcoll::collective {

Status modeAllreduce(Communicator& comm, Mode mode, const void* send, void* recv, size_t count,
                     DataType type, ReduceOp op, const OrderedAllreduceOptions& options = {});

}  // namespace detcoll::collective
