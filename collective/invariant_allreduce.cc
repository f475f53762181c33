#include "collective/invariant_allreduce.h"

#include <algorithm>
#include <string>
#include <vector>

#include "collective/direct_allreduce.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"

namespace detcoll::collective {
namespace {

// The leaves' elements from `begin` on.
class LeafView {
 public:
  LeafView(const void* const* leaves, int nleaves, size_t elementBytes)
      : leaves_(leaves, leaves + nleaves), offset_(nleaves), elementBytes_(elementBytes) {}
  const void* const* at(size_t begin) {
    for (size_t l = 0; l < leaves_.size(); ++l) {
      offset_[l] = static_cast<const char*>(leaves_[l]) + begin * elementBytes_;
    }
    return offset_.data();
  }

 private:
  std::vector<const void*> leaves_;
  std::vector<const void*> offset_;
  size_t elementBytes_;
};

Status minMax(Communicator& comm, const void* const* leaves, int nleaves, void* recv, size_t count,
              DataType type, ReduceOp op, size_t segmentBytes) {
  const size_t es = dataTypeSize(type);
  LeafView view(leaves, nleaves, es);
  DirectAllreduce spec;
  spec.count = count;
  spec.inBytes = spec.outBytes = es;
  spec.output = recv;
  spec.segmentBytes = segmentBytes;
  if (nleaves == 1) {
    spec.input = leaves[0];
  } else {
    spec.encode = [&](size_t begin, size_t n, void* dst) {
      kernels::foldRankOrder(dst, view.at(begin), nleaves, n, type, op, 1);
    };
  }
  spec.fold = [&](void* out, const void* const* pieces, int p, size_t, size_t n) {
    kernels::foldRankOrder(out, pieces, p, n, type, op, 1);
  };
  return runDirectAllreduce(comm, spec);
}

// One chunk of elements [begin, begin + n): keys, non-finite counts, sums. The chunk's leaves
// are read twice (keys, then encoding) while they are still in cache.
Status reduceChunk(Communicator& comm, const void* const* leaves, int nleaves, char* recv,
                   size_t begin, size_t n, DataType type, ReduceOp op, int64_t totalLeaves,
                   size_t segmentBytes, std::vector<uint8_t>& keys) {
  const size_t es = dataTypeSize(type);
  const size_t kb = kernels::exponentKeyBytes(type);
  LeafView view(leaves, nleaves, es);
  const void* const* chunk = view.at(begin);

  // 1. Every element's key, on every rank.
  keys.resize(n * kb);
  if (kb > 0) {
    DirectAllreduce spec;
    spec.count = n;
    spec.inBytes = spec.outBytes = kb;
    spec.output = keys.data();
    spec.segmentBytes = segmentBytes * kb / sizeof(int64_t);
    spec.encode = [&](size_t b, size_t m, void* dst) {
      kernels::localMaxKeys(dst, chunk, nleaves, b, m, type);
    };
    spec.fold = [&](void* out, const void* const* pieces, int p, size_t, size_t m) {
      kernels::foldMaxKeys(out, pieces, p, m, type);
    };
    DETCOLL_RETURN_IF_ERROR(runDirectAllreduce(comm, spec));
  }

  // 2. Non-finite leaves, counted before the sums may write over them (recv may be a leaf).
  std::vector<int64_t> counts;
  const size_t nonFinite = kb > 0 ? kernels::countNonFiniteKeys(keys.data(), n, type) : 0;
  if (nonFinite > 0) {
    counts.assign(3 * nonFinite, 0);
    kernels::countNonFinite(counts.data(), chunk, nleaves, keys.data(), n, type);
    DirectAllreduce spec;
    spec.count = counts.size();
    spec.inBytes = spec.outBytes = sizeof(int64_t);
    spec.input = spec.output = counts.data();
    spec.segmentBytes = segmentBytes;
    spec.fold = [](void* out, const void* const* pieces, int p, size_t, size_t m) {
      kernels::foldRankOrder(out, pieces, p, m, DataType::kInt64, ReduceOp::kSum, 1);
    };
    DETCOLL_RETURN_IF_ERROR(runDirectAllreduce(comm, spec));
  }

  // 3. Exact sums, rounded once by the owner of each shard.
  DirectAllreduce spec;
  spec.count = n;
  spec.inBytes = sizeof(int64_t);
  spec.outBytes = es;
  spec.output = recv + begin * es;
  spec.segmentBytes = segmentBytes;
  spec.encode = [&](size_t b, size_t m, void* dst) {
    kernels::encodeLeaves(static_cast<int64_t*>(dst), chunk, nleaves, keys.data() + b * kb, b, m,
                          type);
  };
  spec.fold = [&](void* out, const void* const* pieces, int p, size_t b, size_t m) {
    kernels::decodeSums(out, reinterpret_cast<const int64_t* const*>(pieces), p,
                        keys.data() + b * kb, m, type, op, totalLeaves);
  };
  DETCOLL_RETURN_IF_ERROR(runDirectAllreduce(comm, spec));
  if (nonFinite > 0) {
    kernels::applyNonFinite(recv + begin * es, counts.data(), keys.data(), n, type);
  }
  return Status::ok();
}

// Every rank holds one leaf: the leaves themselves travel, and the owner of each shard reduces
// its P leaves exactly (kernels::invariantReduceLocal), which is the same function of the
// multiset of leaves as the encoded passes, without the key pass and with dtype-sized pieces
// instead of int64 ones.
Status reduceLeaves(Communicator& comm, const void* leaf, void* recv, size_t count, DataType type,
                    ReduceOp op, size_t segmentBytes) {
  DirectAllreduce spec;
  spec.count = count;
  spec.inBytes = spec.outBytes = dataTypeSize(type);
  spec.input = leaf;
  spec.output = recv;
  spec.segmentBytes = segmentBytes;
  spec.fold = [&](void* out, const void* const* pieces, int p, size_t, size_t n) {
    kernels::invariantReduceLocal(out, pieces, p, n, type, op);
  };
  return runDirectAllreduce(comm, spec);
}

}  // namespace

Status invariantAllreduce(Communicator& comm, const void* const* leaves, int nleaves, void* recv,
                          size_t count, DataType type, ReduceOp op, int64_t totalLeaves,
                          size_t segmentBytes, InvariantTransport transport) {
  if (count == 0) return Status::ok();
  // Each rank holds at least one leaf, so every rank holds exactly one when the total is P.
  const bool oneLeafEach = totalLeaves == comm.size();
  if (transport == InvariantTransport::kAuto) {
    transport = oneLeafEach ? InvariantTransport::kLeaves : InvariantTransport::kEncodings;
  }
  if (transport == InvariantTransport::kLeaves) {
    if (!oneLeafEach) {
      return Status::internal("the invariant leaf transport needs one leaf on every rank, not " +
                              std::to_string(totalLeaves) + " leaves over " +
                              std::to_string(comm.size()) + " ranks");
    }
    return reduceLeaves(comm, leaves[0], recv, count, type, op, segmentBytes);
  }
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
    return minMax(comm, leaves, nleaves, recv, count, type, op, segmentBytes);
  }
  // Chunks of one pipeline round each: P shards of segmentBytes of int64 encodings.
  const size_t chunk = std::max<size_t>(1, segmentBytes / sizeof(int64_t)) * comm.size();
  std::vector<uint8_t> keys;
  for (size_t begin = 0; begin < count; begin += chunk) {
    DETCOLL_RETURN_IF_ERROR(reduceChunk(comm, leaves, nleaves, static_cast<char*>(recv), begin,
                                        std::min(chunk, count - begin), type, op, totalLeaves,
                                        segmentBytes, keys));
  }
  return Status::ok();
}

}  // namespace detcoll::collective
