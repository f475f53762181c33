#include "fusion/device_batches.h"

#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collective/agreement.h"
#include "collective/alltoall.h"
#include "collective/reduce_scatter.h"
#include "common/config.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "fusion/device_copies.h"
#endif

namespace detcoll::fusion {

namespace {

using collective::transport::Communicator;

#if DETCOLL_WITH_CUDA
Status cudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();
  return Status::backend(std::string(what) + " failed: " + cudaGetErrorString(e));
}

cudaStream_t asStream(void* s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t asEvent(void* e) {
  return static_cast<cudaEvent_t>(e);
}

// The calling thread's current device is `device` for the scope, the caller's again after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) {
      previous_ = -1;  // nothing to set, nothing to restore
      return;
    }
    status_ = cudaCheck(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

// Events without timing, reused: making and destroying two per request cost more than the
// request's own launches. An event comes back when its marks are destroyed; its next record
// overwrites its state, and a wait already enqueued on it keeps the state it saw. Never freed: it
// may be used by an engine until the process exits.
class EventPool {
 public:
  Status take(int device, cudaEvent_t* event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = free_.size(); i-- > 0;) {
        if (free_[i].first == device) {
          *event = free_[i].second;
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return Status::ok();
        }
      }
    }
    return cudaCheck(cudaEventCreateWithFlags(event, cudaEventDisableTiming),
                     "cudaEventCreateWithFlags");
  }
  void give(int device, cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace_back(device, event);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<int, cudaEvent_t>> free_;
};

EventPool& eventPool() {
  static EventPool* pool = new EventPool();
  return *pool;
}

// A device buffer that only grows; its old memory is freed once the stream's work is done.
struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  Status reserve(size_t want, cudaStream_t stream) {
    if (want <= bytes) return Status::ok();
    if (data != nullptr) {
      DETCOLL_RETURN_IF_ERROR(cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
      cudaFree(data);
      data = nullptr;
      bytes = 0;
    }
    DETCOLL_RETURN_IF_ERROR(cudaCheck(cudaMalloc(&data, want), "cudaMalloc"));
    bytes = want;
    return Status::ok();
  }
  void release() {
    if (data != nullptr) cudaFree(data);
    data = nullptr;
    bytes = 0;
  }
};
#endif

#if DETCOLL_WITH_CUDA
// The copies that pack a fused batch's inputs into `buffer` in ready order (`in`), or its
// results back out of it.
std::vector<DeviceCopy> packing(const Batch& batch, void* buffer, bool in) {
  std::vector<DeviceCopy> copies;
  copies.reserve(batch.requests.size());
  char* at = static_cast<char*>(buffer);
  for (const RequestPtr& request : batch.requests) {
    const size_t bytes = request->descriptor().bytes();
    if (in) {
      copies.push_back({request->spec().send, at, bytes});
    } else {
      copies.push_back({at, request->spec().recv, bytes});
    }
    at += bytes;
  }
  return copies;
}
#endif

}  // namespace

#if DETCOLL_WITH_CUDA

Status DeviceMarks::make(int device, void* stream, std::shared_ptr<DeviceMarks>* out) {
  DeviceScope scope(device);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  std::shared_ptr<DeviceMarks> marks(new DeviceMarks());
  marks->device_ = device;
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  DETCOLL_RETURN_IF_ERROR(eventPool().take(device, &ready));
  marks->ready_ = ready;
  DETCOLL_RETURN_IF_ERROR(eventPool().take(device, &done));
  marks->done_ = done;
  DETCOLL_RETURN_IF_ERROR(cudaCheck(cudaEventRecord(ready, asStream(stream)), "cudaEventRecord"));
  *out = std::move(marks);
  return Status::ok();
}

DeviceMarks::~DeviceMarks() {
  if (ready_ != nullptr) eventPool().give(device_, asEvent(ready_));
  if (done_ != nullptr) eventPool().give(device_, asEvent(done_));
}

Status DeviceMarks::waitFor(void* stream) const {
  DeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  if (stream == nullptr) {
    return cudaCheck(cudaEventSynchronize(asEvent(done_)), "cudaEventSynchronize");
  }
  return cudaCheck(cudaStreamWaitEvent(asStream(stream), asEvent(done_), 0), "cudaStreamWaitEvent");
}

