#pragma once

// The allreduce of every mode, written once over Kernels and an Exchange (pipeline.h): the one
// place that switches on the mode (docs/design.md, "The determinism contract"). The CPU path runs
// it through allreduce(Communicator&, ...) below, the GPU path through deviceAllreduce
// (device_allreduce.h), the fusion engine on its fusion buffers; arguments are already agreed by
// every rank (the call agreement, or the engine's negotiation).
//
//   native     the backend's own allreduce; average divides the sum afterwards
//   ordered    the rank-order fold of every rank's contribution (kernels/fold.h): one leaf, or the
//              rank's leaves folded in order first; average divides by the number of leaves
//   invariant  the exact sum of every leaf, rounded once (kernels/fixed_point.h). When every rank
//              holds one leaf, the leaves travel in the dtype and the owner of each shard reduces
//              its P leaves exactly. Otherwise the buffer is reduced in chunks of one round
//              (P * segmentBytes of int64), so that a chunk's leaves are still in cache when they
//              are read the second time: 1. every element's key over every leaf (a stage of 1- or
//              2-byte keys, max), 2. each rank's leaves encoded and summed to int64 (non-finite
//              leaves as counts, kernels/codec.h), the P sums added exactly and rounded once by the
//              owner. Min and max are order-independent: leaves are folded, then ranks.
//
// When every rank's leaves are already here (small calls: they travelled with the call
// agreement), ordered and invariant reduce them locally, to the same bits. Calls of one round up
// to a limit (AllreduceOptions::wholeExchangeBytes) send every rank's contribution to every rank
// in one exchange and fold all P on each rank: one round of messages where the schedule has two.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collective/pipeline.h"
#include "collective/settings.h"
#include "collective/transport/communicator.h"
#include "collective/transport/exchange.h"
#include "collective/transport/record_board.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kernels/fixed_point.h"

