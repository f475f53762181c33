#include "fusion/coordinator.h"

#include <chrono>
#include <cstdio>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/names.h"

namespace detcoll::fusion {
namespace {

double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

constexpr auto kPartialWindow = std::chrono::milliseconds(5);

}  // namespace

Coordinator::Coordinator(int size, CoordinatorOptions options)
    : size_(size), options_(std::move(options)), joined_(size, false) {}

std::vector<int> Coordinator::joinedRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (joined_[r]) ranks.push_back(r);
  }
  return ranks;
}

bool Coordinator::required(const Pending& p, std::vector<int>* ranks) const {
  ranks->clear();
  const Descriptor& d = p.announced();
  if (d.processSet != 0) {
    const auto members = options_.members ? options_.members(d.processSet) : nullptr;
    if (!members) return false;
    *ranks = *members;
    return true;
  }
  // After join, a rank that joined counts as having announced every allreduce of set 0 (it takes
  // part with zeros); the join itself waits for every rank.
  for (int r = 0; r < size_; ++r) {
    if (d.kind == RequestKind::kJoin || !joined_[r] || p.submitted[r]) ranks->push_back(r);
  }
  return true;
}

void Coordinator::submit(int rank, const std::string& name, const Descriptor& d,
                         const std::string& error, Clock::time_point now) {
  auto [it, fresh] = pending_.try_emplace(name);
  Pending& p = it->second;
  if (fresh) {
    p.submitted.assign(size_, false);
    p.descriptors.resize(size_);
    p.errors.resize(size_);
    p.first = p.lastWarning = now;
  }
  if (p.submitted[rank]) return;  // a rank announces a request once; keep the first
  p.submitted[rank] = true;
  p.descriptors[rank] = d;
  p.errors[rank] = error;
  ++p.count;
  if (d.kind == RequestKind::kJoin && error.empty()) {
    joined_[rank] = true;
    lastJoined_ = rank;
  }
}

std::string Coordinator::disagreement(const std::string& name, const Pending& p,
                                      StatusCode* code) const {
  const std::string what = describeRequest(name, p.announced());
  // The same verdict and wording as every agreement (collective/agreement.h): local failures
  // first, then the ranks grouped by what they announced.
  std::vector<Status> local(size_);
  for (int r = 0; r < size_; ++r) {
    if (!p.errors[r].empty()) local[r] = Status::invalidArgument(p.errors[r]);
  }
  const Status invalid = collective::verdict(local);
  if (!invalid.isOk()) {
    *code = invalid.code();
    return what + ": " + invalid.message();
  }
  // Grouped over the ranks that announced it (a process set's members; not the ranks that joined).
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (p.submitted[r]) ranks.push_back(r);
  }
  collective::RankGroups groups = collective::groupRanks(
      static_cast<int>(ranks.size()),
      [&](int a, int b) { return p.descriptors[ranks[a]] == p.descriptors[ranks[b]]; });
  if (groups.size() == 1) {
    const std::string joined = joinedRefusal(p.descriptors[ranks[0]]);
    if (joined.empty()) return "";
    *code = StatusCode::kInvalidArgument;
    return what + ": " + joined;
  }
  for (auto& group : groups) {
    for (int& index : group) index = ranks[index];
  }
  *code = StatusCode::kMismatch;
  return what + ": ranks disagree: " +
         collective::describeGroups(
             groups, [&](int r) { return describe(p.descriptors[r]); },
             collective::Phrase::kRanksHaveValue);
}

std::string Coordinator::joinedRefusal(const Descriptor& d) const {
  const std::vector<int> joined = joinedRanks();
  if (d.processSet != 0 || d.kind == RequestKind::kAllreduce || d.kind == RequestKind::kJoin ||
      joined.empty()) {
    return "";
  }
  return describeRanks(joined) + (joined.size() == 1 ? " has" : " have") +
         " joined; until every rank has joined, only allreduces run (the ranks that joined "
         "contribute zeros), as in Horovod";
}

void Coordinator::failGroup(uint64_t groupKey, const std::string& failed, StatusCode code,
                            Response& response) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const Pending& p = it->second;
    bool member = false;
    for (int r = 0; r < size_ && !member; ++r) {
      member =
          p.submitted[r] && p.descriptors[r].groupSize > 1 && p.descriptors[r].groupKey == groupKey;
    }
    if (!member) {
      ++it;
      continue;
    }
    response.errors.push_back(
        {it->first, Status(code, quotedName(it->first) + " was enqueued in a group with " +
                                     quotedName(failed) + ", which failed")});
    it = pending_.erase(it);
  }
}

