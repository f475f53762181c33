#pragma once

// One asynchronous request of the fusion engine: what it is (the descriptor every rank must agree
// on), where its data lives, and its completion, which a framework thread waits or polls on or
// hears through a callback.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/call_checks.h"
#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::fusion {

class DeviceMarks;  // device_batches.h

enum class RequestKind : uint8_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,
  kReducescatter = 4,
  kAlltoall = 5,
  // This rank has run out of data (Horovod's join): until every rank has joined, it takes part in
  // the other ranks' allreduces with zeros. Its name is kJoinName.
  kJoin = 6,
};

constexpr const char* kJoinName = "detcoll.join";
const char* requestKindName(RequestKind kind);

// What every rank must give identically for one name. groupKey and groupSize are those of the
// group the request was enqueued in (0 and 1 when alone).
struct Descriptor {
  RequestKind kind = RequestKind::kAllreduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // allreduce
  Mode mode = Mode::kOrdered;    // allreduce
  int32_t root = 0;              // broadcast
  // Elements: of the buffer (allreduce, broadcast), per rank (allgather), of the input
  // (reducescatter: the sum of blocks); 0 for alltoall, whose counts are each rank's own.
  uint64_t count = 0;
  uint64_t groupKey = 0;
  uint32_t groupSize = 1;
  // The tensor's shape as the caller gave it (ndim -1: none given), which ranks must agree on too:
  // equal counts reduced flat would hide tensors of different shapes. Allgather and alltoall give
  // the dimensions beyond the first, which may differ.
  int32_t ndim = -1;
  std::vector<int64_t> shape;
  std::vector<uint64_t> blocks;  // reducescatter: elements of each rank's block
  // The process set the request runs in: 0 is every rank; others are registered with
  // Engine::addProcessSet. Ranks, roots and blocks are the set's (its members in rank order).
  uint32_t processSet = 0;
  // The buffers are CUDA device memory (fusion/device_batches.h); ranks must agree on it.
  bool device = false;

  bool operator==(const Descriptor& o) const {
    return kind == o.kind && type == o.type && op == o.op && mode == o.mode && root == o.root &&
           count == o.count && groupKey == o.groupKey && groupSize == o.groupSize &&
           ndim == o.ndim && shape == o.shape && blocks == o.blocks && processSet == o.processSet &&
           device == o.device;
  }
  bool operator!=(const Descriptor& o) const { return !(*this == o); }
  // Bytes of the buffer a rank sends.
  size_t bytes() const { return static_cast<size_t>(count) * dataTypeSize(type); }
};

// "allreduce float32[1000] sum ordered", "broadcast int64[8] root 2", plus " in a group of 3".
std::string describe(const Descriptor& d);
// How messages name a request: "allreduce 'grad.w'", plus " in process set k" for a set.
std::string describeRequest(const std::string& name, const Descriptor& d);

struct RequestSpec {
  std::string name;
  Descriptor descriptor;
  const void* send = nullptr;  // allreduce, allgather, reducescatter, alltoall
  // allreduce; allgather (size() * count elements); broadcast's buffer; reducescatter (this
  // rank's block); alltoall (the sum of recvCounts elements)
  void* recv = nullptr;
  std::vector<uint64_t> sendCounts;  // alltoall: elements to each rank
  std::vector<uint64_t> recvCounts;  // alltoall: elements from each rank
  // Memory the request owns (the zeros a joined rank contributes), kept until it completes.
  std::shared_ptr<std::vector<char>> owned;
  // A device request's stream order (descriptor.device; none for a joined rank's stand-in).
  std::shared_ptr<DeviceMarks> marks;
  // A local check's failure (the binding's, or the engine's at enqueue): the request is still
  // negotiated, so that it fails on every rank.
  std::string localError;
  // The caller has made the one check of the arguments (localError is its verdict); the engine
  // makes it otherwise.
  bool checked = false;
};

// The request as the one check of a call's arguments takes it (collective/call_checks.h), its
// dtype and op given as raw values (a caller's, valid or not, or the descriptor's).
collective::CallArguments callArguments(const RequestSpec& spec, int dtype, int op);

using Clock = std::chrono::steady_clock;

class Request {
 public:
  using Callback = std::function<void(const Status&)>;

  Request(RequestSpec spec, Callback callback, Clock::time_point enqueued = Clock::now())
      : spec_(std::move(spec)), callback_(std::move(callback)), enqueued_(enqueued) {}

  const RequestSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  const Descriptor& descriptor() const { return spec_.descriptor; }
  Clock::time_point enqueued() const { return enqueued_; }

  bool done() const;
  // Blocks until complete; returns the request's status.
  Status wait() const;
  // The first call sets the status, runs the callback (on the calling thread) and wakes waiters;
  // later calls do nothing.
  void complete(Status status) {
    if (settle(std::move(status))) release();
  }
  // complete() in two steps, so that a batch's requests all settle before any waiter wakes (one
  // wake-up per batch for a thread that waits for them in turn, not one per request): the first
  // settle() sets the status and runs the callback, and returns true; its caller must then
  // release(), which wakes the waiters. Later settle() calls do nothing and return false. A
  // request without a callback is done (done(), wait()) once settled; one with a callback once
  // released.
  bool settle(Status status);
  void release();
  bool hasCallback() const { return static_cast<bool>(callback_); }
  // A thread waits on it, or polled it before it was done: the engine's fast path
  // (fast_path.h) learns that somebody needs a request it holds.
  bool awaited() const { return waiting_.load() > 0 || polled_.load(); }

 private:
  const RequestSpec spec_;
  const Callback callback_;
  const Clock::time_point enqueued_;
  mutable std::atomic<uint32_t> waiting_{0};  // threads in wait()
  mutable std::atomic<bool> polled_{false};   // done() returned false
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool completing_ = false;  // complete() has been called
  bool done_ = false;        // ... and has finished
  Status status_;
};

using RequestPtr = std::shared_ptr<Request>;

}  // namespace detcoll::fusion
