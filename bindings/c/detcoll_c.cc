// The C API over the collective layer: one process-wide runtime, created by detcoll_init, and the
// blocking collectives (the asynchronous ones are in detcoll_async.cc).

#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/runtime.h"
#include "collective/agreement.h"
#include "collective/call_checks.h"
#include "common/config.h"
#include "common/logging.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#if DETCOLL_WITH_NCCL
#include <nccl.h>
#endif

namespace detcoll::bindings::c {

static_assert(static_cast<int>(StatusCode::kInternal) == DETCOLL_ERR_INTERNAL);
static_assert(static_cast<int>(DataType::kInt64) == DETCOLL_INT64);
static_assert(static_cast<int>(ReduceOp::kMax) == DETCOLL_MAX);
static_assert(static_cast<int>(Mode::kInvariant) == DETCOLL_MODE_INVARIANT);

std::mutex g_mutex;
std::shared_mutex g_runtimeMutex;
std::unique_ptr<Runtime> g_runtime;

namespace {
bool g_ownsMpi = false;
bool g_finalized = false;  // detcoll_finalize ran, and detcoll_init has not run since
std::optional<Mode> g_modeOverride;
thread_local std::string t_lastError;
thread_local std::string t_rejection;  // detcoll_reject_next_call's reason, until a call takes it
thread_local void* t_cudaStream = nullptr;  // detcoll_set_cuda_stream's
}  // namespace

Status takeRejection() {
  if (t_rejection.empty()) return Status::ok();
  Status rejected = Status::invalidArgument(t_rejection);
  t_rejection.clear();
  return rejected;
}

detcoll_status_t finish(const Status& status) {
  if (status.isOk()) return DETCOLL_SUCCESS;
  t_lastError = status.message();
  DETCOLL_LOG(kDebug) << "call failed: " << status.toString();
  return static_cast<detcoll_status_t>(status.code());
}

Status notInitialized(const char* call) {
  return Status::notInitialized(std::string(call) + (g_finalized ? " called after detcoll_finalize"
                                                                 : " called before detcoll_init"));
}

Status callingThreadMayPairByOrder(const char* call) {
  if (std::this_thread::get_id() == g_runtime->owner) return Status::ok();
  return Status::invalidArgument(
      std::string(call) +
      " called from a thread other than the one that called detcoll_init: blocking collectives "
      "and unnamed requests pair across ranks by their order, so they are made by that thread "
      "only; other threads may make named asynchronous requests, which pair by name");
}

Status enterBlockingCall(const char* call) {
  if (!g_runtime) return notInitialized(call);
  DETCOLL_RETURN_IF_ERROR(callingThreadMayPairByOrder(call));
  g_runtime->collectives->setCudaStream(t_cudaStream);
  // A peer the engine found silent is as silent to the blocking calls: they fail at once, and the
  // other ranks hear it, instead of each waiting the limit again. (A stall, after which every
  // rank still answers, leaves the blocking calls working.)
  if (g_runtime->engine) {
    const Status failed = g_runtime->engine->communicatorFailure();
    if (!failed.isOk()) g_runtime->comm->abandon(failed);
  }
  return Status::ok();
}

void* callingThreadCudaStream() {
  return t_cudaStream;
}

Status leaveBlockingCall(const Status& status) {
  if (status.isOk() || !g_runtime || g_runtime->comm->health().isOk()) return status;
  if (g_runtime->engine) g_runtime->engine->abandon(g_runtime->comm->health());
  return status;
}

Status locateMemory(const void* pointer, int* device) {
  *device = -1;
#if DETCOLL_WITH_CUDA
  static const bool haveDevice = [] {
    int devices = 0;
    const bool found = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    (void)cudaGetLastError();
    return found;
  }();
  if (!haveDevice || pointer == nullptr) return Status::ok();
  cudaPointerAttributes attributes{};
  const cudaError_t rc = cudaPointerGetAttributes(&attributes, pointer);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // this query's own error, not one for the caller to find later
    return Status::backend(std::string("cannot tell whether a buffer is host or device memory: ") +
                           cudaGetErrorString(rc));
  }
  if (attributes.type == cudaMemoryTypeDevice) *device = attributes.device;
#else
  (void)pointer;
#endif
  return Status::ok();
}

Status checkHostMemory(const void* pointer, const char* what, const char* why) {
  int device = -1;
  DETCOLL_RETURN_IF_ERROR(locateMemory(pointer, &device));
  if (device >= 0) {
    return Status::invalidArgument(std::string(what) + " is memory of CUDA device " +
                                   std::to_string(device) + "; " + why);
  }
  return Status::ok();
}

namespace {
std::string placeName(int device) {
  return device < 0 ? "host memory" : "memory of CUDA device " + std::to_string(device);
}
}  // namespace

