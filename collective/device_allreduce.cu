#include "collective/device_allreduce.h"

#include "kernels/bodies/reduce_kernels.h"
#include "kernels/device_executor.cuh"

namespace detcoll::collective {

Status deviceAllreduce(transport::Exchange& exchange, void* stream,
                       const AllreduceOptions& options) {
  kernels::DeviceExecutor e(stream);
  kernels::bodies::ReduceKernels<kernels::DeviceExecutor> kernels(e);
  return allreduceWith(kernels, exchange, options);
}

}  // namespace detcoll::collective