namespace detcoll::collective {

// Every rank's leaves, in rank order, held by this rank.
struct Gathered {
  std::vector<const void*> leaves;
  std::vector<int> counts;  // leaves of each rank
};

constexpr size_t kWholeExchangeAuto = ~size_t{0};

struct AllreduceOptions {
  Mode mode = Mode::kOrdered;
  const void* const* leaves = nullptr;  // this rank's nleaves >= 1 buffers of count elements
  int nleaves = 1;
  void* recv = nullptr;  // may equal a leaf (in place)
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // Leaves over every rank, the divisor of average (at most kernels::kMaxLeaves in invariant
  // mode); 0: one per rank.
  int64_t totalLeaves = 0;
  size_t segmentBytes = 1 << 20;  // input bytes of a shard per round (pipeline.h)
  InvariantTransport invariantTransport = InvariantTransport::kAuto;
  const Gathered* gathered = nullptr;  // every rank's leaves, when they are here
  // Calls that fit one round of the schedule and receive at most this many bytes, (P - 1) times
  // the contribution, send every contribution to every rank in one exchange and fold all P on
  // each rank (modes::wholeExchange); others run the schedule. 0: always the schedule.
  // kWholeExchangeAuto: the host path, allreduce(Communicator&, ...), takes its measured limits
  // (hostWholeExchangeLimit); the device path, whose limits were not measured, the schedule.
  size_t wholeExchangeBytes = kWholeExchangeAuto;
};

// The CPU path: host buffers, the CPU's kernels, over the communicator.
Status allreduce(transport::Communicator& comm, const AllreduceOptions& options);

// Whether the mode reduces leaves that travelled with the call agreement locally (native does
// not: the backend's own allreduce is its point).
inline bool reducesGatheredLeaves(Mode mode) {
  return mode != Mode::kNative;
}

// The agreed number of leaves over every rank, checked: the invariant mode sums at most
// kernels::kMaxLeaves leaves exactly, whatever the count.
inline Status checkTotalLeaves(Mode mode, int64_t total) {
  if (mode == Mode::kInvariant && total > kernels::kMaxLeaves) {
    return Status::invalidArgument(std::to_string(total) +
                                   " leaves in total; the invariant mode sums at most " +
                                   std::to_string(kernels::kMaxLeaves) + " exactly");
  }
  return Status::ok();
}

namespace modes {

// Whether every leaf is 16-byte aligned from element `begin` on.
inline bool leavesAligned(const AllreduceOptions& o, size_t begin) {
  const size_t offset = begin * dataTypeSize(o.type);
  for (int l = 0; l < o.nleaves; ++l) {
    if (!kernels::aligned16({static_cast<const char*>(o.leaves[l]) + offset})) return false;
  }
  return true;
}

// The contribution of a rank holding `n` leaves in ordered and native mode: its one leaf, or its
// leaves folded in order (summed for average) into scratch.
template <typename Kernels>
const void* contribution(Kernels& k, const void* const* leaves, int n, const AllreduceOptions& o) {
  if (n == 1) return leaves[0];
  void* folded = k.template alloc<char>(static_cast<int64_t>(o.count * dataTypeSize(o.type)));
  bool aligned = kernels::aligned16({folded});
  for (int l = 0; l < n; ++l) aligned = aligned && kernels::aligned16({leaves[l]});
  k.fold(folded, k.table(leaves, n), n, static_cast<int64_t>(o.count), o.type,
         o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op, 1, aligned);
  return folded;
}

// The bytes a rank may receive in the host path's whole exchange, by mode and dtype: where it
// beat the schedule (np 2, shared memory, where the schedule's second round costs a rendezvous;
// README, "Every dtype"). Past these, folding the whole buffer on every rank costs more than the
// round saves: sooner where an element's reduction is dear (the invariant mode's exact sums, the
// 16-bit conversions: float16's fold of P pieces never paid off), later where elements are wide
// (float64, int64).
inline size_t hostWholeExchangeLimit(Mode mode, DataType type) {
  constexpr size_t kKiB = 1024;
  constexpr size_t kMiB = 1024 * kKiB;
  const bool ordered = mode == Mode::kOrdered;
  if (!ordered && mode != Mode::kInvariant) return 0;
  switch (type) {
    case DataType::kFloat16:
      return 0;
    case DataType::kBFloat16:
      return ordered ? kMiB : 32 * kKiB;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 2 * kMiB;
    default:  // float32, int32
      return ordered ? kMiB : 256 * kKiB;
  }
}

// Whether a contribution of `bytes` takes the whole exchange: where the schedule would run one
// round, and within the limit.
inline bool exchangesWhole(const transport::Exchange& x, const AllreduceOptions& o, size_t bytes) {
  const size_t p = static_cast<size_t>(x.size());
  const size_t limit = o.wholeExchangeBytes == kWholeExchangeAuto ? 0 : o.wholeExchangeBytes;
  return p > 1 && bytes <= o.segmentBytes * p && (p - 1) * bytes <= limit;
}

// This rank's contribution (`bytes`, at `mine`) to every other rank and theirs here in one
// exchange, then fold(pieces, vectorized) over all P in rank order, on every rank: one round of
// messages where the schedule has two (its reduce-scatter and its allgather), for the price of
// folding P pieces of the whole buffer instead of one shard's. Every rank folds the same pieces in
// the same order, so every rank has the same bits.
template <typename Kernels, typename Fold>
Status wholeExchange(Kernels& k, transport::Exchange& x, const void* mine, size_t bytes,
                     const Fold& fold) {
  const int p = x.size();
  // Every rank's contribution at base + j * stride, this rank's at `mine`, folded in rank order.
  const auto foldAll = [&](const char* base, size_t stride) {
    kernels::Pieces pieces;
    pieces.base = base;
    pieces.stride = stride;
    pieces.own = x.rank();
    pieces.ownPtr = static_cast<const char*>(mine);
    fold(pieces, kernels::aligned16({mine, base}));
  };
  transport::RecordBoard* board = x.board();
  if (board != nullptr && bytes <= board->capacity()) {
    // Every rank on one node: the contributions go through the record board, and every rank folds
    // its peers' where they lie (docs/design.md, "The record board"). No message, no scratch.
    DETCOLL_RETURN_IF_ERROR(board->exchange(mine, bytes));
    // Agreed calls post equal sizes; a difference fails every rank with one text.
    for (int j = 1; j < p; ++j) {
      if (board->recordBytes(j) != board->recordBytes(0)) {
        return Status::mismatch(
            "rank " + std::to_string(j) + " posted " + std::to_string(board->recordBytes(j)) +
            " bytes to the allreduce's exchange, rank 0 " + std::to_string(board->recordBytes(0)));
      }
    }
    foldAll(board->record(0), board->recordStride());
    return Status::ok();
  }
  const size_t slot =
      (bytes + kernels::kVectorBytes - 1) / kernels::kVectorBytes * kernels::kVectorBytes;
  const size_t mark = k.mark();
  char* slots = k.template alloc<char>(static_cast<int64_t>(p * slot));  // this rank's unused
  Status status = x.agree(k.status());  // the scratch, on every rank
  if (status.isOk()) {
    transport::ExchangeGroup group;
    for (int j = 0; j < p; ++j) {
      if (j == x.rank()) continue;
      group.recvs.push_back({slots + j * slot, bytes, j});
      group.sends.push_back({mine, bytes, j});
    }
    status = x.post(group, k.stream());
    if (status.isOk()) status = x.complete(group);
    if (status.isOk()) foldAll(slots, slot);
  }
  k.release(mark);
  return status;
}

template <typename Kernels>
Status native(Kernels& k, transport::Exchange& x, const AllreduceOptions& o, int64_t total) {
  const bool average = o.op == ReduceOp::kAverage;
  const void* send = contribution(k, o.leaves, o.nleaves, o);
  DETCOLL_RETURN_IF_ERROR(x.agree(k.status()));  // the folded contribution's scratch
  DETCOLL_RETURN_IF_ERROR(x.nativeAllreduce(send, o.recv, o.count, o.type,
                                            average ? ReduceOp::kSum : o.op, k.stream()));
  if (average) {
    const void* sum[1] = {o.recv};
    k.fold(o.recv, k.table(sum, 1), 1, static_cast<int64_t>(o.count), o.type, ReduceOp::kAverage,
           total, kernels::aligned16({o.recv}));
  }
  return Status::ok();
}

template <typename Kernels>
Status ordered(Kernels& k, transport::Exchange& x, const AllreduceOptions& o, int64_t total) {
  const int p = x.size();
  if (o.gathered != nullptr) {
    // Every rank's contribution, folded in rank order here (small calls: no allocation).
    constexpr int kOnStack = 16;
    const void* onStack[kOnStack];
    std::vector<const void*> onHeap(p > kOnStack ? p : 0);
    const void** contributions = p > kOnStack ? onHeap.data() : onStack;
    size_t first = 0;
    for (int j = 0; j < p; ++j) {
      contributions[j] =
          contribution(k, o.gathered->leaves.data() + first, o.gathered->counts[j], o);
      first += o.gathered->counts[j];
    }
    k.fold(o.recv, k.table(contributions, p), p, static_cast<int64_t>(o.count), o.type, o.op, total,
           false);
    return Status::ok();
  }
  const void* mine = contribution(k, o.leaves, o.nleaves, o);
  const size_t bytes = o.count * dataTypeSize(o.type);
  if (exchangesWhole(x, o, bytes)) {
    return wholeExchange(k, x, mine, bytes, [&](const Pieces& pieces, bool vectorized) {
      k.fold(o.recv, pieces, p, static_cast<int64_t>(o.count), o.type, o.op, total,
             vectorized && kernels::aligned16({o.recv}));
    });
  }
  Stage s;
  s.count = o.count;
  s.inBytes = s.outBytes = dataTypeSize(o.type);
  s.input = mine;
  s.output = o.recv;
  s.segmentBytes = o.segmentBytes;
  s.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool vectorized) {
    k.fold(out, pieces, p, static_cast<int64_t>(n), o.type, o.op, total, vectorized);
  };
  return runStage(k, x, s);
}

// Pieces in the dtype: one leaf on every rank, reduced exactly by the owner, or min/max (each
// rank's leaves folded first).
template <typename Kernels>
Status invariantLeaves(Kernels& k, transport::Exchange& x, const AllreduceOptions& o) {
  const int p = x.size();
  const size_t es = dataTypeSize(o.type);
  if (exchangesWhole(x, o, o.count * es)) {
    const void* mine = contribution(k, o.leaves, o.nleaves, o);  // min and max: leaves folded
    return wholeExchange(k, x, mine, o.count * es, [&](const Pieces& pieces, bool vectorized) {
      k.invariantLocal(o.recv, pieces, p, static_cast<int64_t>(o.count), o.type, o.op,
                       vectorized && kernels::aligned16({o.recv}));
    });
  }
  const Pieces leaves = k.table(o.leaves, o.nleaves);
  Stage s;
  s.count = o.count;
  s.inBytes = s.outBytes = es;
  s.output = o.recv;
  s.segmentBytes = o.segmentBytes;
  if (o.nleaves == 1) {
    s.input = o.leaves[0];
  } else {
    s.encode = [&](size_t begin, size_t n, void* dst) {
      k.fold(dst, leaves.advanced(begin * es), o.nleaves, static_cast<int64_t>(n), o.type, o.op, 1,
             leavesAligned(o, begin) && kernels::aligned16({dst}));
    };
  }
  s.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool vectorized) {
    k.invariantLocal(out, pieces, p, static_cast<int64_t>(n), o.type, o.op, vectorized);
  };
  return runStage(k, x, s);
}

