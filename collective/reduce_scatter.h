#pragma once

// Reduce-scatter: the first half of the allreduce schedule (pipeline.h) with the blocks a caller
// chooses. Rank j's block of the reduction, elements [offset_j, offset_j + blocks[j]) of every
// rank's input, ends up on rank j alone. Each element is reduced exactly as the allreduce of the
// same mode reduces it (docs/design.md, "The determinism contract"), so the blocks of a
// reduce-scatter are bit for bit the slices of the allreduce of the same inputs:
//
//   ordered    the rank-order fold of the P pieces
//   invariant  the exact sum of the P pieces rounded once (min and max: exact anyway)
//   native     as ordered: no backend reduce-scatter promises anything the ordered schedule does
//              not, and this one moves the same bytes
//
// Every rank sends each other rank its block once and receives P-1 pieces of its own: (P-1)/P of
// the data, as MPI_Reduce_scatter does.

#include <cstddef>
#include <vector>

#include "collective/pipeline.h"
#include "collective/transport/communicator.h"
#include "collective/transport/exchange.h"
#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective {

struct ReduceScatterOptions {
  Mode mode = Mode::kOrdered;
  const void* send = nullptr;  // the sum of blocks elements
  void* recv = nullptr;        // blocks[rank] elements; not overlapping send
  std::vector<size_t> blocks;  // elements of each rank's block, the same on every rank
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // average divides by the world size
  size_t segmentBytes = 1 << 20;
};

// The CPU path: host buffers, the CPU's kernels, over the communicator. Arguments already agreed.
Status reduceScatter(transport::Communicator& comm, const ReduceScatterOptions& options);

template <typename Kernels>
Status reduceScatterWith(Kernels& k, transport::Exchange& x, const ReduceScatterOptions& o) {
  const int p = x.size();
  if (static_cast<int>(o.blocks.size()) != p) {
    return Status::internal("reduce-scatter with " + std::to_string(o.blocks.size()) +
                            " blocks over " + std::to_string(p) + " ranks");
  }
  Stage s;
  for (size_t b : o.blocks) s.count += b;
  s.inBytes = s.outBytes = dataTypeSize(o.type);
  s.input = o.send;
  s.output = o.recv;
  s.segmentBytes = o.segmentBytes;
  s.blocks = o.blocks;
  if (o.mode == Mode::kInvariant) {
    s.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool vectorized) {
      k.invariantLocal(out, pieces, p, static_cast<int64_t>(n), o.type, o.op, vectorized);
    };
  } else {
    s.fold = [&](void* out, const Pieces& pieces, size_t, size_t n, bool vectorized) {
      k.fold(out, pieces, p, static_cast<int64_t>(n), o.type, o.op, p, vectorized);
    };
  }
  DETCOLL_RETURN_IF_ERROR(runStage(k, x, s));
  return x.agree(k.status());
}

}  // namespace detcoll::collective
