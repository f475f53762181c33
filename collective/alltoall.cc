#include "collective/alltoall.h"

#include <cstring>
#include <memory>
#include <string>

#include "collective/agreement.h"
#include "collective/tags.h"

namespace detcoll::collective {

Status alltoall(transport::Communicator& comm, const AlltoallOptions& o) {
  const int p = comm.size();
  const int me = comm.rank();
  Status local = o.local;
  if (local.isOk() &&
      (static_cast<int>(o.sendCounts.size()) != p || static_cast<int>(o.recvCounts.size()) != p)) {
    local = Status::invalidArgument("alltoall needs " + std::to_string(p) +
                                    " send and receive counts, one for each rank");
  }
  // 1. The counts each peer sends here. Every rank takes part, a failed one with kFailed for
  // every count, so that no peer waits for it.
  constexpr uint64_t kFailed = ~uint64_t{0};
  std::vector<uint64_t> outgoing(p, kFailed);
  if (local.isOk()) outgoing = o.sendCounts;
  std::vector<uint64_t> incoming(p, kFailed);
  std::vector<std::unique_ptr<transport::Transfer>> counts;
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    counts.push_back(comm.irecv(&incoming[j], sizeof(uint64_t), j, kTagAlltoall));
    counts.push_back(comm.isend(&outgoing[j], sizeof(uint64_t), j, kTagAlltoall));
  }
  incoming[me] = outgoing[me];
  DETCOLL_RETURN_IF_ERROR(transport::waitAll(counts.data(), counts.size()));
  for (int j = 0; j < p && local.isOk(); ++j) {
    // A peer that failed says so itself in the agreement.
    if (incoming[j] != kFailed && incoming[j] != o.recvCounts[j]) {
      local =
          Status::mismatch("rank " + std::to_string(j) + " sends " + std::to_string(incoming[j]) +
                           " elements to rank " + std::to_string(me) + ", which expects " +
                           std::to_string(o.recvCounts[j]));
    }
  }
  DETCOLL_RETURN_IF_ERROR(agreeOnStatus(comm, local));
  // 2. The data, every transfer posted at once.
  const char* send = static_cast<const char*>(o.send);
  char* recv = static_cast<char*>(o.recv);
  std::vector<std::unique_ptr<transport::Transfer>> transfers;
  size_t sendOffset = 0;
  size_t recvOffset = 0;
  for (int j = 0; j < p; ++j) {
    const size_t out = o.sendCounts[j] * o.elementBytes;
    const size_t in = o.recvCounts[j] * o.elementBytes;
    if (j == me) {
      if (out > 0) std::memcpy(recv + recvOffset, send + sendOffset, out);
    } else {
      if (in > 0) transfers.push_back(comm.irecv(recv + recvOffset, in, j, kTagAlltoall));
      if (out > 0) transfers.push_back(comm.isend(send + sendOffset, out, j, kTagAlltoall));
    }
    sendOffset += out;
    recvOffset += in;
  }
  return transport::waitAll(transfers.data(), transfers.size());
}

}  // namespace detcoll::collective
