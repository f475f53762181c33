#include "tests/support/serial_allreduce.h"

#include "kernels/bodies/reduce_kernels.h"
#include "tests/support/serial_executor.h"

namespace detcoll::testing {

Status serialAllreduce(collective::transport::Exchange& exchange,
                       const collective::AllreduceOptions& options) {
  SerialExecutor e;
  kernels::bodies::ReduceKernels<SerialExecutor> kernels(e);
  // The device's route: deviceAllreduce keeps the schedule at every size.
  collective::AllreduceOptions o = options;
  if (o.wholeExchangeBytes == collective::kWholeExchangeAuto) o.wholeExchangeBytes = 0;
  return collective::allreduceWith(kernels, exchange, o);
}

}  // namespace detcoll::testing
