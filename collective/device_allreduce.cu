#include "collective/device_allreduce.h"

#include "collective/device_pipeline.h"
#include "kernels/device_executor.cuh"

namespace detcoll::collective {

Status deviceAllreduce(DeviceTransport& transport, void* stream, Mode mode,
                       const void* const* leaves, int nleaves, void* recv, size_t count,
                       DataType type, ReduceOp op, int64_t totalLeaves, size_t segmentBytes) {
  kernels::DeviceExecutor e(stream);
  return device_pipeline::allreduce(e, transport, stream, mode, leaves, nleaves, recv, count, type,
                                    op, totalLeaves, segmentBytes);
}

}  // namespace detcoll::collective
