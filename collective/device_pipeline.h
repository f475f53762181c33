#pragma once

// The allreduce of every mode on the GPU data path, written once over an executor (kernels: the
// device, or the host for the serial run) and a DeviceTransport (NCCL, or a host communicator):
// collective/device_allreduce.h runs it on the device, tests/support/serial_allreduce.h on the
// host.
//
// The schedule is the CPU path's (collective/direct_allreduce.h), so the bits are too: the element
// range is cut into rounds of P shards; in each round every rank sends its piece of shard s to
// rank s, rank s reduces its shard's P pieces in rank order with a kernel of
// kernels/reduce_parallel.h, and the reduced shards are allgathered. Everything is ordered on
// one stream: round q's allgather travels in the same transport group as round q+1's
// reduce-scatter, so a round costs one group and one kernel.
//
//   ordered    pieces in the dtype, the rank-order fold (average divides by the number of leaves)
//   invariant  one leaf on every rank: pieces in the dtype, the exact invariant reduction of the
//              P pieces by their owner; otherwise every element's key first (the same pipeline
//              over 1- or 2-byte keys, max), then int64 sums of each rank's leaf encodings (with
//              the non-finite counts in place), added exactly and rounded once by the owner
//   native     the transport's own allreduce; average divides afterwards
//
// A rank with several leaves (ordered, native) folds them first, in order, as the CPU path does.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "collective/device_transport.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kernels/fixed_point.h"
#include "kernels/reduce_parallel.h"

namespace detcoll::collective::device_pipeline {

using kernels::parallel::aligned16;
using kernels::parallel::kVectorBytes;
using kernels::parallel::Pieces;

// One run of the direct reduce-scatter + allgather schedule.
struct Stage {
  size_t count = 0;
  // Reduce-scatter input, inBytes per element: `input`, or encode(begin, n, dst) per round.
  size_t inBytes = 0;
  const void* input = nullptr;
  std::function<void(size_t begin, size_t n, void* dst)> encode;
  // Allgather output, outBytes per element; may equal input.
  size_t outBytes = 0;
  void* output = nullptr;
  // Writes the reduced elements [begin, begin + n) to out from the P pieces, in rank order.
  std::function<void(void* out, const Pieces& pieces, size_t begin, size_t n, bool vectorized)>
      fold;
  size_t segmentBytes = 0;
};

template <typename Exec>
class Pipeline {
 public:
  Pipeline(Exec& e, DeviceTransport& t, void* stream, const Stage& s)
      : e_(e),
        t_(t),
        stream_(stream),
        s_(s),
        p_(t.size()),
        rank_(t.rank()),
        // Shards start at multiples of unit_ elements, 16 bytes of input and of output, so that
        // every shard of 16-byte aligned buffers is read and written as vectors; a segment is a
        // whole number of units.
        unit_(std::max<size_t>(1, kVectorBytes / std::min(s.inBytes, s.outBytes))),
        segment_(roundUp(
            std::max<size_t>(1, std::min(s.segmentBytes / s.inBytes, (s.count + p_ - 1) / p_)),
            unit_)),
        round_(segment_ * p_),
        // Slots of 16-byte multiples, so that every staged piece can be read as vectors.
        slotBytes_((segment_ * s.inBytes + 15) / 16 * 16) {}

  Status run() {
    if (s_.count == 0) return Status::ok();
    staging_ = e_.template alloc<char>(static_cast<int64_t>(p_ * slotBytes_));
    if (!s_.input) encoded_ = e_.template alloc<char>(static_cast<int64_t>(round_ * s_.inBytes));
    // Every rank has its scratch (and whatever the caller allocated before) or every rank stops.
    DETCOLL_RETURN_IF_ERROR(t_.agree(e_.status()));
    // From here every rank runs every transfer: a kernel that fails to launch makes the later
    // launches no-ops and is reported at the end, so no peer is left waiting.
    const size_t rounds = (s_.count + round_ - 1) / round_;
    for (size_t q = 0; q < rounds; ++q) {
      if (!s_.input) s_.encode(q * round_, length(q), encoded_);
      scatter(q);  // joins round q - 1's allgather in one group
      DETCOLL_RETURN_IF_ERROR(t_.exchange(sends_, recvs_, stream_));
      sends_.clear();
      recvs_.clear();
      reduce(q);
      gather(q);
    }
    DETCOLL_RETURN_IF_ERROR(t_.exchange(sends_, recvs_, stream_));
    return e_.status();
  }