Status BufferPlace::add(const void* pointer, const std::string& what) {
  if (pointer == nullptr) return Status::ok();  // the collective's own checks name a null buffer
  int device = -1;
  DETCOLL_RETURN_IF_ERROR(locateMemory(pointer, &device));
  if (first_.empty()) {
    first_ = what;
    device_ = device;
  } else if (device != device_) {
    return Status::invalidArgument(what + " is " + placeName(device) + " but " + first_ + " is " +
                                   placeName(device_) +
                                   "; a call's buffers are all host memory or all memory of one "
                                   "CUDA device");
  }
  return Status::ok();
}

Mode currentMode() {
  if (g_modeOverride) return *g_modeOverride;
  return g_runtime ? g_runtime->config.collective.mode : Mode::kOrdered;
}

void chooseAgreementTransport(collective::transport::MpiCommunicator& comm,
                              collective::AgreementTransport transport, const char* which) {
  std::string why = "DETCOLL_AGREEMENT_TRANSPORT is messages";
  if (transport == collective::AgreementTransport::kAuto && comm.attachBoard(&why)) {
    DETCOLL_LOG(kDebug) << which << ": agreements through a record board in shared memory";
    return;
  }
  DETCOLL_LOG(kDebug) << which << ": agreements as messages (" << why << ")";
}

namespace {

Status initialize() {
  if (g_runtime) return Status::ok();
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return collective::transport::mpiError("MPI_Init_thread", rc);
    g_ownsMpi = true;
  } else {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return Status::backend("MPI has been finalized; detcoll cannot initialize");
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      DETCOLL_LOG(kWarn) << "MPI was initialized without MPI_THREAD_MULTIPLE; call detcoll "
                            "from one thread at a time";
    }
  }
  auto runtime = std::make_unique<Runtime>();
  DETCOLL_RETURN_IF_ERROR(
      collective::transport::MpiCommunicator::create(MPI_COMM_WORLD, &runtime->comm));
  setLogRank(runtime->comm->rank());

  Status local = loadConfig(processEnvironment(), &runtime->config);
  if (local.isOk()) setLogLevel(runtime->config.logLevel);
  runtime->owner = std::this_thread::get_id();
  // Every wait on a peer from here on, init's own included, warns and gives up like the engine's
  // stalls (docs/design.md, "Failures").
  collective::transport::Patience patience;
  patience.warnSeconds = runtime->config.engine.stallWarningSeconds;
  patience.limitSeconds = runtime->config.engine.stallShutdownSeconds;
  patience.warn = [](const std::string& text) { DETCOLL_LOG(kWarn) << text; };
  runtime->comm->setPatience(patience);
  runtime->collectives = std::make_unique<collective::Collectives>(*runtime->comm);
  runtime->collectives->setGpuTransport(runtime->config.collective.gpuTransport);
  runtime->collectives->setInvariantTransport(runtime->config.collective.invariantTransport);
  const Mode mode = g_modeOverride ? *g_modeOverride : runtime->config.collective.mode;
  // A trace directory that cannot be written fails init on every rank, like a bad variable.
  if (local.isOk()) local = prepareTrace(*runtime);
  DETCOLL_RETURN_IF_ERROR(runtime->collectives->agreeOnInit(mode, local));
  DETCOLL_RETURN_IF_ERROR(agreeOnSettings(runtime->config, *runtime->collectives));
  chooseAgreementTransport(*runtime->comm, runtime->config.collective.agreementTransport,
                           "blocking calls");
  DETCOLL_RETURN_IF_ERROR(initializeRandomState(*runtime));

  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(runtime->comm->handle(), MPI_COMM_TYPE_SHARED, runtime->comm->rank(),
                          MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_rank(node, &runtime->localRank);
    MPI_Comm_size(node, &runtime->localSize);
    MPI_Comm_free(&node);
  }
  // The fusion engine runs on a thread of its own, over its own communicator, on every rank or
  // none.
  int lowest = provided;
  MPI_Allreduce(&provided, &lowest, 1, MPI_INT, MPI_MIN, runtime->comm->handle());
  if (lowest >= MPI_THREAD_MULTIPLE) {
    DETCOLL_RETURN_IF_ERROR(
        collective::transport::MpiCommunicator::create(MPI_COMM_WORLD, &runtime->engineComm));
    runtime->engineComm->setPatience(patience);
    chooseAgreementTransport(*runtime->engineComm, runtime->config.collective.agreementTransport,
                             "the fusion engine");
    runtime->engine =
        std::make_unique<fusion::Engine>(*runtime->engineComm, runtime->config.engine);
    // A timeline that cannot be written fails init on every rank (the engines still start, so
    // that they can stop together).
    Status started = runtime->engine->start();
    DETCOLL_RETURN_IF_ERROR(runtime->collectives->agreeOnInit(mode, started));
  } else {
    runtime->noEngine =
        "asynchronous requests need MPI at MPI_THREAD_MULTIPLE on every rank; "
        "MPI was initialized at a lower thread level";
  }
  for (const std::string& variable : runtime->config.setVariables) {
    DETCOLL_LOG(kInfo) << variable << " set by environment";
  }
  DETCOLL_LOG(kInfo) << "initialized: rank " << runtime->comm->rank() << " of "
                     << runtime->comm->size() << ", mode " << modeName(mode);
  startTrace(*runtime, mode);  // init succeeded on every rank: the trace replaces an older one
  g_runtime = std::move(runtime);
  g_finalized = false;
  return Status::ok();
}

