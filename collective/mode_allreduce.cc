#include "collective/mode_allreduce.h"

#include <string>

#include "collective/invariant_allreduce.h"
#include "collective/ring_allreduce.h"
#include "kernels/fold.h"

namespace detcoll::collective {
namespace {

// The backend's own allreduce, or the ring where it has none (sum, min, max).
Status nativeAllreduce(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op) {
  if (comm.native() != nullptr) return comm.native()->allreduce(send, recv, count, type, op);
  RingAllreduceOptions o;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.type = type;
  o.op = op;
  return ringAllreduce(comm, o);
}

}  // namespace

Status modeAllreduce(Communicator& comm, Mode mode, const void* send, void* recv, size_t count,
                     DataType type, ReduceOp op, const OrderedAllreduceOptions& options,
                     int64_t divisor) {
  if (count == 0) return Status::ok();
  const int64_t total = divisor > 0 ? divisor : comm.size();
  switch (mode) {
    case Mode::kNative: {
      if (op != ReduceOp::kAverage) return nativeAllreduce(comm, send, recv, count, type, op);
      DETCOLL_RETURN_IF_ERROR(nativeAllreduce(comm, send, recv, count, type, ReduceOp::kSum));
      const void* sum[1] = {recv};
      kernels::foldRankOrder(recv, sum, 1, count, type, ReduceOp::kAverage, total);
      return Status::ok();
    }
    case Mode::kOrdered:
      return orderedAllreduce(comm, send, recv, count, type, op, options, total);
    case Mode::kInvariant: {
      const void* leaves[1] = {send};
      return invariantAllreduce(comm, leaves, 1, recv, count, type, op, total,
                                options.segmentBytes);
    }
  }
  return Status::internal("unknown mode " + std::to_string(static_cast<int>(mode)));
}

}  // namespace detcoll::collective
