#include "collective/transport/communicator.h"

#include <cstdio>
#include <string>

namespace detcoll::collective::transport {

uint64_t Communicator::sentMessages() const {
  uint64_t total = 0;
  for (const auto& count : sent_) total += count.load(std::memory_order_relaxed);
  return total;
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

Status waitAll(std::unique_ptr<Transfer>* transfers, size_t n) {
  Status first;
  for (size_t i = 0; i < n; ++i) {
    if (!transfers[i]) continue;
    Status s = transfers[i]->wait();
    if (first.isOk() && !s.isOk()) first = s;
  }
  return first;
}

std::string secondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace detcoll::collective::transport
