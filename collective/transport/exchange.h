#pragma once

// What the allreduce schedule (collective/pipeline.h) needs from a transport: groups of sends and
// receives posted together and completed later, ordered on a stream where the transport has one,
// the backend's own allreduce for the native mode, and an agreement on a local status.
// Implementations: CommExchange (collective/comm_exchange.h: over a host Communicator, for the CPU
// path),
// NcclTransport (nccl_transport.h: ncclSend/ncclRecv groups on a CUDA stream) and the GPU tests'
// exchange between simulated ranks (tests/gpu/simulated_ranks.h).

#include <cstddef>
#include <memory>
#include <vector>

#include "collective/transport/communicator.h"
#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective::transport {

class RecordBoard;  // record_board.h

struct Send {
  const void* data;
  size_t bytes;
  int peer;
};
struct Recv {
  void* data;
  size_t bytes;  // exactly what the peer sends
  int peer;
};

// The transfers of one step of the schedule. post() starts them; complete() ends them.
struct ExchangeGroup {
  std::vector<Send> sends;
  std::vector<Recv> recvs;
  // A host transport's transfers in flight (empty for stream-ordered transports).
  std::vector<std::unique_ptr<Transfer>> inFlight;

  bool empty() const { return sends.empty() && recvs.empty(); }
  void clear() {
    sends.clear();
    recvs.clear();
    inFlight.clear();
  }
};

class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Starts the group's transfers. A stream-ordered transport runs them after the work enqueued
  // on `stream` before, and before the work enqueued after; a host transport starts them now.
  // Every rank posts the same number of groups; transfers between a pair of ranks match in
  // posting order.
  virtual Status post(ExchangeGroup& group, void* stream) = 0;
  // Returns once the group's receives may be read and its sends' buffers reused by what comes
  // next: a host transport waits for its transfers; a stream-ordered one has nothing to wait for
  // (the stream orders the next work after them).
  virtual Status complete(ExchangeGroup& group) = 0;

  // The backend's own allreduce (sum, min or max), on the stream: no order promised (native mode).
  virtual Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                 ReduceOp op, void* stream) = 0;

  // keys[i] = the largest of every rank's keys[i] (unsigned, keyBytes 1 or 2), in place, through
  // the backend's own allreduce (the invariant mode's mpi transport).
  // Transports without it refuse.
  virtual Status nativeMaxKeys(void* keys, size_t count, size_t keyBytes, void* stream) {
    (void)keys, (void)count, (void)keyBytes, (void)stream;
    return Status::internal("this transport has no native allreduce of keys");
  }

  // The verdict over every rank's local status, the same on every rank: the schedule asks
  // before its first transfer whether every rank has its scratch, when the kernels' scratch can
  // fail (device memory), so that one rank failing fails every rank instead of leaving the others
  // waiting. Transports whose ranks share one process, or whose scratch cannot fail, return the
  // local status.
  virtual Status agree(const Status& local) { return local; }

  // The record board of a host transport whose ranks all share one node (record_board.h), or
  // null: the allreduce's one exchange of whole contributions goes through it where they fit.
  virtual RecordBoard* board() { return nullptr; }
};

}  // namespace detcoll::collective::transport
