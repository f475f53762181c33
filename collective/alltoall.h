#pragma once

// Alltoall with counts (MPI_Alltoallv with packed displacements): rank i sends sendCounts[j]
// elements to rank j, the blocks packed in rank order in `send`, and receives recvCounts[j]
// elements from rank j, packed in rank order in `recv`. Bytes are moved, never combined, so the
// result is the same whatever the timing.
//
// The counts are checked first: every rank sends each peer the count it will send, so that a rank
// whose recvCounts[j] is not what rank j sends fails, and every rank fails with it (one agreement
// on the statuses, agreement.h), naming the ranks and counts, before any data moves.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collective/transport/communicator.h"
#include "common/status.h"

namespace detcoll::collective {

struct AlltoallOptions {
  const void* send = nullptr;
  void* recv = nullptr;              // not overlapping send
  std::vector<uint64_t> sendCounts;  // elements to each rank
  std::vector<uint64_t> recvCounts;  // elements from each rank
  size_t elementBytes = 1;
  Status local;  // a failure this rank found before the call: it fails every rank
};

Status alltoall(transport::Communicator& comm, const AlltoallOptions& options);

}  // namespace detcoll::collective
