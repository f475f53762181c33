// The engine's side of the fast path of a repeated step (fusion/fast_path.h; docs/design.md,
// "The fast path"): starting it on every rank at the same response, placing requests in their
// slots, and the rounds of vote and buckets.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "collective/agreement.h"
#include "common/logging.h"
#include "fusion/engine.h"

namespace detcoll::fusion {
namespace {

// How long a bucket that holds some of its requests waits for the rest, once a thread waits on
// (or polls) one of its requests and nothing has been enqueued since: the step has changed (a
// tensor that got no gradient), and the requests it holds run negotiated instead.
constexpr auto kWaitedGrace = std::chrono::milliseconds(2);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

Engine::FastState::FastState(FastPlan p) : plan(std::move(p)) {
  slots.resize(plan.buckets());
  for (size_t b = 0; b < plan.buckets(); ++b) slots[b].resize(plan.members(b));
  filled.assign(plan.buckets(), 0);
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.cycles = cycles_.load();
  s.fastRequests = fastRequests_.load();
  s.fastVotes = fastVotes_.load();
  s.fastStarts = fastStarts_.load();
  s.fastStops = fastStops_.load();
  return s;
}

void Engine::learnStep(const Response& response) {
  // From the response alone, which every rank reads alike (not from the requests this rank ran: a
  // process set's request runs on its members only), so every rank learns the same steps and
  // starts the fast path after the same response.
  bool eligible = response.errors.empty();
  std::vector<uint32_t> ids;
  for (uint32_t id : response.cachedReady.ids()) {
    eligible = eligible && cache_.contains(id) && fastEligible(cache_.descriptor(id));
    ids.push_back(id);
  }
  for (const ReadyEntry& e : response.ready) {
    const auto id = cache_.find(e.name, e.descriptor);  // recorded before the batches ran
    eligible = eligible && id.has_value() && fastEligible(e.descriptor);
    if (id) ids.push_back(*id);
  }
  if (!eligible) {
    steps_.reset();
    return;
  }
  steps_.observe(ids);
  if (!response.quiet || !steps_.repeated() || !protocolError_.isOk()) return;
  PlanOptions options;
  options.fusionThresholdBytes = static_cast<size_t>(response.fusionThresholdBytes);
  options.directBytes = options_.directBytes;
  auto state = std::make_unique<FastState>(FastPlan(steps_.latest(), cache_, options));
  std::lock_guard<std::mutex> lock(mutex_);
  fast_ = std::move(state);
  fastStarts_.fetch_add(1, std::memory_order_relaxed);
  // Requests enqueued since this cycle's announcement go to their slots.
  std::vector<RequestPtr> queued;
  queued.swap(queue_);
  for (const RequestPtr& request : queued) {
    if (!placeFast(request)) {
      fast_->broken = true;
      queue_.push_back(request);
    }
  }
  fast_->lastEnqueue = fast_->lastRun = Clock::now();
}

bool Engine::FastState::heldAwaited() const {
  for (const auto& bucket : slots) {
    for (const RequestPtr& request : bucket) {
      if (request && request->awaited()) return true;
    }
  }
  return false;
}

bool Engine::placeFast(const RequestPtr& request) {
  FastState& f = *fast_;
  const RequestSpec& spec = request->spec();
  if (f.broken || !spec.localError.empty()) return false;
  const auto slot = f.plan.find(spec.name, spec.descriptor);
  if (!slot) return false;
  RequestPtr& place = f.slots[slot->bucket][slot->index];
  if (place) return false;  // cannot happen: names in flight are unique
  place = request;
  ++f.filled[slot->bucket];
  ++f.held;
  return true;
}

void Engine::leaveFast() {
  FastState& f = *fast_;
  if (queue_.empty() && f.held > 0) firstQueued_ = Clock::now();
  for (auto& bucket : f.slots) {
    for (RequestPtr& request : bucket) {
      if (request) queue_.push_back(std::move(request));
    }
  }
  fast_.reset();
}

bool Engine::fastRound() {
  uint64_t vote = 0;  // buckets this rank can run now, from the next one; 0: stop the fast path
  {
    std::unique_lock<std::mutex> lock(mutex_);
    FastState& f = *fast_;
    // With nothing enqueued for a while, the job may have moved on to other work, and the other
    // ranks' engines may be waiting in the vote. The stall checks run on the negotiated path, so
    // this is at most a quarter of their limits.
    double idle = options_.fastIdleSeconds;
    if (options_.stallWarningSeconds > 0) idle = std::min(idle, options_.stallWarningSeconds / 4);
    if (options_.stallShutdownSeconds > 0) idle = std::min(idle, options_.stallShutdownSeconds / 4);
    const Clock::duration idleLimit = seconds(idle);
    const Clock::duration waitedGrace =
        std::max<Clock::duration>(kWaitedGrace, 2 * seconds(options_.cycleTimeMs / 1000));
    for (;;) {
      if (shutdownRequested_ || f.broken || f.filled[f.next] == f.plan.members(f.next)) break;
      const Clock::time_point now = Clock::now();
      // Idle: nothing enqueued, nothing run (a rank's own long buckets are not idleness).
      const Clock::time_point active = std::max(f.lastEnqueue, f.lastRun);
      if (now - active >= idleLimit) break;
      Clock::time_point until = active + idleLimit;
      if (f.held > 0) {
        // Part of a step is here: a thread waiting on a request of it while nothing else comes
        // means the rest will not come. Waiters do not know the engine: it looks.
        if (now - f.lastEnqueue >= waitedGrace && f.heldAwaited()) break;
        until = std::min(until, now + waitedGrace);
      }
      wake_.wait_until(lock, until);
    }
    if (!abandonRequested_.isOk()) {
      // Peers may be gone: no vote. The cycle abandons the communicator and fails what is held.
      leaveFast();
      return true;
    }
    const bool thresholdChanged =
        comm_.rank() == 0 && fusionThresholdBytes_.load() != f.plan.fusionThresholdBytes();
    if (!shutdownRequested_ && !f.broken && !thresholdChanged) {
      for (size_t b = f.next; b < f.plan.buckets() && f.filled[b] == f.plan.members(b); ++b) {
        ++vote;
      }
    }
  }

  // The vote: every rank learns every rank's count, and all run the smallest.
  collective::Agreement agreement;
  const Status voted =
      agreement.exchangeRecords(comm_, &vote, sizeof(vote), sizeof(vote), sizeof(vote));
  if (!voted.isOk()) {
    DETCOLL_LOG(kError) << "the fast path's vote failed: " << voted.toString();
    const Status health = comm_.health();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!health.isOk()) communicatorFailure_ = health;
  }
  if (!voted.isOk()) {
    stop(voted.code() == StatusCode::kTimeout
             ? Status::timeout("detcoll stopped: " + voted.message())
             : voted.prefixed("the fast path's vote failed"));
    return false;
  }
  fastVotes_.fetch_add(1, std::memory_order_relaxed);
  uint64_t agreed = vote;
  for (int r = 0; r < comm_.size(); ++r) {
    uint64_t theirs = 0;
    std::memcpy(&theirs, agreement.record(r), sizeof(theirs));
    agreed = std::min(agreed, theirs);
  }

