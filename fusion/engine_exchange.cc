// The fusion engine's negotiation (engine.h; docs/design.md, "One asynchronous call"): each
// cycle, every rank sends the coordinator (rank 0) its message and receives the response.

#include <cstdint>
#include <vector>

#include "fusion/engine.h"
#include "fusion/framing.h"
#include "fusion/tags.h"

namespace detcoll::fusion {
namespace {

// How much longer than the coordinator a rank waits for the negotiation before it gives up.
constexpr double kCoordinatorGraceSeconds = 2;

}  // namespace

Status Engine::exchange(const RankMessage& mine, Response* response) {
  const int p = comm_.size();
  TransferSet requests;
  // A rank that stops answering is one whose engine sent nothing for the stall limit. The
  // coordinator notices first and tells every rank; the others wait a little longer, to hear it
  // from the coordinator rather than blame it.
  const double limit = options_.stallShutdownSeconds;
  if (comm_.rank() != 0) {
    const std::vector<uint8_t> payload = encode(mine);
    const Framed out = frame(payload);
    std::vector<uint8_t> first(kFirstBytes);
    requests.push_back(comm_.irecv(first.data(), first.size(), 0, kTagResponse));
    postFramed(comm_, out, 0, kTagNegotiation, requests);
    DETCOLL_RETURN_IF_ERROR(pollAll(comm_, requests, std::vector<int>(requests.size(), 0),
                                    limit > 0 ? limit + kCoordinatorGraceSeconds : 0));
    std::vector<uint8_t> answer;
    DETCOLL_RETURN_IF_ERROR(finishFramed(comm_, first, 0, kTagResponse, &answer));
    return decode(answer.data(), answer.size(), response);
  }
  std::vector<std::vector<uint8_t>> firsts(p, std::vector<uint8_t>(kFirstBytes));
  std::vector<int> peers;
  for (int r = 1; r < p; ++r) {
    requests.push_back(comm_.irecv(firsts[r].data(), kFirstBytes, r, kTagNegotiation));
    peers.push_back(r);
  }
  DETCOLL_RETURN_IF_ERROR(pollAll(comm_, requests, peers, limit));
  std::vector<RankMessage> messages(p);
  messages[0] = mine;
  for (int r = 1; r < p; ++r) {
    std::vector<uint8_t> payload;
    DETCOLL_RETURN_IF_ERROR(finishFramed(comm_, firsts[r], r, kTagNegotiation, &payload));
    DETCOLL_RETURN_IF_ERROR(decode(payload.data(), payload.size(), &messages[r]));
  }
  *response = coordinator_->process(messages, Clock::now());
  response->fusionThresholdBytes = fusionThresholdBytes_.load();
  const std::vector<uint8_t> answer = encode(*response);
  const Framed out = frame(answer);
  peers.clear();
  for (int r = 1; r < p; ++r) {
    postFramed(comm_, out, r, kTagResponse, requests);
    peers.resize(requests.size(), r);
  }
  return pollAll(comm_, requests, peers, limit);
}

}  // namespace detcoll::fusion
