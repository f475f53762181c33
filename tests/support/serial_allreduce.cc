#include "tests/support/serial_allreduce.h"

#include "kernels/bodies/reduce_kernels.h"
#include "tests/support/serial_executor.h"

namespace detcoll::testing {

Status serialAllreduce(collective::transport::Exchange& exchange,
                       const collective::AllreduceOptions& options) {
  SerialExecutor e;
  kernels::bodies::ReduceKernels<SerialExecutor> kernels(e);
  return collective::allreduceWith(kernels, exchange, options);
}

}  // namespace detcoll::testing