  std::vector<Batch> batches;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (agreed == 0) {
      leaveFast();
      steps_.reset();
      fastStops_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    FastState& f = *fast_;
    for (uint64_t k = 0; k < agreed; ++k) {
      const size_t b = f.next;
      for (const FastBatch& planned : f.plan.batches(b)) {
        Batch batch;
        batch.fused = planned.fused;
        batch.bytes = planned.bytes;
        for (size_t m : planned.members) batch.requests.push_back(std::move(f.slots[b][m]));
        batches.push_back(std::move(batch));
      }
      f.held -= f.filled[b];
      f.filled[b] = 0;
      f.next = (b + 1) % f.plan.buckets();
    }
  }
  if (timeline_.active()) {
    const Clock::time_point now = Clock::now();
    for (const Batch& batch : batches) {
      for (const RequestPtr& request : batch.requests) {
        timeline_.phase(request->name(), "NEGOTIATE", request->enqueued(), now, "fast path");
      }
    }
  }
  uint64_t requests = 0;
  for (const Batch& batch : batches) requests += batch.requests.size();
  fastRequests_.fetch_add(requests, std::memory_order_relaxed);
  runBatches(batches);
  std::lock_guard<std::mutex> lock(mutex_);
  if (fast_) fast_->lastRun = Clock::now();
  return true;
}

}  // namespace detcoll::fusion
