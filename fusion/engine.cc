#include "fusion/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <utility>

#include "collective/call_checks.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/names.h"

namespace detcoll::fusion {
namespace {

using collective::transport::Communicator;

// The name hash of the members' names, each ended by a zero byte; never 0 (no group).
uint64_t groupKeyOf(const RequestSpec* specs, size_t n) {
  Fnv1a h;
  for (size_t i = 0; i < n; ++i) h.add(specs[i].name).addByte(0);
  return h.value() == 0 ? 1 : h.value();
}

}  // namespace

Engine::Engine(Communicator& comm, EngineOptions options)
    : comm_(comm),
      options_(std::move(options)),
      fusionThresholdBytes_(options_.fusionThresholdBytes) {
  if (comm_.rank() == 0) {
    CoordinatorOptions c;
    c.stallWarningSeconds = options_.stallWarningSeconds;
    c.stallShutdownSeconds = options_.stallShutdownSeconds;
    c.warn =
        options_.warn ? options_.warn : [](const std::string& text) { DETCOLL_LOG(kWarn) << text; };
    c.members = [this](uint32_t id) { return processSetMembers(id); };
    c.removed = [this](uint32_t id) { return processSetRemoved(id); };
    coordinator_ = std::make_unique<Coordinator>(comm_.size(), std::move(c));
  }
}

Engine::~Engine() {
  shutdown();
  timeline_.close();
}

Status Engine::start() {
  Status status;
  if (comm_.rank() == 0 && !options_.timelinePath.empty()) {
    status = timeline_.open(options_.timelinePath);
  }
  // The thread starts even when the timeline failed: every rank's engine must take part in the
  // cycles, if only to stop together.
  thread_ = std::thread([this] { loop(); });
  return status;
}

std::string Engine::localCheck(const RequestSpec& spec) const {
  if (spec.checked || !spec.localError.empty()) return spec.localError;
  const Descriptor& d = spec.descriptor;
  return collective::checkCall(
             callArguments(spec, static_cast<int>(d.type), static_cast<int>(d.op)), comm_.rank(),
             comm_.size())
      .message();
}

Status Engine::enqueue(RequestSpec spec, Request::Callback callback, RequestPtr* request) {
  return admit(&spec, 1, callback, request);
}

Status Engine::enqueueGroup(std::vector<RequestSpec> specs, const Request::Callback& callback,
                            std::vector<RequestPtr>* requests) {
  requests->clear();
  if (specs.empty()) return Status::invalidArgument("a group needs at least one request");
  // Filled before any callback of theirs can run.
  requests->resize(specs.size());
  const Status status = admit(specs.data(), specs.size(), callback, requests->data());
  if (!status.isOk()) requests->clear();
  return status;
}

Status Engine::admit(RequestSpec* specs, size_t n, const Request::Callback& callback,
                     RequestPtr* requests) {
  const uint64_t key = n > 1 ? groupKeyOf(specs, n) : 0;
  for (size_t i = 0; i < n; ++i) {
    RequestSpec& spec = specs[i];
    spec.descriptor.groupKey = key;
    spec.descriptor.groupSize = static_cast<uint32_t>(n);
    spec.localError = localCheck(spec);
  }
  // The requests are made before the lock is taken, with one reading of the clock for all.
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    requests[i] = std::make_shared<Request>(std::move(specs[i]), callback, now);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const auto refuse = [&](Status why) {
    lock.unlock();  // a request's callback and buffers are let go without the engine's lock
    for (size_t i = 0; i < n; ++i) requests[i].reset();
    return why;
  };
  if (stopped_ || shutdownRequested_) {
    const StatusCode code =
        stoppedBecause_.isOk() ? StatusCode::kNotInitialized : stoppedBecause_.code();
    return refuse(
        Status(code, (stoppedBecause_.message().empty() ? std::string("detcoll is shutting down")
                                                        : stoppedBecause_.message()) +
                         "; " + quotedName(requests[0]->name()) + " was not enqueued"));
  }
  // names_ holds views of the names of requests not complete (finish() erases them first).
  const auto duplicate = [&](const Request& request) {
    return refuse(Status::invalidArgument(describeRequest(request.name(), request.descriptor()) +
                                          " is already enqueued on this rank and not complete; "
                                          "names must be unique among requests in flight"));
  };
  if (n == 1) {
    if (!names_.insert(requests[0]->name()).second) return duplicate(*requests[0]);
  } else {
    std::unordered_set<std::string_view> seen;  // the group's names
    for (size_t i = 0; i < n; ++i) {
      const std::string& name = requests[i]->name();
      if (names_.count(name) > 0 || !seen.insert(name).second) return duplicate(*requests[i]);
    }
    for (size_t i = 0; i < n; ++i) names_.insert(requests[i]->name());
  }
  const bool first = queue_.empty();
  if (first) firstQueued_ = now;
  for (size_t i = 0; i < n; ++i) {
    if (requests[i]->descriptor().kind == RequestKind::kJoin) joined_.store(true);
  }
  if (fast_) {
    // The fast path: each request to its slot; one the plan does not hold stops it.
    FastState& f = *fast_;
    const bool none = f.held == 0;
    for (size_t i = 0; i < n; ++i) {
      if (!placeFast(requests[i])) {
        f.broken = true;
        queue_.push_back(requests[i]);
      }
    }
    f.lastEnqueue = std::max(f.lastEnqueue, now);  // now was read before the lock
    // The engine wakes for a complete bucket or a broken plan, and for the first request it holds:
    // from then on it watches for a thread that waits on part of a bucket.
    if (f.broken || f.filled[f.next] == f.plan.members(f.next) || (none && f.held > 0)) {
      wake_.notify_one();
    }
    return Status::ok();
  }
  for (size_t i = 0; i < n; ++i) queue_.push_back(requests[i]);
  // The engine waits for the first request, and then for the burst to be complete: a wake-up
  // per request would only contend for the lock with the thread enqueueing.
  if (first || (burstHint_ > 0 && queue_.size() >= burstHint_)) wake_.notify_one();
  return Status::ok();
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdownRequested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::abandon(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abandonRequested_.isOk()) abandonRequested_ = why;
    shutdownRequested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Engine::stoppedBecause() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stoppedBecause_;
}

Status Engine::communicatorFailure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return communicatorFailure_;
}

