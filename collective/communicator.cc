#include "collective/communicator.h"

#include <algorithm>
#include <vector>

#include "collective/ring_allreduce.h"
#include "collective/tags.h"

namespace detcoll::collective {
namespace {

constexpr size_t kBroadcastSegment = 1 << 20;

}  // namespace

Status Communicator::nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                     ReduceOp op) {
  return ringAllreduce(*this, send, recv, count, type, op);
}

Status Communicator::broadcast(void* data, size_t bytes, int root) {
  const int p = size();
  if (p == 1 || bytes == 0) return Status::ok();
  const int vrank = (rank() - root + p) % p;
  // Binomial tree on ranks relative to the root: the parent clears the lowest set bit; the
  // children add each lower power of two. Segments let a child forward while more arrives.
  const int lowest = vrank == 0 ? p : (vrank & -vrank);
  const int parent = vrank == 0 ? -1 : (vrank - lowest + root) % p;
  std::vector<int> children;
  for (int step = 1; step < lowest && vrank + step < p; step <<= 1) {
    children.push_back((vrank + step + root) % p);
  }
  std::vector<std::unique_ptr<Request>> sends;
  char* bytesPtr = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kBroadcastSegment) {
    const size_t n = std::min(kBroadcastSegment, bytes - offset);
    if (parent >= 0)
      DETCOLL_RETURN_IF_ERROR(recvBytes(*this, bytesPtr + offset, n, parent, kTagBroadcast));
    for (int child : children) sends.push_back(isend(bytesPtr + offset, n, child, kTagBroadcast));
  }
  return waitAll(sends.data(), sends.size());
}

Status Communicator::allgather(const void* send, void* recv, size_t bytes) {
  const int p = size();
  const int r = rank();
  char* out = static_cast<char*>(recv);
  if (bytes > 0 && static_cast<const void*>(out + r * bytes) != send) {
    std::copy_n(static_cast<const char*>(send), bytes, out + r * bytes);
  }
  if (p == 1 || bytes == 0) return Status::ok();
  const int right = (r + 1) % p;
  const int left = (r - 1 + p) % p;
  // Step s passes block (r - s) to the right and takes block (r - s - 1) from the left.
  for (int s = 0; s < p - 1; ++s) {
    const int sendBlock = (r - s + p) % p;
    const int recvBlock = (r - s - 1 + 2 * p) % p;
    std::unique_ptr<Request> requests[2] = {
        irecv(out + recvBlock * bytes, bytes, left, kTagAllgather),
        isend(out + sendBlock * bytes, bytes, right, kTagAllgather)};
    DETCOLL_RETURN_IF_ERROR(waitAll(requests, 2));
  }
  return Status::ok();
}

Status recvBytes(Communicator& comm, void* data, size_t bytes, int peer, int tag) {
  size_t received = 0;
  DETCOLL_RETURN_IF_ERROR(comm.irecv(data, bytes, peer, tag)->wait(&received));
  if (received != bytes) {
    return Status::internal("expected " + std::to_string(bytes) + " bytes from rank " +
                            std::to_string(peer) + ", received " + std::to_string(received));
  }
  return Status::ok();
}

Status waitAll(std::unique_ptr<Request>* requests, size_t n) {
  Status first;
  for (size_t i = 0; i < n; ++i) {
    if (!requests[i]) continue;
    Status s = requests[i]->wait();
    if (first.isOk() && !s.isOk()) first = s;
  }
  return first;
}

}  // namespace detcoll::collective
