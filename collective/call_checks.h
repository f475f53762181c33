#pragma once

// The one check of a call's arguments that a rank can make alone (docs/design.md, "Agreement"):
// the blocking collectives (collectives.h) make it before the call agreement, the fusion engine
// (fusion/engine.h) when a request is enqueued. A failure is not returned at once: it travels
// with the call's agreement or negotiation, so that every rank fails the call alike, naming this
// rank.

#include <cstddef>
#include <cstdint>

#include "collective/call_agreement.h"
#include "common/status.h"

namespace detcoll::collective {

// A call's arguments as the caller gave them (dtype and op as raw values).
struct CallArguments {
  CallKind kind = CallKind::kAllreduce;
  // allreduce: this rank's leaves, named "sendbuf" when the caller passed one buffer and
  // "leaves[i]" when it passed leaves
  const void* const* leaves = nullptr;
  int nleaves = 1;
  bool namedLeaves = false;
  const void* send = nullptr;  // allgather
  void* recv = nullptr;        // allreduce and allgather: recvbuf; broadcast: buf
  size_t count = 0;
  int dtype = 0;
  int op = 0;    // allreduce
  int root = 0;  // broadcast
  // reducescatter: the elements of each rank's block (send holds their sum, recv this rank's);
  // alltoall: the elements sent to each rank. ncounts entries, one per rank.
  const uint64_t* counts = nullptr;
  const uint64_t* recvCounts = nullptr;  // alltoall: the elements received from each rank
  size_t ncounts = 0;
};

// The arguments of the blocking calls, as the C API passes them (collectives.cc runs them, the
// collective trace records them: bindings/c/detcoll_trace.cc). `single`: one buffer ("sendbuf"),
// not leaves.
CallArguments reductionCall(const void* const* leaves, int nleaves, bool single, void* recv,
                            size_t count, int dtype, int op);
CallArguments broadcastCall(void* buf, size_t count, int dtype, int root);
CallArguments allgatherCall(const void* send, void* recv, size_t count, int dtype);

// The first thing wrong with `call` on rank `rank` of a world of `size`, or ok: an unknown dtype
// or op, a count whose bytes overflow, null buffers where count > 0, a leaf count outside 1 ..
// kMaxLeavesPerRank, a root that is not a rank, buffers that overlap without being the same
// (allgather: sendbuf anywhere in recvbuf but at this rank's slot; reducescatter and alltoall: any
// overlap), counts that are not one per rank or whose sum overflows.
Status checkCall(const CallArguments& call, int rank, int size);

}  // namespace detcoll::collective
