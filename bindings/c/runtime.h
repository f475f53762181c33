#pragma once

// The process-wide state behind the C API, shared by its source files (detcoll_c.cc: init and
// the blocking collectives; detcoll_async.cc: requests; detcoll_sets.cc: process sets and join;
// detcoll_rng.cc: seeds and random fills; detcoll_ops.cc: the deterministic ops). Not installed.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/config.h"
#include "bindings/c/detcoll.h"
#include "collective/collectives.h"
#include "collective/transport/mpi_communicator.h"
#include "common/status.h"
#include "fusion/engine.h"
#include "fusion/trace.h"
#include "kernels/rng/seed_state.h"

namespace detcoll::bindings::c {

struct Runtime {
  std::unique_ptr<collective::transport::MpiCommunicator> comm;
  std::unique_ptr<collective::transport::MpiCommunicator> engineComm;
  std::unique_ptr<collective::Collectives> collectives;
  std::unique_ptr<fusion::Engine> engine;  // null when MPI is below MPI_THREAD_MULTIPLE
  std::string noEngine;                    // why there is no engine
  std::shared_ptr<fusion::Trace> trace;    // DETCOLL_TRACE's; null when it is unset
  std::atomic<uint64_t> unnamed{0};
  // Process sets: the next id, and the members of each set (detcoll_sets.cc). Changed by the
  // collective add and remove, under g_mutex; the engine keeps its own copy for the enqueuing
  // threads.
  uint32_t nextProcessSet = 1;
  std::map<uint32_t, std::vector<int>> processSets;
  // The thread that called detcoll_init: the only one whose calls pair by order (blocking calls,
  // unnamed requests); see callingThreadMayPairByOrder.
  std::thread::id owner;
  Config config;
  int localRank = 0;
  int localSize = 1;
  // The random state: the root seed every rank agreed on at init, and the named counters.
  // Guarded by rngMutex, since counters may be read from any thread.
  std::mutex rngMutex;
  kernels::rng::SeedState rng;
};

// g_mutex serializes the blocking calls (collectives must run in one order per rank) and init,
// finalize and set_mode. g_runtimeMutex guards the runtime's lifetime and the mode: init, finalize
// and set_mode hold it exclusively, asynchronous calls shared, so that an enqueue never waits
// for a blocking collective (which could wait, on another rank, for that very request).
extern std::mutex g_mutex;
extern std::shared_mutex g_runtimeMutex;
extern std::unique_ptr<Runtime> g_runtime;

// The C status of `status`; a failure also sets the thread's last error.
detcoll_status_t finish(const Status& status);
// "<call> called before detcoll_init", or "... after detcoll_finalize".
Status notInitialized(const char* call);
// Whether this thread may make a call that pairs across ranks by its order (a blocking
// collective, an unnamed request): only the thread that called detcoll_init may (docs/design.md,
// "Threads"). Calls from two threads would pair by timing, so one thread's data could meet
// another's call on another rank. An error naming `call` otherwise.
Status callingThreadMayPairByOrder(const char* call);
// The start of a blocking collective: initialized, and on the thread that may make it.
Status enterBlockingCall(const char* call);
// The end of a blocking collective: where it failed because a rank gave up (the job failed, not
// the call), the fusion engine stops too, without a last negotiation. Returns `status`.
Status leaveBlockingCall(const Status& status);
// The pending rejection of this thread's next collective (detcoll_reject_next_call) as a failed
// local check, or ok; taking it clears it.
Status takeRejection();
// The determinism mode of the next call: detcoll_set_mode's, else DETCOLL_DETERMINISM's.
Mode currentMode();
// Collective over `comm`: its record board where DETCOLL_AGREEMENT_TRANSPORT (agreed at init) is
// auto and every rank can map one; logs which way its agreements travel.
void chooseAgreementTransport(collective::transport::MpiCommunicator& comm,
                              collective::AgreementTransport transport, const char* which);
// The root seed at init: DETCOLL_SEED (the same on every rank) or a value drawn on rank 0,
// agreed by every rank; the counters start empty. Collective.
Status initializeRandomState(Runtime& runtime);
// *device = the CUDA device holding `pointer`, or -1 for host memory (always -1 in a build
// without CUDA or on a machine without a GPU). An error when CUDA cannot tell.
Status locateMemory(const void* pointer, int* device);

// The collective trace (fusion/trace.h; docs/design.md, "The debugger"), when DETCOLL_TRACE is
// set: prepared at init before the ranks agree on it (a directory that cannot be written is an
// error naming DETCOLL_TRACE, the path and the reason), started once init has succeeded, for every
// call after it; the engine gets it too.
Status prepareTrace(Runtime& runtime);
void startTrace(Runtime& runtime, Mode mode);

// A blocking call's record in the trace, made before the call (its inputs' fingerprints) when the
// trace is on and its arguments pass the call's own check (detcoll_trace.cc).
struct TracedCall {
  std::optional<fusion::TraceRecord> record;
  const void* output = nullptr;
  size_t outputBytes = 0;
};
TracedCall traceReduction(const void* const* leaves, int nleaves, bool single, void* recv,
                          size_t count, int dtype, int op, const char* name, int device);
TracedCall traceBroadcast(void* buf, size_t count, int dtype, int root, const char* name,
                          int device);
TracedCall traceAllgather(const void* send, void* recv, size_t count, int dtype, const char* name,
                          int device);
// Appends the record: with its output's fingerprint when the call succeeded, else with the
// error. Returns `status`.
void appendTraced(TracedCall& call, const Status& status);
inline Status traceResult(TracedCall& call, const Status& status) {
  if (call.record) appendTraced(call, status);
  return status;
}

// An error naming `what` when pointer is device memory, saying why it must not be (`why`).
Status checkHostMemory(const void* pointer, const char* what, const char* why);

// The calling thread's cudaStream_t (detcoll_set_cuda_stream; null: none set).
void* callingThreadCudaStream();

// Where a call's buffers live: device is the CUDA device holding every buffer added, or -1 when
// they are all host memory. Adding one that lives elsewhere is an error naming both.
class BufferPlace {
 public:
  Status add(const void* pointer, const std::string& what);
  int device() const { return device_; }

 private:
  int device_ = -1;
  std::string first_;  // the first buffer added, for the error
};

}  // namespace detcoll::bindings::c