Response Coordinator::process(const std::vector<RankMessage>& messages, Clock::time_point now) {
  Response response;
  for (int r = 0; r < size_; ++r) {
    const RankMessage& m = messages[r];
    if (m.shutdown && !response.shutdown) {
      response.shutdown = true;
      response.shutdownCode = StatusCode::kNotInitialized;
      response.shutdownReason = "rank " + std::to_string(r) + " shut detcoll down";
    }
    for (uint32_t id : m.cached.ids()) {
      if (cache_.contains(id)) submit(r, cache_.name(id), cache_.descriptor(id), "", now);
    }
    for (const Announcement& a : m.announced) submit(r, a.name, a.descriptor, a.error, now);
  }
  if (response.shutdown) return response;  // every rank fails what it has pending

  // Names every rank has announced: ready, or failed everywhere.
  std::vector<std::string> candidates;
  std::unordered_map<uint64_t, uint32_t> groupCandidates;
  std::vector<std::pair<std::string, Status>> failures;
  std::vector<int> needed;
  for (const auto& [name, p] : pending_) {
    if (!required(p, &needed)) {
      // Its process set is not registered here yet, or was removed with this request in flight
      // (a misuse: a set's requests must complete before it is removed), which fails it.
      if (options_.removed && options_.removed(p.announced().processSet)) {
        failures.emplace_back(
            name, Status::invalidArgument(describeRequest(name, p.announced()) +
                                          ": the process set was removed while the request was "
                                          "in flight; its requests must complete first"));
      }
      continue;
    }
    // While ranks have joined, only allreduces can run: any other request of set 0 fails at once
    // on the ranks that made it, without waiting for the others to make it too (as in Horovod;
    // the ranks that did not join may never make it, nor the ranks that did).
    if (const std::string joined = joinedRefusal(p.announced()); !joined.empty()) {
      failures.emplace_back(
          name, Status::invalidArgument(describeRequest(name, p.announced()) + ": " + joined));
      continue;
    }
    bool complete = true;
    for (int r : needed) complete = complete && p.submitted[r];
    if (!complete) continue;
    StatusCode code = StatusCode::kSuccess;
    std::string why = disagreement(name, p, &code);
    if (!why.empty()) {
      failures.emplace_back(name, Status(code, std::move(why)));
      continue;
    }
    candidates.push_back(name);
    const Descriptor& d = p.announced();
    if (d.groupSize > 1) ++groupCandidates[d.groupKey];
  }
  // Each failed name gets its own error; then the other pending members of their groups fail.
  std::vector<std::tuple<uint64_t, std::string, StatusCode>> failedGroups;
  for (auto& [name, status] : failures) {
    const auto it = pending_.find(name);
    const Descriptor d = it->second.announced();
    pending_.erase(it);
    const StatusCode code = status.code();
    response.errors.push_back({name, std::move(status)});
    if (d.groupSize > 1) failedGroups.emplace_back(d.groupKey, name, code);
  }
  for (const auto& [key, name, code] : failedGroups) failGroup(key, name, code, response);
  for (const std::string& name : candidates) {
    const auto it = pending_.find(name);
    if (it == pending_.end()) continue;  // failed with its group
    const Descriptor d = it->second.announced();
    if (d.groupSize > 1 && groupCandidates[d.groupKey] < d.groupSize) continue;  // wait for all
    if (const auto id = cache_.find(name, d)) {
      response.cachedReady.set(*id);
    } else {
      response.ready.push_back({name, d});
    }
    pending_.erase(it);
  }
  for (const ReadyEntry& e : response.ready) cache_.record(e.name, e.descriptor);
  // The join is ready once every rank has joined: it returns the last, and the next starts afresh.
  const auto joinReady = [&](uint32_t id) { return cache_.name(id) == kJoinName; };
  bool joinDone = false;
  for (const ReadyEntry& e : response.ready) joinDone = joinDone || e.name == kJoinName;
  for (uint32_t id : response.cachedReady.ids()) joinDone = joinDone || joinReady(id);
  if (joinDone) {
    response.lastJoined = lastJoined_;
    joined_.assign(size_, false);
    lastJoined_ = -1;
  }

  // Stalls: names some ranks have not announced.
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    const double age = secondsBetween(p.first, now);
    std::vector<int> have;
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (p.submitted[r]) have.push_back(r);
    }
    // A join waits for as long as the others train; a set not registered yet will be.
    const bool waits = p.descriptors[have[0]].kind != RequestKind::kJoin && required(p, &needed);
    if (waits) {
      for (int r : needed) {
        if (!p.submitted[r]) missing.push_back(r);
      }
    }
    if (missing.empty()) {
      ++it;
      continue;
    }
    const std::string what = describeRequest(it->first, p.descriptors[have[0]]);
    if (options_.stallShutdownSeconds > 0 && age >= options_.stallShutdownSeconds) {
      const Descriptor d = p.descriptors[have[0]];
      const std::string name = it->first;
      Status stalled = Status::timeout(
          what + " stalled: " + describeRanks(missing) + " did not submit it within " +
          seconds(options_.stallShutdownSeconds) + " (submitted by " + describeRanks(have) + ")");
      // A stall past the limit is final and global, as in Horovod: every engine stops after
      // this cycle, so a late rank's request can never pair with a newer one of the same name
      // (docs/design.md, "Failures").
      if (!response.shutdown) {
        response.shutdown = true;
        response.shutdownCode = StatusCode::kTimeout;
        response.shutdownReason = stalled.message();
      }
      response.errors.push_back({name, std::move(stalled)});
      it = pending_.erase(it);
      if (d.groupSize > 1) {
        failGroup(d.groupKey, name, StatusCode::kTimeout, response);
        it = pending_.upper_bound(name);
      }
      continue;
    }
    if (options_.stallWarningSeconds > 0 && age >= options_.stallWarningSeconds &&
        secondsBetween(p.lastWarning, now) >= options_.stallWarningSeconds) {
      p.lastWarning = now;
      if (options_.warn) {
        options_.warn("stall: " + what + " waited " + seconds(age) + " for " +
                      describeRanks(missing) + "; submitted by " + describeRanks(have));
      }
    }
    ++it;
  }
  // Names announced within the last few milliseconds by some ranks only: the others are probably
  // enqueueing them now. (Older ones are stalling, and cycles at full speed would not help.)
  for (const auto& [name, p] : pending_) {
    response.partial = response.partial || now - p.first < kPartialWindow;
  }
  bool fastPathOff = false;
  for (const RankMessage& m : messages) fastPathOff = fastPathOff || m.fastPathOff;
  response.quiet = pending_.empty() && joinedRanks().empty() && !fastPathOff;
  return response;
}

}  // namespace detcoll::fusion
