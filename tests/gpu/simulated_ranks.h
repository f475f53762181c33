#pragma once

// P simulated ranks in one process on one GPU, for the tests of the GPU allreduce
// (collective/device_allreduce.h): each rank is a thread with a CUDA stream of its own and a
// SimulatedTransport (a collective::transport::Exchange) over a SimulatedWorld they share.
//
// Posting a group runs it at once: it waits for the rank's stream, publishes the rank's sends, and
// meets the other ranks
// at a barrier (every send buffer is then ready, every receive buffer free). Each rank then
// copies, on its own stream, from the matching peers' send buffers into its receive buffers
// (transfers between a pair match in posting order, sizes must agree), waits for the copies and
// meets the others again, so that no sender writes a buffer before its receivers have copied it.
// Completing a group has nothing left to wait for.
// The native allreduce folds every rank's send buffer into a temporary in rank order (any order
// would do for native) and copies it to recv once every rank has read the send buffers.
//
// A rank whose function returns (normally, by a failed assertion or on an error) leaves the
// world; a rank then waiting at a barrier for it fails, as does every barrier after a failed
// exchange or a wait of more than two minutes, so a broken pipeline fails the test, not hangs it.

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/transport/exchange.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kernels/reduce_device.h"

namespace detcoll::testing {

class SimulatedWorld {
 public:
  explicit SimulatedWorld(int size)
      : size_(size), sends_(static_cast<size_t>(size)), pointers_(static_cast<size_t>(size)) {}
  SimulatedWorld(const SimulatedWorld&) = delete;
  SimulatedWorld& operator=(const SimulatedWorld&) = delete;

  int size() const { return size_; }

  // Returns when every rank has arrived; fails if the world is broken, or breaks when a rank has
  // left while others wait or the wait times out.
  Status barrier(int rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!broken_.empty()) return Status::internal(broken_);
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return Status::ok();
    }
    const bool woke = changed_.wait_for(
        lock, kTimeout, [&] { return generation_ != generation || !broken_.empty() || left_ > 0; });
    if (generation_ != generation) return Status::ok();
    if (broken_.empty()) {
      broken_ = woke ? "simulated rank " + std::to_string(rank) +
                           " waits at a barrier that a rank which returned never reaches"
                     : "simulated rank " + std::to_string(rank) +
                           " waited more than two minutes at a barrier";
      changed_.notify_all();
    }
    return Status::internal(broken_);
  }

  // Fails every barrier from now on.
  void breakWorld(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_ = why;
    changed_.notify_all();
  }

  // The rank's function returned: no barrier can complete without it any more.
  void leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++left_;
    changed_.notify_all();
  }

  std::string brokenReason() {
    std::lock_guard<std::mutex> lock(mutex_);
    return broken_;
  }

  // What a rank publishes for the other ranks between two barriers. Written by the rank itself
  // only, before the barrier that makes it visible; read by the others after it.
  void publishSends(int rank, const std::vector<collective::transport::Send>& sends) {
    std::lock_guard<std::mutex> lock(mutex_);
    sends_[rank] = sends;
  }
  const std::vector<collective::transport::Send>& sendsOf(int rank) const { return sends_[rank]; }
  void publishPointer(int rank, const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    pointers_[rank] = p;
  }
  std::vector<const void*> pointers() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pointers_;
  }

 private:
  static constexpr std::chrono::seconds kTimeout{120};

  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  int left_ = 0;
  std::string broken_;
  std::vector<std::vector<collective::transport::Send>> sends_;
  std::vector<const void*> pointers_;
};

class SimulatedTransport : public collective::transport::Exchange {
 public:
  SimulatedTransport(std::shared_ptr<SimulatedWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }

  // How many groups and native allreduces this rank has run.
  int exchanges() const { return exchanges_; }
  int natives() const { return natives_; }

  Status complete(collective::transport::ExchangeGroup& group) override {
    group.clear();
    return Status::ok();
  }