// Keys, then int64 sums, chunk by chunk.
template <typename Kernels>
Status invariantEncodings(Kernels& k, transport::Exchange& x, const AllreduceOptions& o,
                          int64_t total) {
  const int p = x.size();
  const size_t es = dataTypeSize(o.type);
  const size_t kb = kernels::exponentKeyBytes(o.type);
  const Pieces leaves = k.table(o.leaves, o.nleaves);
  const size_t chunk = std::max<size_t>(1, o.segmentBytes / sizeof(int64_t)) * p;
  char* keys = kb > 0 ? k.template alloc<char>(static_cast<int64_t>(std::min(chunk, o.count) * kb))
                      : nullptr;
  for (size_t begin = 0; begin < o.count; begin += chunk) {
    const size_t n = std::min(chunk, o.count - begin);
    const Pieces at = leaves.advanced(begin * es);
    // 1. Every element's key, on every rank.
    if (kb > 0) {
      k.localKeys(keys, at, o.nleaves, static_cast<int64_t>(n), o.type, leavesAligned(o, begin));
      Stage keyStage;
      keyStage.count = n;
      keyStage.inBytes = keyStage.outBytes = kb;
      keyStage.input = keyStage.output = keys;
      keyStage.segmentBytes = std::max<size_t>(kb, o.segmentBytes * kb / sizeof(int64_t));
      keyStage.fold = [&](void* out, const Pieces& pieces, size_t, size_t m, bool) {
        k.foldKeys(out, pieces, p, static_cast<int64_t>(m), o.type);
      };
      DETCOLL_RETURN_IF_ERROR(runStage(k, x, keyStage));
    }
    // 2. Exact int64 sums, rounded once by the owner of each shard.
    Stage s;
    s.count = n;
    s.inBytes = sizeof(int64_t);
    s.outBytes = es;
    s.output = static_cast<char*>(o.recv) + begin * es;
    s.segmentBytes = o.segmentBytes;
    s.encode = [&](size_t b, size_t m, void* dst) {
      k.encode(static_cast<int64_t*>(dst), at.advanced(b * es), o.nleaves, keys + b * kb,
               static_cast<int64_t>(m), o.type, leavesAligned(o, begin + b));
    };
    s.fold = [&](void* out, const Pieces& pieces, size_t b, size_t m, bool) {
      // The int64 pieces are read element by element; only the output is stored as vectors.
      k.decode(out, pieces, p, keys + b * kb, static_cast<int64_t>(m), o.type, o.op, total,
               kernels::aligned16({out}));
    };
    DETCOLL_RETURN_IF_ERROR(runStage(k, x, s));
  }
  return Status::ok();
}

