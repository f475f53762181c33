#pragma once

// What the GPU allreduce pipeline (collective/device_pipeline.h) needs from a transport: grouped
// point-to-point transfers, ordered on a stream, and the backend's own allreduce for the native
// mode. Implementations: NcclTransport (collective/transport/nccl_transport.h: ncclSend/ncclRecv in
// a group), CommTransport (collective/comm_transport.h: over a host Communicator, for the serial
// run of the pipeline), and the tests' device-memory exchange between simulated ranks.

#include <cstddef>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective {

struct SendSpec {
  const void* data;
  size_t bytes;
  int peer;
};
struct RecvSpec {
  void* data;
  size_t bytes;  // exactly what the peer sends
  int peer;
};

class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Runs the sends and receives as one group, after the work already enqueued on `stream` (a
  // cudaStream_t for a device transport; ignored by host ones) and before the work enqueued
  // after it: the receives' data is there for the next kernel on the stream, and the sent
  // buffers may be written by it. Every rank calls it the same number of times; transfers
  // between a pair of ranks match in posting order.
  virtual Status exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs,
                          void* stream) = 0;

  // The backend's own allreduce, on the stream (mode native; sum, min or max): no order promised.
  virtual Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                 ReduceOp op, void* stream) = 0;

  // The verdict over every rank's local status, the same on every rank: the pipeline asks before
  // its first transfer, so that a rank failing alone (scratch it could not allocate) fails every
  // rank instead of leaving them waiting for its transfers. The default, for transports whose
  // ranks share one process (the tests'), returns the local status.
  virtual Status agree(const Status& local) { return local; }
};

}  // namespace detcoll::collective