 private:
  static size_t roundUp(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }
  struct Shard {
    size_t begin;
    size_t length;
  };
  size_t length(size_t q) const { return std::min(round_, s_.count - q * round_); }
  // A balanced split of round q in units, the first ones a unit longer (the last may be short).
  Shard shard(size_t q, int j) const {
    const size_t n = length(q);
    const size_t units = (n + unit_ - 1) / unit_;
    const size_t base = units / p_;
    const size_t extra = units % p_;
    const size_t first = base * j + std::min<size_t>(j, extra);
    const size_t begin = std::min(n, first * unit_);
    const size_t end =
        std::min(n, (first + base + (static_cast<size_t>(j) < extra ? 1 : 0)) * unit_);
    return {q * round_ + begin, end - begin};
  }
  const char* inputAt(size_t q, size_t index) const {
    if (s_.input) return static_cast<const char*>(s_.input) + index * s_.inBytes;
    return encoded_ + (index - q * round_) * s_.inBytes;
  }
  char* outputAt(size_t index) const { return static_cast<char*>(s_.output) + index * s_.outBytes; }
  void send(const void* data, size_t bytes, int peer) {
    if (bytes > 0) sends_.push_back({data, bytes, peer});
  }
  void recv(void* data, size_t bytes, int peer) {
    if (bytes > 0) recvs_.push_back({data, bytes, peer});
  }

  void scatter(size_t q) {
    const Shard mine = shard(q, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shard(q, j);
      recv(staging_ + j * slotBytes_, mine.length * s_.inBytes, j);
      send(inputAt(q, theirs.begin), theirs.length * s_.inBytes, j);
    }
  }

  void reduce(size_t q) {
    const Shard mine = shard(q, rank_);
    if (mine.length == 0) return;
    Pieces pieces;
    pieces.base = staging_;
    pieces.stride = slotBytes_;
    pieces.own = rank_;
    pieces.ownPtr = inputAt(q, mine.begin);
    char* out = outputAt(mine.begin);
    s_.fold(out, pieces, mine.begin, mine.length, aligned16({pieces.ownPtr, out}));
  }

  void gather(size_t q) {
    const Shard mine = shard(q, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shard(q, j);
      recv(outputAt(theirs.begin), theirs.length * s_.outBytes, j);
      send(outputAt(mine.begin), mine.length * s_.outBytes, j);
    }
  }

  Exec& e_;
  DeviceTransport& t_;
  void* stream_;
  const Stage& s_;
  const int p_;
  const int rank_;
  const size_t unit_;
  const size_t segment_;
  const size_t round_;
  const size_t slotBytes_;
  char* staging_ = nullptr;
  char* encoded_ = nullptr;
  std::vector<SendSpec> sends_;
  std::vector<RecvSpec> recvs_;
};

template <typename Exec>
Status runStage(Exec& e, DeviceTransport& t, void* stream, const Stage& s) {
  return Pipeline<Exec>(e, t, stream, s).run();
}

// This rank's leaves as pieces (a table in executor memory), and whether they are all aligned
// from element `begin` on.
struct Leaves {
  Pieces pieces;
  std::vector<const void*> host;
  size_t elementBytes;

  Pieces at(size_t begin) const {
    Pieces p = pieces;
    p.offset = begin * elementBytes;
    return p;
  }
  bool aligned(size_t begin) const {
    for (const void* leaf : host) {
      if (!aligned16({static_cast<const char*>(leaf) + begin * elementBytes})) return false;
    }
    return true;
  }
};

template <typename Exec>
Leaves leavesOf(Exec& e, const void* const* leaves, int nleaves, DataType type) {
  Leaves l;
  l.host.assign(leaves, leaves + nleaves);
  l.elementBytes = dataTypeSize(type);
  bool vectorized = false;
  l.pieces = kernels::parallel::tableOf(e, leaves, nleaves, nullptr, &vectorized);
  return l;
}

// The rank's contribution in ordered and native mode: its one leaf, or its leaves folded in
// order (summed for average) into scratch.
template <typename Exec>
const void* contribution(Exec& e, const void* const* leaves, int nleaves, size_t count,
                         DataType type, ReduceOp op) {
  if (nleaves == 1) return leaves[0];
  void* folded = e.template alloc<char>(static_cast<int64_t>(count * dataTypeSize(type)));
  const Leaves l = leavesOf(e, leaves, nleaves, type);
  kernels::parallel::fold(e, folded, l.pieces, nleaves, static_cast<int64_t>(count), type,
                          op == ReduceOp::kAverage ? ReduceOp::kSum : op, 1,
                          l.aligned(0) && aligned16({folded}));
  return folded;
}

template <typename Exec>
Status orderedAllreduce(Exec& e, DeviceTransport& t, void* stream, const void* send, void* recv,
                        size_t count, DataType type, ReduceOp op, int64_t divisor,
                        size_t segmentBytes) {
  Stage s;
  s.count = count;
  s.inBytes = s.outBytes = dataTypeSize(type);
  s.input = send;
  s.output = recv;
  s.segmentBytes = segmentBytes;
  s.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool vectorized) {
    kernels::parallel::fold(e, out, pieces, t.size(), static_cast<int64_t>(n), type, op, divisor,
                            vectorized);
  };
  return runStage(e, t, stream, s);
}

