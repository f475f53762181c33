#pragma once

// Allgather: every rank's `bytes` into recv, rank j's at offset j * bytes. The backend's own
// where it has one, else a ring over isend/irecv (bytes are copied, never combined).

#include <cstddef>

#include "collective/transport/communicator.h"

namespace detcoll::collective {

struct AllgatherOptions {
  const void* send = nullptr;  // may be recv's slot of this rank (in place)
  void* recv = nullptr;        // size() * bytes
  size_t bytes = 0;
  bool useNative = true;  // the backend's own allgather, where it has one
};

// The same call on every rank. No argument checks (see call_checks.h).
Status allgather(transport::Communicator& comm, const AllgatherOptions& options);

}  // namespace detcoll::collective
