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
  s.fastStarts = fastStarts_.load();
  s.fastStops = fastStops_.load();
  return s;
}

void Engine::learnStep(const Response& response, const std::vector<RequestPtr>& ready) {
  // Every rank reads the same responses and keeps the same cache, so every rank learns the same
  // steps and starts the fast path after the same response.
  bool eligible = response.errors.empty();
  std::vector<uint32_t> ids;
  ids.reserve(ready.size());
  for (const RequestPtr& request : ready) {
    if (!eligible) break;
    const Descriptor& d = request->descriptor();
    const auto id = cache_.find(request->name(), d);
    eligible = fastEligible(d) && request->spec().owned == nullptr && id.has_value();
    if (eligible) ids.push_back(*id);
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
  fast_->lastEnqueue = Clock::now();
  fast_->interestAtEnqueue = interest_->load(std::memory_order_relaxed);
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
      const Clock::duration quiet = now - f.lastEnqueue;
      if (quiet >= idleLimit) break;
      Clock::time_point until = f.lastEnqueue + idleLimit;
      if (f.held > 0) {
        // Part of a step is here: a thread waiting on it while nothing else comes means the
        // rest will not come. Interest is polled: waiters do not know the engine.
        const bool waited = interest_->load(std::memory_order_relaxed) != f.interestAtEnqueue;
        if (waited && quiet >= waitedGrace) break;
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
  for (const Batch& batch : batches) {
    requests += batch.requests.size();
    runAndFinish(batch);
  }
  fastRequests_.fetch_add(requests, std::memory_order_relaxed);
  return true;
}

}  // namespace detcoll::fusion