// Why the job failed (a rank gave up on a peer, a stall stopped the engines), or ok.
Status jobFailure(Runtime& runtime) {
  Status failure = runtime.comm->health();
  if (failure.isOk() && runtime.engineComm) failure = runtime.engineComm->health();
  if (failure.isOk() && runtime.engine) {
    const Status stopped = runtime.engine->stoppedBecause();
    if (stopped.code() == StatusCode::kTimeout) failure = stopped;
  }
  return failure;
}

}  // namespace
}  // namespace detcoll::bindings::c

using namespace detcoll;
using namespace detcoll::bindings::c;

extern "C" {

detcoll_status_t detcoll_init(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::unique_lock<std::shared_mutex> runtime(g_runtimeMutex);
  return finish(initialize());
}

detcoll_status_t detcoll_finalize(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::unique_lock<std::shared_mutex> runtime(g_runtimeMutex);
  if (!g_runtime && !g_ownsMpi) return finish(notInitialized("detcoll_finalize"));
  // After a failure of the job, MPI_Finalize would wait for the ranks that stopped answering (it
  // synchronizes every process): a process must be able to exit after any error, so finalize
  // skips it, and mpirun, seeing a process end without it, ends the job (docs/design.md,
  // "Failures").
  Status failure = g_runtime ? g_runtime->comm->health() : Status::ok();
  if (g_runtime && g_runtime->engine) {
    // The engine stops first: without a last negotiation when the job already failed, else with
    // one, which gives up on a rank that stopped answering within the limit. Then its
    // communicator is this thread's to ask.
    if (!failure.isOk()) {
      g_runtime->engine->abandon(failure);
    } else {
      g_runtime->engine->shutdown();
    }
  }
  if (failure.isOk() && g_runtime) failure = jobFailure(*g_runtime);
  // Every record is in (the engine has stopped): the trace ends, with its end record only when
  // the job did not fail.
  if (g_runtime && g_runtime->trace) g_runtime->trace->close(failure.isOk());
  if (!failure.isOk()) {
    DETCOLL_LOG(kWarn) << "detcoll_finalize after a failure of the job (" << failure.message()
                       << "): "
                       << (g_ownsMpi ? "skipping MPI_Finalize, which would wait for the ranks that "
                                       "stopped answering; mpirun ends the job when this process "
                                       "exits"
                                     : "the caller initialized MPI; MPI_Finalize would wait for "
                                       "the ranks that stopped answering: exit without it");
  }
  g_runtime.reset();
  setLogRank(-1);
  g_finalized = true;
  if (g_ownsMpi) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && failure.isOk()) MPI_Finalize();
    g_ownsMpi = false;
  }
  return DETCOLL_SUCCESS;
}

int detcoll_rank(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_runtime ? g_runtime->comm->rank() : -1;
}

int detcoll_size(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_runtime ? g_runtime->comm->size() : -1;
}

int detcoll_local_rank(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_runtime ? g_runtime->localRank : -1;
}

int detcoll_local_size(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_runtime ? g_runtime->localSize : -1;
}

detcoll_status_t detcoll_set_mode(detcoll_mode_t mode) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::unique_lock<std::shared_mutex> runtime(g_runtimeMutex);
  if (!isValidMode(static_cast<int>(mode))) {
    return finish(Status::invalidArgument("detcoll_set_mode: unknown mode " +
                                          std::to_string(static_cast<int>(mode))));
  }
  g_modeOverride = static_cast<Mode>(mode);
  return DETCOLL_SUCCESS;
}

detcoll_mode_t detcoll_get_mode(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<detcoll_mode_t>(currentMode());
}

