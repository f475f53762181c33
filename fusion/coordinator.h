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
#include <memory>
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
  // The members of process set `id` (ranks in increasing order), or null while the set is not
  // registered here; never asked for set 0 (every rank). Unset: set 0 is the only one.
  std::function<std::shared_ptr<const std::vector<int>>(uint32_t id)> members;
  // Whether set `id` was registered and removed since (its pending requests fail). Unset: never.
  std::function<bool(uint32_t id)> removed;
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
    // The descriptor of the lowest rank that announced it (of a process set other than 0, rank 0
    // may never announce it). Every pending name has one.
    const Descriptor& announced() const {
      size_t r = 0;
      while (r + 1 < submitted.size() && !submitted[r]) ++r;
      return descriptors[r];
    }
  };

  void submit(int rank, const std::string& name, const Descriptor& d, const std::string& error,
              Clock::time_point now);
  // Why a fully announced name cannot run, or an empty string.
  std::string disagreement(const std::string& name, const Pending& p, StatusCode* code) const;
  // The ranks that must announce p before it runs: its process set's members, less the ranks that
  // joined (set 0's allreduces). False while the set is not registered here.
  bool required(const Pending& p, std::vector<int>* ranks) const;
  // The ranks that have joined, or an empty list.
  std::vector<int> joinedRanks() const;
  // Why a request like d cannot run while ranks have joined (what is not an allreduce of set 0),
  // or an empty string.
  std::string joinedRefusal(const Descriptor& d) const;
  // Fails the pending members of a group along with one that failed, with its status code.
  void failGroup(uint64_t groupKey, const std::string& failed, StatusCode code, Response& response);

  const int size_;
  const CoordinatorOptions options_;
  ResponseCache cache_;
  std::map<std::string, Pending> pending_;
  // Join: the ranks that have announced kJoinName since the last join completed, and the last of
  // them (the highest rank among those of the latest cycle).
  std::vector<bool> joined_;
  int lastJoined_ = -1;
};

using collective::describeRanks;

}  // namespace detcoll::fusion
