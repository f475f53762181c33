#pragma once

// The fusion engine: Horovod's tensor queue and background cycle, with results that do not
// depend on timing.
//
// Framework threads enqueue named requests (allreduce, broadcast, allgather; alone or as a group)
// and wait, poll, or get a callback. A background thread runs a cycle every cycleTimeMs: it
// announces the requests enqueued since the last cycle to the coordinator (rank 0; coordinator.h),
// whose response, the same on every rank, lists the requests every rank has announced with the
// same descriptor and those that failed. Every rank then plans the same batches (planner.h), runs
// them on the engine's own communicator and completes the requests. Once a step has repeated, the
// engines run it on the fast path instead, without cycles or the coordinator (fast_path.h;
// docs/design.md, "The fast path").
//
// Errors: a name enqueued again before its request completed is refused at once on that rank;
// a request that fails a local check (null buffer, root out of range, ...) fails on every rank,
// naming the rank; ranks that give one name different descriptors all get DETCOLL_ERR_MISMATCH;
// a name some ranks never submit is reported (a warning naming the missing ranks) every
// stallWarningSeconds and fails everywhere with DETCOLL_ERR_TIMEOUT after stallShutdownSeconds;
// that stall stops every rank's engine (final and global, as in Horovod), so that a late rank's
// request can never pair with a newer one of the same name. An engine that hears nothing from a
// peer for stallShutdownSeconds gives up on it the same way, naming it. shutdown() on any rank
// stops every rank's engine at its next cycle. Once stopped, requests not yet complete fail with
// the reason (TIMEOUT after a stall), and later enqueues are refused with it.
//
// Buffers belong to the caller and must stay valid and untouched until the request completes.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collective/settings.h"
#include "collective/transport/communicator.h"
#include "fusion/coordinator.h"
#include "fusion/device_batches.h"
#include "fusion/fast_path.h"
#include "fusion/planner.h"
#include "fusion/request.h"
#include "fusion/response_cache.h"
#include "fusion/timeline.h"
#include "fusion/trace.h"