struct DeviceBatches::State {
  State(Communicator& c, Options o) : comm(c), options(o), path(c, o.gpuTransport) {}
  ~State() {
    if (device < 0) return;
    DeviceScope scope(device);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    fusion.release();
    zeros.release();
    sink.release();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  // The engine's stream on `d`, made at the first device batch.
  Status prepare(int d) {
    if (device >= 0) {
      if (d == device) return Status::ok();
      return Status::invalidArgument("a request on CUDA device " + std::to_string(d) +
                                     "; this rank's device requests run on device " +
                                     std::to_string(device) + ", where the first one was");
    }
    DeviceScope scope(d);
    DETCOLL_RETURN_IF_ERROR(scope.status());
    DETCOLL_RETURN_IF_ERROR(cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                      "cudaStreamCreateWithFlags"));
    device = d;
    path.setStream(stream);
    return Status::ok();
  }

  Communicator& comm;
  const Options options;
  collective::DevicePath path;
  int device = -1;
  cudaStream_t stream = nullptr;
  DeviceBuffer fusion;
  DeviceBuffer zeros;
  DeviceBuffer sink;
};

DeviceBatches::DeviceBatches(Communicator& comm, Options options)
    : state_(std::make_unique<State>(comm, options)) {}

DeviceBatches::~DeviceBatches() = default;

Status DeviceBatches::joinedBuffers(size_t bytes, const void** zeros, void** sink) {
  State& s = *state_;
  const Status ready = s.prepare(s.device >= 0 ? s.device : 0);
  DETCOLL_RETURN_IF_ERROR(ready);
  DeviceScope scope(s.device);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  const size_t had = s.zeros.bytes;
  DETCOLL_RETURN_IF_ERROR(s.zeros.reserve(bytes, s.stream));
  if (s.zeros.bytes != had) {
    DETCOLL_RETURN_IF_ERROR(
        cudaCheck(cudaMemsetAsync(s.zeros.data, 0, s.zeros.bytes, s.stream), "cudaMemsetAsync"));
  }
  DETCOLL_RETURN_IF_ERROR(s.sink.reserve(bytes, s.stream));
  *zeros = s.zeros.data;
  *sink = s.sink.data;
  return Status::ok();
}

