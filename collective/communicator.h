#pragma once

// The transport every algorithm is written against: point-to-point messages between ranks, plus
// the collectives a backend may do natively. Implementations: MpiCommunicator (mpi_communicator.h)
// and ThreadCommunicator (thread_communicator.h, N ranks as threads for unit tests).

#include <cstddef>
#include <memory>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective {

// A posted, not yet completed, send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer completes. For a receive, `bytes` (if not null) receives the size
  // of the message, which may be smaller than the posted capacity.
  virtual Status wait(size_t* bytes = nullptr) = 0;
  // Nonblocking: true once the transfer has completed, with its status in *status (the size of
  // a received message is only reported by wait). For loops that poll instead of blocking.
  virtual bool test(Status* status) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Nonblocking point-to-point. Messages between one pair of ranks with one tag are matched in
  // posting order. A receive accepts any message up to `capacity` bytes; a larger one fails.
  // The buffer must stay valid until the request completes. Tags are in [0, kMaxTag].
  virtual std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* data, size_t capacity, int peer, int tag) = 0;

  virtual Status barrier() = 0;

  // The backend's own allreduce (mode native): no ordering promise. The default runs
  // ringAllreduce (ring_allreduce.h), the schedule NCCL and Gloo use.
  virtual Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                 ReduceOp op);
  // Broadcast `bytes` from `root`. The default is a pipelined binomial tree over isend/irecv.
  virtual Status broadcast(void* data, size_t bytes, int root);
  // Every rank's `bytes` into recv in rank order. The default is a ring over isend/irecv.
  virtual Status allgather(const void* send, void* recv, size_t bytes);

  static constexpr int kMaxTag = 32767;
};

// Blocking helpers over isend/irecv.
Status recvBytes(Communicator& comm, void* data, size_t bytes, int peer, int tag);
// Waits for every request, even after a failure; returns the first failure.
Status waitAll(std::unique_ptr<Request>* requests, size_t n);

}  // namespace detcoll::collective
