#pragma once

#include "collective/communicator.h"

namespace detcoll::collective {

// The ring allreduce of NCCL, Gloo and Horovod: a ring reduce-scatter then a ring allgather.
// Chunk c is summed starting at rank c, so the order of each element's sum depends on its
// offset, the buffer length and the world size. Used as the native fallback of backends that
// have no allreduce of their own, and in tests as the schedule the ordered mode must differ from.
// Each step rounds to the dtype, as NCCL does for float16 and bfloat16.
Status ringAllreduce(Communicator& comm, const void* send, void* recv, size_t count, DataType type,
                     ReduceOp op);

}  // namespace detcoll::collective
