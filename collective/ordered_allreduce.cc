#include "collective/ordered_allreduce.h"

#include "collective/direct_allreduce.h"
#include "kernels/fold.h"

namespace detcoll::collective {

Status orderedAllreduce(Communicator& comm, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op, const OrderedAllreduceOptions& options,
                        int64_t divisor) {
  DirectAllreduce spec;
  spec.count = count;
  spec.inBytes = spec.outBytes = dataTypeSize(type);
  spec.input = send;
  spec.output = recv;
  spec.segmentBytes = options.segmentBytes;
  if (divisor <= 0) divisor = comm.size();
  spec.fold = [&](void* out, const void* const* pieces, int p, size_t, size_t n) {
    kernels::foldRankOrder(out, pieces, p, n, type, op, divisor);
  };
  return runDirectAllreduce(comm, spec);
}

}  // namespace detcoll::collective
