#include "collective/broadcast.h"

#include <algorithm>
#include <vector>

#include "collective/tags.h"

namespace detcoll::collective {

Status broadcast(transport::Communicator& comm, const BroadcastOptions& o) {
  const int p = comm.size();
  if (p == 1 || o.bytes == 0) return Status::ok();
  if (o.useNative && comm.native() != nullptr) {
    return comm.native()->broadcast(o.data, o.bytes, o.root);
  }
  const int vrank = (comm.rank() - o.root + p) % p;
  // Binomial tree on ranks relative to the root: the parent clears the lowest set bit; the
  // children add each lower power of two.
  const int lowest = vrank == 0 ? p : (vrank & -vrank);
  const int parent = vrank == 0 ? -1 : (vrank - lowest + o.root) % p;
  std::vector<int> children;
  for (int step = 1; step < lowest && vrank + step < p; step <<= 1) {
    children.push_back((vrank + step + o.root) % p);
  }
  const size_t segment = std::max<size_t>(1, o.segmentBytes);
  std::vector<std::unique_ptr<transport::Transfer>> sends;
  char* bytes = static_cast<char*>(o.data);
  for (size_t offset = 0; offset < o.bytes; offset += segment) {
    const size_t n = std::min(segment, o.bytes - offset);
    if (parent >= 0)
      DETCOLL_RETURN_IF_ERROR(transport::recvBytes(comm, bytes + offset, n, parent, kTagBroadcast));
    for (int child : children) sends.push_back(comm.isend(bytes + offset, n, child, kTagBroadcast));
  }
  return transport::waitAll(sends.data(), sends.size());
}

}  // namespace detcoll::collective