void Engine::finish(const std::vector<RequestPtr>& requests, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);  // one lock for all their names
    for (const RequestPtr& request : requests) names_.erase(request->name());
  }
  // A request with a callback is complete before the next one's callback runs, so that a callback
  // finds the batch's earlier requests done. The others are done once settled, and their waiters
  // wake at the end, last to first: a thread that waits for them in order wakes once, when its
  // first is released and the rest are done, instead of once per request (each wake-up is a
  // system call).
  std::vector<Request*> settled;
  settled.reserve(requests.size());
  const auto wake = [&] {
    for (auto it = settled.rbegin(); it != settled.rend(); ++it) (*it)->release();
  };
  for (const RequestPtr& request : requests) {
    try {
      if (!request->settle(status)) continue;
    } catch (...) {
      // Its callback threw: the request is complete all the same, and the settled ones' waiters
      // still wake.
      request->release();
      wake();
      throw;
    }
    if (request->hasCallback()) {
      request->release();
    } else {
      settled.push_back(request.get());
    }
  }
  wake();
}

void Engine::stop(const Status& why) {
  std::vector<RequestPtr> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    stoppedBecause_ = why;
    if (fast_) leaveFast();
    queued.swap(queue_);
  }
  for (auto& request : queued) pending_.emplace(request->name(), request);
  for (auto& [name, request] : pending_) finish({request}, didNotComplete(*request, why));
  pending_.clear();
}

void Engine::loop() {
  try {
    run();
  } catch (const std::exception& e) {
    // Nothing may escape the thread (std::terminate); requests in flight fail with the reason.
    DETCOLL_LOG(kError) << "fusion engine stopped: " << e.what();
    stop(stoppedBy(e.what()));
  }
  timeline_.close();  // complete and readable once the engine has stopped
}