// Keys, then int64 sums, each through the backend's own allreduce (DETCOLL_INVARIANT_TRANSPORT=mpi:
// its tuned, topology-aware algorithms): the max of the keys and the sum of the encodings are
// exact in any order, so the bits are the other transports'. Every rank decodes every element.
template <typename Kernels>
Status invariantNative(Kernels& k, transport::Exchange& x, const AllreduceOptions& o,
                       int64_t total) {
  const size_t es = dataTypeSize(o.type);
  const size_t kb = kernels::exponentKeyBytes(o.type);
  const Pieces leaves = k.table(o.leaves, o.nleaves);
  // The library pipelines its own allreduce: a fixed chunk bounds the scratch, whatever P.
  const size_t chunk = std::max<size_t>(1, 4 * o.segmentBytes / sizeof(int64_t));
  const size_t most = std::min(chunk, o.count);
  char* keys = kb > 0 ? k.template alloc<char>(static_cast<int64_t>(most * kb)) : nullptr;
  int64_t* sums = k.template alloc<int64_t>(static_cast<int64_t>(most));
  DETCOLL_RETURN_IF_ERROR(x.agree(k.status()));  // the scratch, on every rank
  for (size_t begin = 0; begin < o.count; begin += chunk) {
    const size_t n = std::min(chunk, o.count - begin);
    const Pieces at = leaves.advanced(begin * es);
    const bool aligned = leavesAligned(o, begin);
    if (kb > 0) {
      k.localKeys(keys, at, o.nleaves, static_cast<int64_t>(n), o.type, aligned);
      DETCOLL_RETURN_IF_ERROR(x.nativeMaxKeys(keys, n, kb, k.stream()));
    }
    k.encode(sums, at, o.nleaves, keys, static_cast<int64_t>(n), o.type, aligned);
    DETCOLL_RETURN_IF_ERROR(
        x.nativeAllreduce(sums, sums, n, DataType::kInt64, ReduceOp::kSum, k.stream()));
    void* out = static_cast<char*>(o.recv) + begin * es;
    const void* piece[1] = {sums};
    k.decode(out, k.table(piece, 1), 1, keys, static_cast<int64_t>(n), o.type, o.op, total,
             kernels::aligned16({out}));
  }
  return Status::ok();
}

