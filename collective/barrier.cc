#include "collective/barrier.h"

#include "collective/tags.h"

namespace detcoll::collective {

Status barrier(transport::Communicator& comm, const BarrierOptions& o) {
  const int p = comm.size();
  if (p == 1) return Status::ok();
  if (o.useNative && comm.native() != nullptr) return comm.native()->barrier();
  // Round k: a token to rank + 2^k, one from rank - 2^k. After the last round every rank has
  // heard, through some chain, from every other.
  const int r = comm.rank();
  char out = 0;
  char in = 0;
  for (int distance = 1; distance < p; distance <<= 1) {
    std::unique_ptr<transport::Transfer> transfers[2] = {
        comm.irecv(&in, 1, (r - distance + p) % p, kTagBarrier),
        comm.isend(&out, 1, (r + distance) % p, kTagBarrier)};
    DETCOLL_RETURN_IF_ERROR(transport::waitAll(transfers, 2));
  }
  return Status::ok();
}

}  // namespace detcoll::collective
