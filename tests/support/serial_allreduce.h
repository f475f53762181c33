#pragma once

// The serial run of the GPU data path's allreduce: collective/device_pipeline.h, the very schedule
// and kernel bodies the device runs, executed on the host (tests/support/serial_executor.h) over a
// host transport. It exists so that the GPU algorithm is tested where there is no GPU: its bits
// must equal the CPU path's for every mode, dtype, op, world size and split.

#include <cstddef>
#include <cstdint>

#include "collective/device_transport.h"
#include "collective/transport/communicator.h"

namespace detcoll::testing {

using collective::Communicator;
using collective::DeviceTransport;
using collective::RecvSpec;
using collective::SendSpec;

// deviceAllreduce (collective/device_allreduce.h) on host buffers.
Status serialAllreduce(DeviceTransport& transport, Mode mode, const void* const* leaves,
                       int nleaves, void* recv, size_t count, DataType type, ReduceOp op,
                       int64_t totalLeaves, size_t segmentBytes);

// The pipeline's transport over a host Communicator (isend/irecv; native: its nativeAllreduce).
class CommTransport : public DeviceTransport {
 public:
  explicit CommTransport(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Status exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs,
                  void* stream) override;
  Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         void* stream) override;

 private:
  Communicator& comm_;
};

}  // namespace detcoll::testing
