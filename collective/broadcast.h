#pragma once

// Broadcast of `bytes` from `root` to every rank: the backend's own where it has one, else a
// pipelined binomial tree over isend/irecv (the bytes are copied, never combined, so any schedule
// gives the same result).

#include <cstddef>

#include "collective/transport/communicator.h"

namespace detcoll::collective {

struct BroadcastOptions {
  void* data = nullptr;
  size_t bytes = 0;
  int root = 0;
  // The tree forwards in segments of this size, so that a child passes one on while the next
  // arrives.
  size_t segmentBytes = 1 << 20;
  bool useNative = true;  // the backend's own broadcast, where it has one
};

// The same call on every rank. No argument checks (see call_checks.h).
Status broadcast(transport::Communicator& comm, const BroadcastOptions& options);

}  // namespace detcoll::collective
