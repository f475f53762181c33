#pragma once

// The ring allreduce of NCCL, Gloo and Horovod: a ring reduce-scatter then a ring allgather.
// Chunk c is summed starting at rank c, so the order of each element's sum depends on its offset,
// the buffer length and the world size. The native mode's schedule on backends without an
// allreduce of their own, and in tests the schedule the ordered mode must differ from. Each step
// rounds to the dtype, as NCCL does for float16 and bfloat16.

#include <cstddef>

#include "collective/transport/communicator.h"

namespace detcoll::collective {

struct RingAllreduceOptions {
  const void* send = nullptr;  // may equal recv (in place)
  void* recv = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // average divides the sum by the world size
};

// The same call on every rank. No argument checks (see call_checks.h).
Status ringAllreduce(transport::Communicator& comm, const RingAllreduceOptions& options);

}  // namespace detcoll::collective