void Engine::run() {
  const auto cycle = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(options_.cycleTimeMs));
  Clock::time_point next = Clock::now();
  bool idle = true;  // nothing in flight here, nothing partly announced last cycle
  size_t burst = 0;  // requests taken since the engine was last idle
  const auto gather = std::min<Clock::duration>(cycle / 10, std::chrono::microseconds(100));
  for (;;) {
    if (fast_) {
      if (!fastRound()) return;
      next = Clock::now();
      continue;
    }
    std::vector<RequestPtr> fresh;
    bool shutdown = false;
    Status abandoned;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // An idle engine starts a cycle soon after something is enqueued: the first request after
      // a quiet spell (the first gradient of a backward pass) waits a tenth of a cycle time (at
      // most 100 us, to gather the requests enqueued with it), not for the timer, and no longer
      // once as many requests are queued as the last burst had (a training step's gradients,
      // step after step). Otherwise the cycle time batches requests. Only timing depends on it:
      // in ordered and invariant mode the bits do not depend on how requests are batched.
      wake_.wait_until(lock, next, [&] { return shutdownRequested_ || (idle && !queue_.empty()); });
      if (idle && !queue_.empty() && !shutdownRequested_) {
        wake_.wait_until(lock, std::min(next, firstQueued_ + gather), [&] {
          return shutdownRequested_ || (burstHint_ > 0 && queue_.size() >= burstHint_);
        });
      }
      fresh.swap(queue_);
      shutdown = shutdownRequested_;
      abandoned = abandonRequested_;
    }
    if (!abandoned.isOk()) {
      comm_.abandon(abandoned);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        communicatorFailure_ = abandoned;
      }
      for (RequestPtr& request : fresh) pending_.emplace(request->name(), std::move(request));
      stop(abandoned);
      return;
    }

    RankMessage message;
    message.shutdown = shutdown;
    message.fastPathOff = !options_.fastPath;
    for (const RequestPtr& request : fresh) {
      pending_.emplace(request->name(), request);
      const RequestSpec& spec = request->spec();
      const auto id =
          spec.localError.empty() ? cache_.find(spec.name, spec.descriptor) : std::nullopt;
      if (id) {
        message.cached.set(*id);
      } else {
        message.announced.push_back({spec.name, spec.descriptor, spec.localError});
      }
    }

    Response response;
    const Status exchanged = exchange(message, &response);
    cycles_.fetch_add(1, std::memory_order_relaxed);
    // The next cycle starts one cycle time after this exchange ended: that moment is nearly the
    // same on every rank, so the ranks' cycles stay in phase and a request waits at most about
    // one cycle time for its negotiation. While some names are announced by some ranks only, the
    // others are most likely enqueueing them now: the next cycle starts at once.
    next = response.partial ? Clock::now() : Clock::now() + cycle;
    if (!exchanged.isOk()) {
      DETCOLL_LOG(kError) << "negotiation failed: " << exchanged.toString();
      const Status health = comm_.health();
      if (!health.isOk()) {
        std::lock_guard<std::mutex> lock(mutex_);
        communicatorFailure_ = health;
      }
      stop(exchanged.code() == StatusCode::kTimeout
               ? Status::timeout("detcoll stopped: " + exchanged.message())
               : exchanged.prefixed("the negotiation failed"));
      return;
    }
    for (const ErrorEntry& e : response.errors) {
      const auto it = pending_.find(e.name);
      if (it == pending_.end()) continue;  // not submitted here (a stall's missing rank)
      const RequestPtr request = it->second;
      pending_.erase(it);
      finish({request}, e.status);
    }
    if (response.shutdown) {
      if (!protocolError_.isOk()) {
        stop(protocolError_);
      } else if (response.shutdownCode == StatusCode::kNotInitialized) {
        stop(Status::notInitialized("detcoll shut down (" + response.shutdownReason + ")"));
      } else {
        DETCOLL_LOG(kError) << "every rank's engine stops: " << response.shutdownReason;
        stop(Status(response.shutdownCode, "detcoll stopped: " + response.shutdownReason));
      }
      return;
    }
    std::vector<RequestPtr> ready;
    auto take = [&](const std::string& name, const Descriptor& d) {
      const auto it = pending_.find(name);
      if (it == pending_.end()) return stand(name, d, &ready);
      ready.push_back(it->second);
      pending_.erase(it);
      return true;
    };
    std::string unknown;  // a ready name this rank cannot take
    for (uint32_t id : response.cachedReady.ids()) {
      if (!unknown.empty()) break;
      if (!cache_.contains(id)) {
        unknown = "cache id " + std::to_string(id);
      } else if (!take(cache_.name(id), cache_.descriptor(id))) {
        unknown = quotedName(cache_.name(id));
      }
    }
    for (const ReadyEntry& e : response.ready) {
      cache_.record(e.name, e.descriptor);
      if (unknown.empty() && !take(e.name, e.descriptor)) unknown = quotedName(e.name);
    }
    lastJoined_ = response.lastJoined;
    if (!unknown.empty()) {
      // A protocol bug: run none (the others may not); every engine stops after the next cycle.
      for (const RequestPtr& request : ready) {
        if (request->spec().owned == nullptr) pending_.emplace(request->name(), request);
      }
      protocolError_ = Status::internal(
          "the negotiation's response names a request this rank did not announce: " + unknown);
      DETCOLL_LOG(kError) << protocolError_.message() << "; every rank's engine stops";
      std::lock_guard<std::mutex> lock(mutex_);
      shutdownRequested_ = true;
      continue;
    }
    if (timeline_.active()) {
      const Clock::time_point now = Clock::now();
      for (const RequestPtr& request : ready) {
        timeline_.phase(request->name(), "NEGOTIATE", request->enqueued(), now);
      }
    }
    // Idle once nothing is in flight here after this cycle's batches: the next request starts a
    // burst of its own (a blocking call after a blocking call) and need not wait for the timer.
    idle = pending_.empty() && response.errors.empty() && !response.partial;
    burst += ready.size();
    if (idle && burst > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      burstHint_ = burst;
      burst = 0;
    }
    execute(ready, static_cast<size_t>(response.fusionThresholdBytes));
    if (options_.fastPath) learnStep(response);
  }
}

}  // namespace detcoll::fusion