template <typename Exec>
Status invariantAllreduce(Exec& e, DeviceTransport& t, void* stream, const void* const* leaves,
                          int nleaves, void* recv, size_t count, DataType type, ReduceOp op,
                          int64_t totalLeaves, size_t segmentBytes) {
  namespace par = kernels::parallel;
  const size_t es = dataTypeSize(type);
  const int p = t.size();
  const bool pick = op == ReduceOp::kMin || op == ReduceOp::kMax;
  if (totalLeaves == p || pick) {
    // The pieces travel in the dtype: one leaf each (reduced exactly by the owner), or min/max
    // (order-independent; several leaves are picked from locally first).
    Stage s;
    s.count = count;
    s.inBytes = s.outBytes = es;
    s.output = recv;
    s.segmentBytes = segmentBytes;
    Leaves l;
    if (nleaves == 1) {
      s.input = leaves[0];
    } else {
      l = leavesOf(e, leaves, nleaves, type);
      s.encode = [&](size_t begin, size_t n, void* dst) {
        par::fold(e, dst, l.at(begin), nleaves, static_cast<int64_t>(n), type, op, 1,
                  l.aligned(begin) && aligned16({dst}));
      };
    }
    s.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool vectorized) {
      par::invariantLocal(e, out, pieces, p, static_cast<int64_t>(n), type, op, vectorized);
    };
    return runStage(e, t, stream, s);
  }
  const Leaves l = leavesOf(e, leaves, nleaves, type);
  // 1. Every element's key, on every rank.
  const size_t kb = kernels::exponentKeyBytes(type);
  char* keys = kb > 0 ? e.template alloc<char>(static_cast<int64_t>(count * kb)) : nullptr;
  DETCOLL_RETURN_IF_ERROR(e.status());
  if (kb > 0) {
    par::localKeys(e, keys, l.pieces, nleaves, static_cast<int64_t>(count), type, l.aligned(0));
    Stage k;
    k.count = count;
    k.inBytes = k.outBytes = kb;
    k.input = k.output = keys;
    k.segmentBytes = std::max<size_t>(kb, segmentBytes * kb / sizeof(int64_t));
    k.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool) {
      par::foldKeys(e, out, pieces, p, static_cast<int64_t>(n), type);
    };
    DETCOLL_RETURN_IF_ERROR(runStage(e, t, stream, k));
  }
  // 2. Exact int64 sums, rounded once by the owner of each shard.
  Stage s;
  s.count = count;
  s.inBytes = sizeof(int64_t);
  s.outBytes = es;
  s.output = recv;
  s.segmentBytes = segmentBytes;
  s.encode = [&](size_t begin, size_t n, void* dst) {
    par::encode(e, static_cast<int64_t*>(dst), l.at(begin), nleaves, keys + begin * kb,
                static_cast<int64_t>(n), type, l.aligned(begin));
  };
  s.fold = [&](void* out, const Pieces& pieces, size_t begin, size_t n, bool) {
    // The int64 pieces are read element by element; only the output is stored as vectors.
    par::decode(e, out, pieces, p, keys + begin * kb, static_cast<int64_t>(n), type, op,
                totalLeaves, aligned16({out}));
  };
  return runStage(e, t, stream, s);
}

template <typename Exec>
Status nativeAllreduce(Exec& e, DeviceTransport& t, void* stream, const void* send, void* recv,
                       size_t count, DataType type, ReduceOp op, int64_t divisor) {
  const bool average = op == ReduceOp::kAverage;
  DETCOLL_RETURN_IF_ERROR(t.agree(e.status()));  // the folded contribution's scratch
  DETCOLL_RETURN_IF_ERROR(
      t.nativeAllreduce(send, recv, count, type, average ? ReduceOp::kSum : op, stream));
  if (average) {
    const void* sum[1] = {recv};
    kernels::parallel::foldRankOrder(e, recv, sum, 1, count, type, ReduceOp::kAverage, divisor);
  }
  return e.status();
}

// The allreduce of `mode` over this rank's nleaves leaves; totalLeaves is the number over all
// ranks (the divisor of average). recv may equal a leaf. Arguments already agreed by every rank.
template <typename Exec>
Status allreduce(Exec& e, DeviceTransport& t, void* stream, Mode mode, const void* const* leaves,
                 int nleaves, void* recv, size_t count, DataType type, ReduceOp op,
                 int64_t totalLeaves, size_t segmentBytes) {
  if (count == 0) return Status::ok();
  switch (mode) {
    case Mode::kNative:
      return nativeAllreduce(e, t, stream, contribution(e, leaves, nleaves, count, type, op), recv,
                             count, type, op, totalLeaves);
    case Mode::kOrdered:
      return orderedAllreduce(e, t, stream, contribution(e, leaves, nleaves, count, type, op), recv,
                              count, type, op, totalLeaves, segmentBytes);
    case Mode::kInvariant:
      return invariantAllreduce(e, t, stream, leaves, nleaves, recv, count, type, op, totalLeaves,
                                segmentBytes);
  }
  return Status::internal("unknown mode");
}

}  // namespace detcoll::collective::device_pipeline
