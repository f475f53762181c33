#pragma once

// The host transport every collective algorithm is written against: point-to-point messages
// between ranks, and nothing else. Implementations: MpiCommunicator (mpi_communicator.h) and
// ThreadCommunicator (thread_communicator.h, N ranks as threads for unit tests). The algorithms
// live in collective/ (docs/design.md, "Layers").

#include <cstddef>
#include <memory>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective::transport {

class NativeCollectives;

// A posted, not yet completed, send or receive.
class Transfer {
 public:
  virtual ~Transfer() = default;
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
  // The buffer must stay valid until the transfer completes. Tags are in [0, kMaxTag].
  virtual std::unique_ptr<Transfer> isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<Transfer> irecv(void* data, size_t capacity, int peer, int tag) = 0;

  // The backend's own collectives, where it has them (MPI does), or null: the algorithms use
  // them where they may (native mode, broadcast, allgather, barrier) and run their own schedules
  // over isend/irecv otherwise.
  virtual NativeCollectives* native() { return nullptr; }

  static constexpr int kMaxTag = 32767;
};

// Collectives a backend implements itself. No ordering promise: used where the bits do not
// depend on the order (broadcast, allgather, barrier) or none is promised (native mode).
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // Sum, min or max (average is a sum divided afterwards, by the caller).
  virtual Status allreduce(const void* send, void* recv, size_t count, DataType type,
                           ReduceOp op) = 0;
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `bytes` into recv in rank order.
  virtual Status allgather(const void* send, void* recv, size_t bytes) = 0;
  virtual Status barrier() = 0;
};

// Blocking helpers over isend/irecv.
Status recvBytes(Communicator& comm, void* data, size_t bytes, int peer, int tag);
// Waits for every transfer, even after a failure; returns the first failure.
Status waitAll(std::unique_ptr<Transfer>* transfers, size_t n);

}  // namespace detcoll::collective::transport
