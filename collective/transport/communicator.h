#pragma once

// The host transport every collective algorithm is written against: point-to-point messages
// between ranks, and nothing else. Implementations: MpiCommunicator (mpi_communicator.h) and
// ThreadCommunicator (thread_communicator.h, N ranks as threads for unit tests). The algorithms
// live in collective/ (docs/design.md, "Layers").

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective::transport {

class NativeCollectives;
class RecordBoard;

// How long a wait for a peer may last (docs/design.md, "Failures"): after warnSeconds it is
// reported through `warn` (and again every warnSeconds), after limitSeconds the communicator gives
// up (abandon()). 0: never.
struct Patience {
  double warnSeconds = 0;
  double limitSeconds = 0;
  std::function<void(const std::string&)> warn;
};

// A posted, not yet completed, send or receive.
class Transfer {
 public:
  virtual ~Transfer() = default;
  // Blocks until the transfer completes. For a receive, `bytes` (if not null) receives the size
  // of the message, which may be smaller than the posted capacity.
  virtual Status wait(size_t* bytes = nullptr) = 0;
  // wait() with the communicator's patience lengthened by graceSeconds: for a message the peer
  // sends only once it has heard from others (a record it forwards), so that the rank waiting
  // for a silent rank directly gives up first and its notice, naming that rank, reaches this one
  // before it would blame the peer (docs/design.md, "Agreement").
  virtual Status waitWithGrace(size_t* bytes, double graceSeconds) {
    (void)graceSeconds;
    return wait(bytes);
  }
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
  // The buffer must stay valid until the transfer completes. Tags are in [0, kMaxTag).
  virtual std::unique_ptr<Transfer> isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<Transfer> irecv(void* data, size_t capacity, int peer, int tag) = 0;

  // Failures of the job rather than of a call (docs/design.md, "Failures"). A transport that
  // cannot tell (the thread communicator of the unit tests) keeps the defaults: it waits forever
  // and is always healthy.
  //
  // From now on, waits follow `patience`: a wait past its limit abandons the communicator with a
  // DETCOLL_ERR_TIMEOUT naming the peer it waited for.
  virtual void setPatience(const Patience& patience) { (void)patience; }
  // Gives up on the communicator: `why` becomes the status of every wait and every later
  // transfer, transfers in flight are released without waiting, and every peer is told, so that
  // a peer waiting on this rank fails at once naming the cause, and a peer that was away and
  // comes back fails its call instead of completing it from messages left behind.
  virtual void abandon(const Status& why) { (void)why; }
  // ok, or why the communicator can no longer be used: it gave up, or a peer told it it gave up.
  // Cheap (one probe): called at the start and end of every blocking collective.
  virtual Status health() { return Status::ok(); }

  // The backend's own collectives, where it has them (MPI does), or null: the algorithms use
  // them where they may (native mode, broadcast, allgather, barrier) and run their own schedules
  // over isend/irecv otherwise.
  virtual NativeCollectives* native() { return nullptr; }

  // The record board (record_board.h) where every rank maps one, or null: the agreements exchange
  // their records through it instead of messages.
  virtual RecordBoard* board() { return nullptr; }

  // Tags of the layers above are below kMaxTag; kMaxTag itself carries abandonment notices.
  static constexpr int kMaxTag = 32767;

  // Messages this communicator has sent (isend calls), for the tests and benchmarks that count
  // what a collective costs (docs/design.md, "Agreement"): those with `tag`, tags from
  // kCountedTags up counted together; or all of them. Any thread may read them.
  static constexpr int kCountedTags = 64;
  uint64_t sentMessages(int tag) const {
    return sent_[countedTag(tag)].load(std::memory_order_relaxed);
  }
  uint64_t sentMessages() const;

 protected:
  // Every implementation's isend counts its message: one relaxed atomic increment.
  void countSend(int tag) { sent_[countedTag(tag)].fetch_add(1, std::memory_order_relaxed); }

 private:
  static int countedTag(int tag) { return tag >= 0 && tag < kCountedTags ? tag : kCountedTags; }
  std::atomic<uint64_t> sent_[kCountedTags + 1] = {};
};

// Collectives a backend implements itself. No ordering promise: used where the bits do not
// depend on the order (broadcast, allgather, barrier) or none is promised (native mode).
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // Sum, min or max (average is a sum divided afterwards, by the caller).
  virtual Status allreduce(const void* send, void* recv, size_t count, DataType type,
                           ReduceOp op) = 0;
  // data[i] = the largest of every rank's data[i], in place: unsigned integers of `bytes` (1 or
  // 2) bytes.
  virtual Status allreduceMaxUnsigned(void* data, size_t count, size_t bytes) = 0;
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `bytes` into recv in rank order.
  virtual Status allgather(const void* send, void* recv, size_t bytes) = 0;
  virtual Status barrier() = 0;
  // These wait with the communicator's patience too; a collective in flight cannot be taken back,
  // so one that gives up leaves its buffers to MPI (docs/design.md, "Failures").
};

// Blocking helpers over isend/irecv.
Status recvBytes(Communicator& comm, void* data, size_t bytes, int peer, int tag);
// Waits for every transfer, even after a failure; returns the first failure.
Status waitAll(std::unique_ptr<Transfer>* transfers, size_t n);

// A duration in seconds as the failure messages write it: one decimal and a unit ("2.5 s").
std::string secondsText(double seconds);

}  // namespace detcoll::collective::transport