detcoll_status_t detcoll_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                   detcoll_dtype_t dtype, detcoll_op_t op, const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Status precheck = takeRejection();
  if (Status entered = enterBlockingCall("detcoll_allreduce"); !entered.isOk())
    return finish(entered);
  BufferPlace place;
  if (precheck.isOk()) precheck = place.add(sendbuf, "sendbuf");
  if (precheck.isOk()) precheck = place.add(recvbuf, "recvbuf");
  TracedCall traced;
  if (g_runtime->trace && precheck.isOk()) {
    traced = traceReduction(&sendbuf, 1, true, recvbuf, count, static_cast<int>(dtype),
                            static_cast<int>(op), name, place.device());
  }
  return finish(
      traceResult(traced, leaveBlockingCall(g_runtime->collectives->allreduce(
                              currentMode(), sendbuf, recvbuf, count, static_cast<int>(dtype),
                              static_cast<int>(op), name, precheck, place.device()))));
}

detcoll_status_t detcoll_allreduce_leaves(const void* const* leaves, int nleaves, void* recvbuf,
                                          size_t count, detcoll_dtype_t dtype, detcoll_op_t op,
                                          const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Status precheck = takeRejection();
  if (Status entered = enterBlockingCall("detcoll_allreduce_leaves"); !entered.isOk())
    return finish(entered);
  BufferPlace place;
  if (precheck.isOk() && leaves != nullptr && nleaves >= 1 &&
      nleaves <= collective::kMaxLeavesPerRank) {  // else the collective says why
    for (int l = 0; l < nleaves && precheck.isOk(); ++l) {
      precheck = place.add(leaves[l], "leaves[" + std::to_string(l) + "]");
    }
  }
  if (precheck.isOk()) precheck = place.add(recvbuf, "recvbuf");
  TracedCall traced;
  if (g_runtime->trace && precheck.isOk()) {
    traced = traceReduction(leaves, nleaves, false, recvbuf, count, static_cast<int>(dtype),
                            static_cast<int>(op), name, place.device());
  }
  return finish(traceResult(
      traced, leaveBlockingCall(g_runtime->collectives->allreduceLeaves(
                  currentMode(), leaves, nleaves, recvbuf, count, static_cast<int>(dtype),
                  static_cast<int>(op), name, precheck, place.device()))));
}

detcoll_status_t detcoll_broadcast(void* buf, size_t count, detcoll_dtype_t dtype, int root,
                                   const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Status precheck = takeRejection();
  if (Status entered = enterBlockingCall("detcoll_broadcast"); !entered.isOk())
    return finish(entered);
  BufferPlace place;
  if (precheck.isOk()) precheck = place.add(buf, "buf");
  TracedCall traced;
  if (g_runtime->trace && precheck.isOk()) {
    traced = traceBroadcast(buf, count, static_cast<int>(dtype), root, name, place.device());
  }
  return finish(traceResult(
      traced, leaveBlockingCall(g_runtime->collectives->broadcast(
                  buf, count, static_cast<int>(dtype), root, name, precheck, place.device()))));
}

detcoll_status_t detcoll_allgather(const void* sendbuf, void* recvbuf, size_t count,
                                   detcoll_dtype_t dtype, const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Status precheck = takeRejection();
  if (Status entered = enterBlockingCall("detcoll_allgather"); !entered.isOk())
    return finish(entered);
  BufferPlace place;
  if (precheck.isOk()) precheck = place.add(sendbuf, "sendbuf");
  if (precheck.isOk()) precheck = place.add(recvbuf, "recvbuf");
  TracedCall traced;
  if (g_runtime->trace && precheck.isOk()) {
    traced = traceAllgather(sendbuf, recvbuf, count, static_cast<int>(dtype), name, place.device());
  }
  return finish(traceResult(traced, leaveBlockingCall(g_runtime->collectives->allgather(
                                        sendbuf, recvbuf, count, static_cast<int>(dtype), name,
                                        precheck, place.device()))));
}

detcoll_status_t detcoll_set_cuda_stream(void* stream) {
  // The calling thread's own setting: no runtime needed (the fills take it before init).
#if !DETCOLL_WITH_CUDA
  if (stream != nullptr) {
    return finish(Status::invalidArgument(
        "detcoll_set_cuda_stream: this build of detcoll has no CUDA, so no stream to run on"));
  }
#endif
  t_cudaStream = stream;
  return DETCOLL_SUCCESS;
}

int detcoll_built_with_cuda(void) {
  return DETCOLL_WITH_CUDA ? 1 : 0;
}

int detcoll_nccl_version(void) {
#if DETCOLL_WITH_NCCL
  return NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

const char* detcoll_last_error(void) {
  return t_lastError.c_str();
}

detcoll_status_t detcoll_reject_next_call(const char* reason) {
  t_rejection = reason != nullptr ? std::string(reason) : std::string();
  return DETCOLL_SUCCESS;
}

}  // extern "C"