template <typename Kernels>
Status invariant(Kernels& k, transport::Exchange& x, const AllreduceOptions& o, int64_t total) {
  if (o.gathered != nullptr) {
    // Every leaf of every rank, reduced here.
    k.invariantLocal(o.recv, k.table(o.gathered->leaves.data(), static_cast<int>(total)),
                     static_cast<int>(total), static_cast<int64_t>(o.count), o.type, o.op, false);
    return Status::ok();
  }
  // Each rank holds at least one leaf, so every rank holds exactly one when the total is P.
  const bool oneLeafEach = total == x.size();
  InvariantTransport transport = o.invariantTransport;
  if (transport == InvariantTransport::kAuto) {
    transport = oneLeafEach ? InvariantTransport::kLeaves : InvariantTransport::kEncodings;
  }
  if (transport == InvariantTransport::kLeaves && !oneLeafEach) {
    return Status::internal("the invariant leaf transport needs one leaf on every rank, not " +
                            std::to_string(total) + " leaves over " + std::to_string(x.size()) +
                            " ranks");
  }
  const bool pick = o.op == ReduceOp::kMin || o.op == ReduceOp::kMax;
  if (transport == InvariantTransport::kLeaves || pick) return invariantLeaves(k, x, o);
  if (transport == InvariantTransport::kMpi) return invariantNative(k, x, o, total);
  return invariantEncodings(k, x, o, total);
}

}  // namespace modes

// The allreduce of o.mode over this rank's leaves, with these kernels over this exchange. A
// kernel that failed on any rank fails the call on every rank (the last agreement), so that no
// rank takes a result another rank did not finish for success.
template <typename Kernels>
Status allreduceWith(Kernels& k, transport::Exchange& x, const AllreduceOptions& o) {
  const int64_t total = o.totalLeaves > 0 ? o.totalLeaves : x.size();
  DETCOLL_RETURN_IF_ERROR(checkTotalLeaves(o.mode, total));
  if (o.count == 0) return Status::ok();
  Status status;
  switch (o.mode) {
    case Mode::kNative:
      status = modes::native(k, x, o, total);
      break;
    case Mode::kOrdered:
      status = modes::ordered(k, x, o, total);
      break;
    case Mode::kInvariant:
      status = modes::invariant(k, x, o, total);
      break;
    default:
      return Status::internal("unknown mode " + std::to_string(static_cast<int>(o.mode)));
  }
  DETCOLL_RETURN_IF_ERROR(status);
  return x.agree(k.status());
}

}  // namespace detcoll::collective
