#include "collective/allreduce.h"

#include "collective/comm_exchange.h"
#include "kernels/host_reduce_kernels.h"

namespace detcoll::collective {

Status allreduce(transport::Communicator& comm, const AllreduceOptions& options) {
  kernels::HostReduceKernels kernels;
  CommExchange exchange(comm);
  return allreduceWith(kernels, exchange, options);
}

}  // namespace detcoll::collective
