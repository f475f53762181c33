#include "collective/direct_allreduce.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "collective/tags.h"

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

using RequestSet = std::vector<std::unique_ptr<Transfer>>;

Status waitSet(RequestSet& set) {
  Status status = waitAll(set.data(), set.size());
  for (auto& request : set) request.reset();
  return status;
}

class Pipeline {
 public:
  Pipeline(Communicator& comm, const DirectAllreduce& spec)
      : comm_(comm),
        spec_(spec),
        p_(comm.size()),
        rank_(comm.rank()),
        segment_(std::max<size_t>(
            1, std::min(spec.segmentBytes / spec.inBytes, (spec.count + p_ - 1) / p_))),
        roundElements_(segment_ * p_) {}

  Status run() {
    const size_t rounds = (spec_.count + roundElements_ - 1) / roundElements_;
    // Scratch kept per thread across calls, so steady-state calls neither allocate nor fault:
    // two rounds of received pieces, and two rounds of encoded input when there is an encoder.
    const size_t staging = 2 * p_ * segment_ * spec_.inBytes;
    const size_t encoded = spec_.input ? 0 : 2 * roundElements_ * spec_.inBytes;
    thread_local std::vector<char> scratch;
    if (scratch.size() < staging + encoded) scratch.resize(staging + encoded);
    staging_ = scratch.data();
    encoded_ = scratch.data() + staging;
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
  size_t roundLength(size_t q) const {
    return std::min(roundElements_, spec_.count - roundBegin(q));
  }
  Shard shard(size_t q, int s) const { return shardOf(roundBegin(q), roundLength(q), p_, s); }
  char* stagingSlot(size_t q, int j) {
    return staging_ + ((q % 2) * p_ + j) * segment_ * spec_.inBytes;
  }
  // Input element `index` of round q: in the caller's buffer, or in the round's encoding.
  const char* inputAt(size_t q, size_t index) const {
    if (spec_.input) return static_cast<const char*>(spec_.input) + index * spec_.inBytes;
    return encoded_ + ((q % 2) * roundElements_ + index - roundBegin(q)) * spec_.inBytes;
  }

  // Reduce-scatter transfers of round q: my piece of every other shard out, the other ranks'
  // pieces of my shard in.
  void post(size_t q) {
    if (!spec_.input) {
      spec_.encode(roundBegin(q), roundLength(q),
                   encoded_ + (q % 2) * roundElements_ * spec_.inBytes);
    }
    auto& set = exchange_[q % 2];
    const Shard mine = shard(q, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shard(q, j);
      set[j] = comm_.irecv(stagingSlot(q, j), mine.length * spec_.inBytes, j, kTagReduceScatter);
      set[p_ + j] = comm_.isend(inputAt(q, theirs.begin), theirs.length * spec_.inBytes, j,
                                kTagReduceScatter);
    }
  }

  Status foldRound(size_t q) {
    // The sends must finish too before the allgather may write over the input (in place).
    DETCOLL_RETURN_IF_ERROR(waitSet(exchange_[q % 2]));
    const Shard mine = shard(q, rank_);
    pieces_.resize(p_);
    for (int j = 0; j < p_; ++j) {
      pieces_[j] = j == rank_ ? inputAt(q, mine.begin) : stagingSlot(q, j);
    }
    if (mine.length > 0) {
      spec_.fold(static_cast<char*>(spec_.output) + mine.begin * spec_.outBytes, pieces_.data(), p_,
                 mine.begin, mine.length);
    }
    return Status::ok();
  }

  void gatherRound(size_t q) {
    auto& set = gather_[q % 2];
    char* out = static_cast<char*>(spec_.output);
    const Shard mine = shard(q, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shard(q, j);
      set[j] = comm_.irecv(out + theirs.begin * spec_.outBytes, theirs.length * spec_.outBytes, j,
                           kTagAllgatherShard);
      set[p_ + j] = comm_.isend(out + mine.begin * spec_.outBytes, mine.length * spec_.outBytes, j,
                                kTagAllgatherShard);
    }
  }

  Communicator& comm_;
  const DirectAllreduce& spec_;
  const int p_;
  const int rank_;
  const size_t segment_;
  const size_t roundElements_;
  char* staging_ = nullptr;
  char* encoded_ = nullptr;
  RequestSet exchange_[2];
  RequestSet gather_[2];
  std::vector<const void*> pieces_;
};

}  // namespace

Status runDirectAllreduce(Communicator& comm, const DirectAllreduce& spec) {
  if (spec.count == 0) return Status::ok();
  if (comm.size() == 1) {
    // One rank: fold its own input, in segments when it is encoded.
    const size_t step =
        spec.input ? spec.count : std::max<size_t>(1, spec.segmentBytes / spec.inBytes);
    std::vector<char> encoded(spec.input ? 0 : step * spec.inBytes);
    for (size_t begin = 0; begin < spec.count; begin += step) {
      const size_t n = std::min(step, spec.count - begin);
      const void* piece = static_cast<const char*>(spec.input) + begin * spec.inBytes;
      if (!spec.input) {
        spec.encode(begin, n, encoded.data());
        piece = encoded.data();
      }
      spec.fold(static_cast<char*>(spec.output) + begin * spec.outBytes, &piece, 1, begin, n);
    }
    return Status::ok();
  }
  return Pipeline(comm, spec).run();
}

}  // namespace detcoll::collective