namespace detcoll::fusion {

struct EngineOptions {
  size_t fusionThresholdBytes = 64 << 20;  // 0: no fusion
  size_t directBytes = 1 << 20;            // allreduces this large run on their own buffers
  double cycleTimeMs = 1.0;
  double stallWarningSeconds = 60;    // 0: no warnings
  double stallShutdownSeconds = 600;  // 0: wait forever
  std::string timelinePath;           // written by rank 0; empty: none
  size_t segmentBytes = 1 << 20;      // of the allreduce's schedule (collective/pipeline.h)
  // DETCOLL_INVARIANT_TRANSPORT, for the batches in invariant mode.
  collective::InvariantTransport invariantTransport = collective::InvariantTransport::kAuto;
  // DETCOLL_GPU_TRANSPORT, for requests on device memory (device_batches.h).
  collective::GpuTransport gpuTransport = collective::GpuTransport::kAuto;
  // The collective trace's directory (DETCOLL_TRACE; empty: none), which the C API opens; the
  // engine appends its requests' records to `trace` (null: no trace).
  std::string traceDir;
  std::shared_ptr<Trace> trace;
  // Receives the coordinator's stall warnings (rank 0); unset: logged at WARN.
  std::function<void(const std::string&)> warn;
  // The fast path of a repeated step (fast_path.h; DETCOLL_FAST_PATH). Every rank must give the
  // same value.
  bool fastPath = true;
  // How long a rank on the fast path waits with nothing enqueued before it votes to stop it (at
  // most a quarter of the stall limits, when they are on).
  double fastIdleSeconds = 1;
};

// What the engine has done, for tests and benchmarks.
struct EngineStats {
  uint64_t cycles = 0;        // negotiation cycles
  uint64_t fastRequests = 0;  // requests run on the fast path
  uint64_t fastVotes = 0;     // the fast path's votes (each runs one or more buckets, or stops it)
  uint64_t fastStarts = 0;    // times the engines started the fast path
  uint64_t fastStops = 0;     // ... and went back to negotiating
};

class Engine {
 public:
  // comm is the engine's alone: no other code may send on it while the engine runs.
  Engine(collective::transport::Communicator& comm, EngineOptions options);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts the background thread; every rank must start its engine. A failure (the timeline
  // file) is returned, but the thread runs all the same, so that shutdown() works everywhere.
  Status start();

  // Enqueues one request. Refused at once (no request) when the name is already enqueued on this
  // rank, or the engine has stopped; a request failing a local check is enqueued and fails on
  // every rank. spec.descriptor.groupKey/groupSize are set here. The callback runs on the
  // engine's thread, before waiters wake.
  Status enqueue(RequestSpec spec, Request::Callback callback, RequestPtr* request);
  // Enqueues requests atomically as a group: negotiated together, ready in the same cycle, fused
  // together where they fit. All or none are enqueued.
  Status enqueueGroup(std::vector<RequestSpec> specs, const Request::Callback& callback,
                      std::vector<RequestPtr>* requests);

  // Asks every rank's engine to stop and waits for this rank's to finish its cycle.
  void shutdown();
  // Stops this rank's engine without another negotiation: the engine's communicator is abandoned
  // with `why` (its peers are told), requests not complete fail with it. For a job that already
  // failed (a blocking call gave up on a peer), where a last negotiation could wait on a dead
  // rank.
  void abandon(const Status& why);
  // Why the engine stopped (ok while it runs): a TIMEOUT after a stall or a silent peer.
  Status stoppedBecause();
  // Why the engine's communicator was given up (a silent peer, a peer's notice), or ok: unlike a
  // stall, which stops the engines of ranks that all still answer, this is a failure of the job.
  Status communicatorFailure();

  // Process sets (Horovod's): collectives among some ranks, negotiated with every rank's and run
  // on a communicator of the members alone. Every rank registers every set, with the same id and
  // members (increasing ranks), before any rank enqueues a request in it; `comm` is the members'
  // communicator (null on the other ranks). Requests in a set run in the order of the responses,
  // like every request, so sets that share ranks cannot deadlock.
  Status addProcessSet(uint32_t id, std::vector<int> members,
                       std::unique_ptr<collective::transport::Communicator> comm);
  // Gives a member its set's communicator, registered without one: the members learn the set
  // before their communicator exists, so that no engine meets a request of an unknown set.
  void attachCommunicator(uint32_t id, std::unique_ptr<collective::transport::Communicator> comm);
  // Forgets a set; its requests must have completed.
  void removeProcessSet(uint32_t id);
  // The members of set `id` (every rank for 0), or null when it is not registered.
  std::shared_ptr<const std::vector<int>> processSetMembers(uint32_t id);
  // Whether set `id` was registered here and removed since.
  bool processSetRemoved(uint32_t id);

  // The CUDA device of this rank's join() (-1: none known): a joined rank's part of the others'
  // device allreduces is made there until this rank has made a device request of its own.
  void setJoinDevice(int device) { joinDevice_.store(device); }

  // Changes the fusion threshold. Rank 0's value is the one every rank plans with (it travels in
  // each cycle's response), so a call on rank 0 is what counts.
  void setFusionThreshold(size_t bytes) { fusionThresholdBytes_.store(bytes); }

  EngineStats stats() const;

 private:
  // enqueue() and enqueueGroup(): n > 0 specs (moved from), and their requests on success.
  Status admit(RequestSpec* specs, size_t n, const Request::Callback& callback,
               RequestPtr* requests);
  void loop();
  void run();  // the cycles, until the engines stop
  Status exchange(const RankMessage& mine, Response* response);
  void execute(const std::vector<RequestPtr>& ready, size_t fusionThresholdBytes);
  // Runs one batch (with its trace records) and completes its requests.
  void runAndFinish(const Batch& batch);
  // runAndFinish() over batches, in order. Should an exception leave one (a callback that throws,
  // an allocation that fails), the requests of that batch and of the later ones are completed with
  // a failure naming it before it goes on to loop(), which stops the engine: none is dropped while
  // a thread waits on it or its name is in names_.
  void runBatches(const std::vector<Batch>& batches);
  // A request's failure when the engine stopped (why) before running it.
  static Status didNotComplete(const Request& request, const Status& why);
  // Why the engine stops when an exception (`what`) leaves its thread.
  static Status stoppedBy(const std::string& what);

  // The fast path (engine_fast.cc). After a cycle: learns the step from the response's ready
  // requests, and starts the fast path where the response allows it and the step has repeated.
  void learnStep(const Response& response);
  // One round of the fast path: waits until the next bucket is complete here (or a reason to stop
  // it), votes, and runs the buckets every rank has or stops the fast path. False when the engine
  // stopped.
  bool fastRound();
  // mutex_ held: puts a request in its slot of the plan; false when it has none (the fast path
  // must stop).
  bool placeFast(const RequestPtr& request);
  // mutex_ held: ends the fast path here; the requests it holds go back to the queue.
  void leaveFast();
  // The trace's records of a batch (engine_trace.cc): its inputs' fingerprints, taken before it
  // runs, then its outputs' (or the batch's error), appended before its requests complete.
  std::vector<TraceRecord> traceInputs(const Batch& batch);
  void traceOutputs(const Batch& batch, std::vector<TraceRecord> records, const Status& status);
  // A request the response names that this rank did not enqueue: none when the request's process
  // set does not include this rank (or was removed here, its requests here complete); the zeros
  // of an allreduce when this rank has joined; else false (a protocol error).
  bool stand(const std::string& name, const Descriptor& d, std::vector<RequestPtr>* ready);
  struct ProcessSet {
    std::shared_ptr<const std::vector<int>> members;
    std::unique_ptr<collective::transport::Communicator> comm;  // null on other ranks
  };
  // The communicator a request of set `id` runs on, or null when this rank is not a member.
  collective::transport::Communicator* communicatorOf(uint32_t id);
  Status runBatch(const Batch& batch);
  // The device side, made at the first request on device memory.
  DeviceBatches& deviceBatches();
  // The allreduce of d's mode, dtype and op over `count` elements of one leaf per rank.
  Status allreduce(collective::transport::Communicator& comm, const Descriptor& d,
                   const void* const* send, void* recv, size_t count);
  // Completes requests and frees their names for the next enqueue.
  void finish(const std::vector<RequestPtr>& requests, const Status& status);
  void stop(const Status& why);
  std::string localCheck(const RequestSpec& spec) const;

  collective::transport::Communicator& comm_;
  const EngineOptions options_;
  std::atomic<size_t> fusionThresholdBytes_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0
  Timeline timeline_;
  std::thread thread_;

  // Shared with the enqueuing threads.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<RequestPtr> queue_;
  Clock::time_point firstQueued_;  // when queue_ last became non-empty
  // Requests in the last burst (enqueued from an idle engine until it was idle again): an idle
  // engine starts its cycle as soon as this many are queued, not after the gather window.
  size_t burstHint_ = 0;
  // The names of the requests enqueued on this rank and not complete: views of the requests' own
  // names, erased before the requests complete.
  std::unordered_set<std::string_view> names_;
  bool shutdownRequested_ = false;
  Status abandonRequested_;
  bool stopped_ = false;
  Status stoppedBecause_;
  Status communicatorFailure_;

  std::mutex setsMutex_;  // the enqueuing threads add sets, the engine's thread reads them
  std::unordered_map<uint32_t, std::shared_ptr<ProcessSet>> sets_;
  // Sets removed here (ids are never reused): a response of a cycle before the removal may still
  // name a request of one, which was the other ranks' (this rank's had completed).
  std::unordered_set<uint32_t> removedSets_;
  // A protocol error found on this thread: the engine asks every rank's to stop, then stops with
  // it.
  Status protocolError_;
  std::atomic<bool> joined_{false};  // this rank's join is in flight
  std::atomic<int> joinDevice_{-1};

  // The fast path's state, shared with the enqueuing threads (under mutex_); null while the
  // engines negotiate.
  struct FastState {
    explicit FastState(FastPlan p);
    FastPlan plan;
    std::vector<std::vector<RequestPtr>> slots;  // [bucket][member]
    std::vector<size_t> filled;                  // of each bucket's slots
    size_t held = 0;                             // requests in slots
    size_t next = 0;                             // the bucket that runs next
    bool broken = false;                         // a request arrived that the plan does not hold
    Clock::time_point lastEnqueue;
    Clock::time_point lastRun;  // when this rank last ran buckets
    // Whether a thread waits on (or has polled) a request this rank holds.
    bool heldAwaited() const;
  };
  std::unique_ptr<FastState> fast_;
  std::atomic<uint64_t> cycles_{0};
  std::atomic<uint64_t> fastRequests_{0};
  std::atomic<uint64_t> fastVotes_{0};
  std::atomic<uint64_t> fastStarts_{0};
  std::atomic<uint64_t> fastStops_{0};

  // The background thread's own.
  int32_t lastJoined_ = -1;  // of the current response
  ResponseCache cache_;
  StepTracker steps_;
  std::unordered_map<std::string, RequestPtr> pending_;  // announced, not yet answered
  std::vector<char> fusionBuffer_;
  std::unique_ptr<DeviceBatches> device_;
};

}  // namespace detcoll::fusion
