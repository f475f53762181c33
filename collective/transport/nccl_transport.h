#pragma once

// The GPU data path's transport between processes: an NCCL communicator (an Exchange of
// exchange.h). A group of the schedule's transfers is ncclSend/ncclRecv in one NCCL group (calls
// to one peer run in posting order), ordered on the stream, so completing it waits for nothing;
// native mode is ncclAllReduce; broadcast and allgather are NCCL's. Everything is enqueued on the
// stream given per call. Built only with
// NCCL; no MPI here: the caller moves the unique id between processes (the C API broadcasts it
// over MPI).

#include <array>
#include <cstddef>
#include <functional>
#include <memory>

#include "collective/transport/exchange.h"

namespace detcoll::collective::transport {

class NcclTransport : public Exchange {
 public:
  using UniqueId = std::array<char, 128>;  // NCCL_UNIQUE_ID_BYTES

  // A fresh id (rank 0 makes it; every rank passes the same bytes to create).
  static Status uniqueId(UniqueId* id);
  // ncclCommInitRank on the current CUDA device; collective over the `size` processes.
  static Status create(const UniqueId& id, int rank, int size,
                       std::unique_ptr<NcclTransport>* transport);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  Status post(ExchangeGroup& group, void* stream) override;
  Status complete(ExchangeGroup& group) override;
  Status nativeAllreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         void* stream) override;
  Status agree(const Status& local) override { return agreement_ ? agreement_(local) : local; }
  // How agree() reaches the other ranks: over the host communicator (collective/device_path.cc).
  void setAgreement(std::function<Status(const Status&)> agreement) {
    agreement_ = std::move(agreement);
  }
  Status broadcast(void* data, size_t bytes, int root, void* stream);
  // Every rank's `bytes` into recv in rank order.
  Status allgather(const void* send, void* recv, size_t bytes, void* stream);

 private:
  NcclTransport(void* comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  Status check(int result, const char* call) const;

  void* comm_;  // ncclComm_t
  int rank_;
  int size_;
  int device_;
  std::function<Status(const Status&)> agreement_;
};

}  // namespace detcoll::collective::transport
