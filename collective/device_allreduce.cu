#include "collective/device_allreduce.h"

#include "kernels/bodies/reduce_kernels.h"
#include "kernels/device_executor.cuh"

namespace detcoll::collective {

Status deviceAllreduce(transport::Exchange& exchange, void* stream,
                       const AllreduceOptions& options) {
  kernels::DeviceExecutor e(stream);
  kernels::bodies::ReduceKernels<kernels::DeviceExecutor> kernels(e);
  // The whole exchange's limits were measured on the host; on the device every call runs the
  // schedule.
  AllreduceOptions o = options;
  if (o.wholeExchangeBytes == kWholeExchangeAuto) o.wholeExchangeBytes = 0;
  return allreduceWith(kernels, exchange, o);
}

}  // namespace detcoll::collective
