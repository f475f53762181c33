#include "collective/allreduce.h"

#include "collective/comm_exchange.h"
#include "common/float_env.h"
#include "kernels/host_reduce_kernels.h"

namespace detcoll::collective {

Status allreduce(transport::Communicator& comm, const AllreduceOptions& options) {
  // The calling thread's flush-to-zero or rounding mode must not reach the reduction.
  ExactFloatingPoint exact;
  kernels::HostReduceKernels kernels;
  CommExchange exchange(comm);
  AllreduceOptions o = options;
  if (o.wholeExchangeBytes == kWholeExchangeAuto) {
    o.wholeExchangeBytes = modes::hostWholeExchangeLimit(o.mode, o.type);
  }
  return allreduceWith(kernels, exchange, o);
}

}  // namespace detcoll::collective
