#include "collective/allgather.h"

#include <algorithm>

#include "collective/tags.h"

namespace detcoll::collective {

Status allgather(transport::Communicator& comm, const AllgatherOptions& o) {
  const int p = comm.size();
  const int r = comm.rank();
  if (o.bytes == 0) return Status::ok();
  if (o.useNative && comm.native() != nullptr && p > 1) {
    return comm.native()->allgather(o.send, o.recv, o.bytes);
  }
  char* out = static_cast<char*>(o.recv);
  if (static_cast<const void*>(out + r * o.bytes) != o.send) {
    std::copy_n(static_cast<const char*>(o.send), o.bytes, out + r * o.bytes);
  }
  const int right = (r + 1) % p;
  const int left = (r - 1 + p) % p;
  // Step s passes block (r - s) to the right and takes block (r - s - 1) from the left.
  for (int s = 0; s < p - 1; ++s) {
    const int sendBlock = (r - s + p) % p;
    const int recvBlock = (r - s - 1 + 2 * p) % p;
    std::unique_ptr<transport::Transfer> transfers[2] = {
        comm.irecv(out + recvBlock * o.bytes, o.bytes, left, kTagAllgather),
        comm.isend(out + sendBlock * o.bytes, o.bytes, right, kTagAllgather)};
    DETCOLL_RETURN_IF_ERROR(transport::waitAll(transfers, 2));
  }
  return Status::ok();
}

}  // namespace detcoll::collective
