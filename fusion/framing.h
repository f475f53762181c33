#pragma once

// How the fusion engine's negotiation travels (engine.h): every wait polled, with the stall limit
// of docs/design.md, "Failures"; messages framed so that one of any size takes one receive of a
// fixed size, plus a second only when it is longer.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collective/transport/communicator.h"
#include "common/status.h"

namespace detcoll::fusion {

using TransferSet = std::vector<std::unique_ptr<collective::transport::Transfer>>;

// Waits for every transfer by polling: spinning (with yields) for a short while, since the other
// ranks usually arrive within microseconds of each other, then sleeping between polls, so that an
// engine waiting for a slower rank leaves the cores to the training. Returns the first failure.
//
// peers[i] is the rank transfers[i] waits for. A wait past limitSeconds (0: never) abandons the
// communicator with a TIMEOUT naming the ranks that did not answer; a peer's abandonment notice
// ends the wait too (collective/transport/communicator.h). Clears `transfers`.
Status pollAll(collective::transport::Communicator& comm, TransferSet& transfers,
               const std::vector<int>& peers, double limitSeconds);

// The first message carries the total size and up to kFirstBytes; a longer payload continues in
// a second message with the same tag.
constexpr size_t kFirstBytes = 64 << 10;

struct Framed {
  std::vector<uint8_t> first;
  const uint8_t* rest = nullptr;  // into the payload, which must outlive the sends
  size_t restBytes = 0;
};

Framed frame(const std::vector<uint8_t>& payload);
void postFramed(collective::transport::Communicator& comm, const Framed& f, int peer, int tag,
                TransferSet& sends);
// Completes a framed receive whose first message (kFirstBytes posted) has arrived in `first`.
Status finishFramed(collective::transport::Communicator& comm, const std::vector<uint8_t>& first,
                    int peer, int tag, std::vector<uint8_t>* payload);

}  // namespace detcoll::fusion