Status DeviceBatches::run(const Batch& batch) {
  State& s = *state_;
  const RequestSpec& lead = batch.requests[0]->spec();
  const Descriptor& d = lead.descriptor;
  // What this rank can get wrong alone (the device, the buffer, the queued copies) is agreed
  // before the collective, so that no rank waits in it for one that stayed out.
  Status local = s.prepare(lead.marks ? lead.marks->device() : (s.device >= 0 ? s.device : 0));
  std::optional<DeviceScope> scope;
  if (local.isOk()) {
    scope.emplace(s.device);
    local = scope->status();
  }
  for (const RequestPtr& request : batch.requests) {
    const RequestSpec& spec = request->spec();
    if (local.isOk() && spec.owned && (spec.send == nullptr || spec.recv == nullptr)) {
      local = Status::backend("no device memory for a joined rank's zeros");
    }
    const auto& marks = spec.marks;
    if (!local.isOk() || !marks) continue;  // a joined rank's stand-in has no marks
    local =
        cudaCheck(cudaStreamWaitEvent(s.stream, asEvent(marks->ready()), 0), "cudaStreamWaitEvent");
  }
  const size_t element = dataTypeSize(d.type);
  if (local.isOk() && batch.fused) {
    local = s.fusion.reserve(batch.bytes, s.stream);
    if (local.isOk()) local = copyOnDevice(packing(batch, s.fusion.data, true), s.stream);
  }
  DETCOLL_RETURN_IF_ERROR(collective::agreeOnStatus(s.comm, local));

  Status status;
  if (d.kind == RequestKind::kAllreduce) {
    collective::AllreduceOptions o;
    o.mode = d.mode;
    o.type = d.type;
    o.op = d.op;
    o.segmentBytes = s.options.segmentBytes;
    o.invariantTransport = s.options.invariantTransport;
    const void* fused = s.fusion.data;
    if (batch.fused) {
      o.leaves = &fused;
      o.recv = s.fusion.data;
      o.count = batch.bytes / element;
    } else {
      o.leaves = &lead.send;
      o.recv = lead.recv;
      o.count = d.count;
    }
    status = s.path.allreduce(o, s.device);
    if (status.isOk() && batch.fused) {
      status = copyOnDevice(packing(batch, s.fusion.data, false), s.stream);
    }
  } else if (d.kind == RequestKind::kBroadcast) {
    status = s.path.broadcast(lead.recv, d.bytes(), d.root, s.device);
  } else if (d.kind == RequestKind::kAllgather) {
    status = s.path.allgather(lead.send, lead.recv, d.bytes(), s.device);
  } else {
    // Reduce-scatter and alltoall: through host memory onto the host collectives.
    const int rank = s.comm.rank();
    size_t sendBytes = 0;
    size_t recvBytes = 0;
    if (d.kind == RequestKind::kReducescatter) {
      sendBytes = d.bytes();
      recvBytes = static_cast<size_t>(d.blocks[rank]) * element;
    } else {
      for (uint64_t c : lead.sendCounts) sendBytes += c * element;
      for (uint64_t c : lead.recvCounts) recvBytes += c * element;
    }
    std::vector<char> send(sendBytes), recv(recvBytes);
    local = cudaCheck(
        cudaMemcpyAsync(send.data(), lead.send, sendBytes, cudaMemcpyDeviceToHost, s.stream),
        "cudaMemcpyAsync");
    if (local.isOk()) {
      local = cudaCheck(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
    }
    DETCOLL_RETURN_IF_ERROR(collective::agreeOnStatus(s.comm, local));
    if (d.kind == RequestKind::kReducescatter) {
      collective::ReduceScatterOptions o;
      o.mode = d.mode;
      o.send = send.data();
      o.recv = recv.data();
      o.blocks.assign(d.blocks.begin(), d.blocks.end());
      o.type = d.type;
      o.op = d.op;
      o.segmentBytes = s.options.segmentBytes;
      status = collective::reduceScatter(s.comm, o);
    } else {
      collective::AlltoallOptions o;
      o.send = send.data();
      o.recv = recv.data();
      o.sendCounts = lead.sendCounts;
      o.recvCounts = lead.recvCounts;
      o.elementBytes = element;
      status = collective::alltoall(s.comm, o);
    }
    if (status.isOk()) {
      status = cudaCheck(
          cudaMemcpyAsync(lead.recv, recv.data(), recvBytes, cudaMemcpyHostToDevice, s.stream),
          "cudaMemcpyAsync");
    }
    // Pageable memory: the copy may return before it has read `recv`.
    if (status.isOk()) status = cudaCheck(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  }
  // Every request's `done`, after its result (or the failure: a waiting stream must not hang).
  for (const RequestPtr& request : batch.requests) {
    const auto& marks = request->spec().marks;
    if (!marks) continue;
    const Status recorded =
        cudaCheck(cudaEventRecord(asEvent(marks->done()), s.stream), "cudaEventRecord");
    if (status.isOk()) status = recorded;
  }
  return status;
}

#else  // no CUDA: no memory is device memory, and no request reaches these

Status DeviceMarks::make(int, void*, std::shared_ptr<DeviceMarks>*) {
  return Status::invalidArgument("device memory needs a build of detcoll with CUDA");
}

DeviceMarks::~DeviceMarks() = default;

Status DeviceMarks::waitFor(void*) const {
  return Status::ok();
}

struct DeviceBatches::State {};

DeviceBatches::DeviceBatches(Communicator&, Options) : state_(std::make_unique<State>()) {}

DeviceBatches::~DeviceBatches() = default;

Status DeviceBatches::joinedBuffers(size_t, const void**, void**) {
  return Status::invalidArgument("device memory needs a build of detcoll with CUDA");
}

Status DeviceBatches::run(const Batch&) {
  return Status::invalidArgument("device memory needs a build of detcoll with CUDA");
}

#endif

}  // namespace detcoll::fusion
