#pragma once

// The coordinator of the negotiation (rank 0's engine runs it): it collects every rank's
// announcements, and answers with the requests that every rank has announced with the same
// descriptor (ready), the ones they disagree on (DETCOLL_ERR_MISMATCH, naming the ranks), the
// ones a rank found invalid, and the ones that stalled past the shutdown limit
// (DETCOLL_ERR_TIMEOUT, naming the missing ranks; the response then stops every engine). It warns
// about stalls in between.
//
// Pure logic: no communication and no clock of its own, so tests drive it directly. Given the
// same messages it gives the same response; ready requests come in cache-id order, then in name
// order, never in arrival order. The members of a group are ready together, in one response.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "collective/agreement.h"
#include "fusion/negotiation.h"
#include "fusion/response_cache.h"

namespace detcoll::fusion {

struct CoordinatorOptions {
  double stallWarningSeconds = 60;    // warn about a name some ranks lack this long (0: never)
  double stallShutdownSeconds = 600;  // then fail it everywhere (0: never)
  // Receives each stall warning; the engine logs them.
  std::function<void(const std::string&)> warn;
};

class Coordinator {
 public:
  Coordinator(int size, CoordinatorOptions options);

  // messages[r] is rank r's message of this cycle.
  Response process(const std::vector<RankMessage>& messages, Clock::time_point now);

  // Names announced by some ranks and not yet answered.
  size_t pendingCount() const { return pending_.size(); }

 private:
  struct Pending {
    std::vector<bool> submitted;
    std::vector<Descriptor> descriptors;
    std::vector<std::string> errors;
    int count = 0;
    Clock::time_point first;
    Clock::time_point lastWarning;
  };

  void submit(int rank, const std::string& name, const Descriptor& d, const std::string& error,
              Clock::time_point now);
  // Why a fully announced name cannot run, or an empty string.
  std::string disagreement(const std::string& name, const Pending& p, StatusCode* code) const;
  // Fails the pending members of a group along with one that failed, with its status code.
  void failGroup(uint64_t groupKey, const std::string& failed, StatusCode code, Response& response);

  const int size_;
  const CoordinatorOptions options_;
  ResponseCache cache_;
  std::map<std::string, Pending> pending_;
};

using collective::describeRanks;

}  // namespace detcoll::fusion
