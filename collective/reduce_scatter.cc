#include "collective/reduce_scatter.h"

#include "collective/comm_exchange.h"
#include "common/float_env.h"
#include "kernels/host_reduce_kernels.h"

namespace detcoll::collective {

Status reduceScatter(transport::Communicator& comm, const ReduceScatterOptions& options) {
  // The calling thread's flush-to-zero or rounding mode must not reach the reduction.
  ExactFloatingPoint exact;
  kernels::HostReduceKernels kernels;
  CommExchange exchange(comm);
  return reduceScatterWith(kernels, exchange, options);
}

}  // namespace detcoll::collective
