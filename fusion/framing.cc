#include "fusion/framing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "collective/agreement.h"
#include "fusion/request.h"

namespace detcoll::fusion {

using collective::describeRanks;
using collective::transport::Communicator;

Status pollAll(Communicator& comm, TransferSet& requests, const std::vector<int>& peers,
               double limitSeconds) {
  constexpr auto kSpin = std::chrono::microseconds(500);
  std::vector<bool> done(requests.size(), false);
  size_t remaining = requests.size();
  Status first;
  const Clock::time_point start = Clock::now();
  Clock::time_point nextLook = start + std::chrono::milliseconds(1);
  for (;;) {
    for (size_t i = 0; i < requests.size(); ++i) {
      Status status;
      if (done[i] || !requests[i]->test(&status)) continue;
      done[i] = true;
      --remaining;
      if (first.isOk() && !status.isOk()) first = status;
    }
    if (remaining == 0) break;
    const Clock::time_point now = Clock::now();
    if (now >= nextLook) {
      nextLook = now + std::chrono::milliseconds(1);
      Status healthy = comm.health();
      if (healthy.isOk() && limitSeconds > 0 &&
          std::chrono::duration<double>(now - start).count() >= limitSeconds) {
        std::vector<int> silent;
        for (size_t i = 0; i < requests.size(); ++i) {
          if (!done[i] && (silent.empty() || silent.back() != peers[i])) silent.push_back(peers[i]);
        }
        char limit[32];
        std::snprintf(limit, sizeof limit, "%.1f s", limitSeconds);
        comm.abandon(Status::timeout(describeRanks(silent) +
                                     " stopped answering: the negotiation on rank " +
                                     std::to_string(comm.rank()) + " heard nothing for " + limit +
                                     " (the stall limit, DETCOLL_STALL_SHUTDOWN_SECONDS)"));
        healthy = comm.health();
      }
      if (!healthy.isOk()) {
        requests.clear();  // released at once on an abandoned communicator
        return healthy;
      }
    }
    if (now - start < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  requests.clear();
  return first;
}

Framed frame(const std::vector<uint8_t>& payload) {
  Framed f;
  const uint64_t total = payload.size();
  const size_t head = std::min<size_t>(payload.size(), kFirstBytes - sizeof(total));
  f.first.resize(sizeof(total) + head);
  std::memcpy(f.first.data(), &total, sizeof(total));
  if (head > 0) std::memcpy(f.first.data() + sizeof(total), payload.data(), head);
  f.rest = payload.data() + head;
  f.restBytes = payload.size() - head;
  return f;
}

void postFramed(Communicator& comm, const Framed& f, int peer, int tag, TransferSet& sends) {
  sends.push_back(comm.isend(f.first.data(), f.first.size(), peer, tag));
  if (f.restBytes > 0) sends.push_back(comm.isend(f.rest, f.restBytes, peer, tag));
}

Status finishFramed(Communicator& comm, const std::vector<uint8_t>& first, int peer, int tag,
                    std::vector<uint8_t>* payload) {
  uint64_t total = 0;
  std::memcpy(&total, first.data(), sizeof(total));
  const size_t head = std::min<size_t>(total, kFirstBytes - sizeof(total));
  payload->assign(first.begin() + sizeof(total), first.begin() + sizeof(total) + head);
  if (total > head) {
    payload->resize(total);
    DETCOLL_RETURN_IF_ERROR(
        collective::transport::recvBytes(comm, payload->data() + head, total - head, peer, tag));
  }
  return Status::ok();
}

}  // namespace detcoll::fusion
