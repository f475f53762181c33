#include "collective/ordered_allreduce.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "collective/tags.h"
#include "kernels/fold.h"

namespace detcoll::collective {
namespace {

// Shard s of a round of `length` elements: a balanced split, the first length % p shards one
// element longer.
struct Shard {
  size_t begin;
  size_t length;
};
Shard shardOf(size_t roundBegin, size_t length, int p, int s) {
  const size_t base = length / p;
  const size_t extra = length % p;
  const size_t offset = base * s + std::min<size_t>(s, extra);
  return {roundBegin + offset, base + (static_cast<size_t>(s) < extra ? 1 : 0)};
}

class OrderedAllreduce {
 public:
  OrderedAllreduce(Communicator& comm, const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op, const OrderedAllreduceOptions& options)
      : comm_(comm),
        p_(comm.size()),
        rank_(comm.rank()),
        es_(dataTypeSize(type)),
        send_(static_cast<const char*>(send)),
        recv_(static_cast<char*>(recv)),
        count_(count),
        type_(type),
        op_(op),
        segment_(std::max<size_t>(
            1, std::min(options.segmentBytes / es_, (count + comm.size() - 1) / comm.size()))),
        roundElements_(segment_ * p_) {}

  Status run() {
    const size_t rounds = (count_ + roundElements_ - 1) / roundElements_;
    // Scratch kept per thread across calls, so steady-state calls neither allocate nor fault.
    thread_local std::vector<char> scratch;
    if (scratch.size() < 2 * p_ * segment_ * es_) scratch.resize(2 * p_ * segment_ * es_);
    staging_ = scratch.data();
    for (auto& set : exchange_) set.resize(2 * p_);
    for (auto& set : gather_) set.resize(2 * p_);
    post(0);
    for (size_t q = 0; q < rounds; ++q) {
      if (q + 1 < rounds) post(q + 1);
      DETCOLL_RETURN_IF_ERROR(foldRound(q));
      if (q >= 1) DETCOLL_RETURN_IF_ERROR(waitSet(gather_[(q - 1) % 2]));
      gatherRound(q);
    }
    return waitSet(gather_[(rounds - 1) % 2]);
  }

 private:
  size_t roundBegin(size_t q) const { return q * roundElements_; }
  size_t roundLength(size_t q) const { return std::min(roundElements_, count_ - roundBegin(q)); }
  char* stagingSlot(size_t q, int j) { return staging_ + ((q % 2) * p_ + j) * segment_ * es_; }

  // Reduce-scatter transfers of round q: my piece of every other shard out, the other ranks'
  // pieces of my shard in.
  void post(size_t q) {
    auto& set = exchange_[q % 2];
    const Shard mine = shardOf(roundBegin(q), roundLength(q), p_, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shardOf(roundBegin(q), roundLength(q), p_, j);
      set[j] = comm_.irecv(stagingSlot(q, j), mine.length * es_, j, kTagReduceScatter);
      set[p_ + j] =
          comm_.isend(send_ + theirs.begin * es_, theirs.length * es_, j, kTagReduceScatter);
    }
  }

  Status foldRound(size_t q) {
    auto& set = exchange_[q % 2];
    const Shard mine = shardOf(roundBegin(q), roundLength(q), p_, rank_);
    // The sends must finish too before the allgather may write over the input (in place).
    DETCOLL_RETURN_IF_ERROR(waitSet(set));
    inputs_.resize(p_);
    for (int j = 0; j < p_; ++j) {
      inputs_[j] = j == rank_ ? send_ + mine.begin * es_ : stagingSlot(q, j);
    }
    if (mine.length > 0) {
      kernels::foldRankOrder(recv_ + mine.begin * es_, inputs_.data(), p_, mine.length, type_, op_,
                             p_);
    }
    return Status::ok();
  }

  void gatherRound(size_t q) {
    auto& set = gather_[q % 2];
    const Shard mine = shardOf(roundBegin(q), roundLength(q), p_, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shardOf(roundBegin(q), roundLength(q), p_, j);
      set[j] = comm_.irecv(recv_ + theirs.begin * es_, theirs.length * es_, j, kTagAllgatherShard);
      set[p_ + j] = comm_.isend(recv_ + mine.begin * es_, mine.length * es_, j, kTagAllgatherShard);
    }
  }

  static Status waitSet(std::vector<std::unique_ptr<Request>>& set) {
    Status status = waitAll(set.data(), set.size());
    for (auto& request : set) request.reset();
    return status;
  }

  Communicator& comm_;
  const int p_;
  const int rank_;
  const size_t es_;
  const char* send_;
  char* recv_;
  const size_t count_;
  const DataType type_;
  const ReduceOp op_;
  const size_t segment_;
  const size_t roundElements_;
  char* staging_ = nullptr;
  std::vector<std::unique_ptr<Request>> exchange_[2];
  std::vector<std::unique_ptr<Request>> gather_[2];
  std::vector<const void*> inputs_;
};

}  // namespace

Status orderedAllreduce(Communicator& comm, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op, const OrderedAllreduceOptions& options) {
  if (count == 0) return Status::ok();
  if (comm.size() == 1) {
    const void* inputs[1] = {send};
    kernels::foldRankOrder(recv, inputs, 1, count, type, op, 1);
    return Status::ok();
  }
  return OrderedAllreduce(comm, send, recv, count, type, op, options).run();
}

}  // namespace detcoll::collective