  Status post(collective::transport::ExchangeGroup& group, void* stream) override {
    const std::vector<collective::transport::Send>& sends = group.sends;
    const std::vector<collective::transport::Recv>& recvs = group.recvs;
    ++exchanges_;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    DETCOLL_RETURN_IF_ERROR(fail(check(cudaStreamSynchronize(s), "cudaStreamSynchronize")));
    for (const collective::transport::Send& send : sends) {
      if (send.peer < 0 || send.peer >= size()) {
        return fail(Status::internal(where() + "a send to rank " + std::to_string(send.peer)));
      }
    }
    world_->publishSends(rank_, sends);
    DETCOLL_RETURN_IF_ERROR(world_->barrier(rank_));
    // The sends to this rank, per peer, in posting order; matched one by one.
    std::vector<std::vector<const collective::transport::Send*>> incoming(size());
    for (int j = 0; j < size(); ++j) {
      for (const collective::transport::Send& send : world_->sendsOf(j)) {
        if (send.peer == rank_) incoming[j].push_back(&send);
      }
    }
    std::vector<size_t> matched(size(), 0);
    Status status;
    for (const collective::transport::Recv& recv : recvs) {
      if (recv.peer < 0 || recv.peer >= size()) {
        status = Status::internal(where() + "a receive from rank " + std::to_string(recv.peer));
        break;
      }
      if (matched[recv.peer] == incoming[recv.peer].size()) {
        status = Status::internal(where() + "a receive of " + std::to_string(recv.bytes) +
                                  " bytes from rank " + std::to_string(recv.peer) +
                                  " that it does not send (it sends " +
                                  std::to_string(incoming[recv.peer].size()) + " transfers)");
        break;
      }
      const collective::transport::Send& send = *incoming[recv.peer][matched[recv.peer]++];
      if (send.bytes != recv.bytes) {
        status = Status::internal(where() + "receive " + std::to_string(matched[recv.peer] - 1) +
                                  " from rank " + std::to_string(recv.peer) + " is " +
                                  std::to_string(recv.bytes) + " bytes, the matching send " +
                                  std::to_string(send.bytes));
        break;
      }
      status = check(cudaMemcpyAsync(recv.data, send.data, recv.bytes, cudaMemcpyDeviceToDevice, s),
                     "cudaMemcpyAsync");
      if (!status.isOk()) break;
    }
    for (int j = 0; j < size() && status.isOk(); ++j) {
      if (matched[j] != incoming[j].size()) {
        status = Status::internal(where() + "rank " + std::to_string(j) + " sends " +
                                  std::to_string(incoming[j].size()) + " transfers, " +
                                  std::to_string(matched[j]) + " received");
      }
    }
    const Status synced = check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (status.isOk()) status = synced;
    DETCOLL_RETURN_IF_ERROR(fail(status));
    return world_->barrier(rank_);
  }

  Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         void* stream) override {
    ++natives_;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    DETCOLL_RETURN_IF_ERROR(fail(check(cudaStreamSynchronize(s), "cudaStreamSynchronize")));
    world_->publishPointer(rank_, send);
    DETCOLL_RETURN_IF_ERROR(world_->barrier(rank_));
    const std::vector<const void*> inputs = world_->pointers();
    // Into a temporary: recv may be this rank's send, which the others are reading.
    void* sum = nullptr;
    const size_t bytes = count * dataTypeSize(type);
    Status status = check(cudaMallocAsync(&sum, bytes > 0 ? bytes : 1, s), "cudaMallocAsync");
    if (status.isOk()) {
      status = kernels::device::foldRankOrder(sum, inputs.data(), size(), count, type, op, 1, s);
    }
    const Status synced = check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (status.isOk()) status = synced;
    if (!status.isOk()) {
      if (sum != nullptr) (void)cudaFreeAsync(sum, s);
      return fail(status);
    }
    DETCOLL_RETURN_IF_ERROR(world_->barrier(rank_));
    status =
        check(cudaMemcpyAsync(recv, sum, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    const Status freed = check(cudaFreeAsync(sum, s), "cudaFreeAsync");
    return status.isOk() ? freed : status;
  }

 private:
  std::string where() const {
    return "simulated rank " + std::to_string(rank_) + " of " + std::to_string(size()) + ": ";
  }
  Status check(cudaError_t e, const char* call) const {
    if (e == cudaSuccess) return Status::ok();
    return Status::backend(where() + call + " failed: " + cudaGetErrorString(e));
  }
  // Breaks the world on a failure, so that the other ranks stop waiting for this one.
  Status fail(Status s) {
    if (!s.isOk()) world_->breakWorld(s.message());
    return s;
  }

  std::shared_ptr<SimulatedWorld> world_;
  int rank_;
  int exchanges_ = 0;
  int natives_ = 0;
};

// Runs fn(rank, transport, stream) on p threads, each on the calling thread's CUDA device with a
// stream of its own (non-blocking, destroyed after fn returns and its work is done), and joins
// them. Returns the first failure: a stream that could not be made, an exception that escaped fn,
// or why the world broke.
inline Status runRanks(int p,
                       const std::function<void(int rank, SimulatedTransport&, cudaStream_t)>& fn) {
  auto world = std::make_shared<SimulatedWorld>(p);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::backend("runRanks: no current CUDA device");
  }
  std::vector<std::string> errors(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      cudaStream_t stream = nullptr;
      cudaError_t e = cudaSetDevice(device);
      if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      if (e != cudaSuccess) {
        errors[r] =
            std::string("rank ") + std::to_string(r) + ": no CUDA stream: " + cudaGetErrorString(e);
        world->breakWorld(errors[r]);
      } else {
        SimulatedTransport transport(world, r);
        try {
          fn(r, transport, stream);
        } catch (const std::exception& x) {
          errors[r] = "rank " + std::to_string(r) + " threw: " + x.what();
          world->breakWorld(errors[r]);
        }
        (void)cudaStreamSynchronize(stream);
        (void)cudaStreamDestroy(stream);
      }
      world->leave();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& error : errors) {
    if (!error.empty()) return Status::internal(error);
  }
  const std::string broken = world->brokenReason();
  if (!broken.empty()) return Status::internal(broken);
  return Status::ok();
}

}  // namespace detcoll::testing
