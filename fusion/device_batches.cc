#include "fusion/device_batches.h"

#include <algorithm>
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

#include "common/cuda_scope.h"
#include "fusion/device_copies.h"
#endif

namespace detcoll::fusion {

namespace {

using collective::transport::Communicator;

#if DETCOLL_WITH_CUDA
cudaStream_t asStream(void* s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t asEvent(void* e) {
  return static_cast<cudaEvent_t>(e);
}

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
    return cudaStatus(cudaEventCreateWithFlags(event, cudaEventDisableTiming),
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
      DETCOLL_RETURN_IF_ERROR(cudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
      cudaFree(data);
      data = nullptr;
      bytes = 0;
    }
    DETCOLL_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&data, want), "cudaMalloc"));
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
// A joined rank's stand-in (Engine::stand) has no buffers of its own: it reads `zeros` and
// writes `sink`, resolved for each batch.
struct Buffers {
  const void* zeros = nullptr;
  void* sink = nullptr;
  const void* send(const RequestSpec& spec) const { return spec.owned ? zeros : spec.send; }
  void* recv(const RequestSpec& spec) const { return spec.owned ? sink : spec.recv; }
};

// The copies that pack a fused batch's inputs into `buffer` in ready order (`in`), or its
// results back out of it.
std::vector<DeviceCopy> packing(const Batch& batch, const Buffers& b, void* buffer, bool in) {
  std::vector<DeviceCopy> copies;
  copies.reserve(batch.requests.size());
  char* at = static_cast<char*>(buffer);
  for (const RequestPtr& request : batch.requests) {
    const size_t bytes = request->descriptor().bytes();
    if (in) {
      copies.push_back({b.send(request->spec()), at, bytes});
    } else {
      copies.push_back({at, b.recv(request->spec()), bytes});
    }
    at += bytes;
  }
  return copies;
}
#endif

}  // namespace

#if DETCOLL_WITH_CUDA

Status DeviceMarks::make(int device, void* stream, std::shared_ptr<DeviceMarks>* out) {
  CudaDeviceScope scope(device);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  std::shared_ptr<DeviceMarks> marks(new DeviceMarks());
  marks->device_ = device;
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  DETCOLL_RETURN_IF_ERROR(eventPool().take(device, &ready));
  marks->ready_ = ready;
  DETCOLL_RETURN_IF_ERROR(eventPool().take(device, &done));
  marks->done_ = done;
  DETCOLL_RETURN_IF_ERROR(cudaStatus(cudaEventRecord(ready, asStream(stream)), "cudaEventRecord"));
  // `done` too, so that a request that fails before the engine queues its work has a `done` of
  // its own (the caller's work up to the enqueue), not the state a pooled event last had.
  DETCOLL_RETURN_IF_ERROR(cudaStatus(cudaEventRecord(done, asStream(stream)), "cudaEventRecord"));
  *out = std::move(marks);
  return Status::ok();
}

DeviceMarks::~DeviceMarks() {
  if (ready_ != nullptr) eventPool().give(device_, asEvent(ready_));
  if (done_ != nullptr) eventPool().give(device_, asEvent(done_));
}

Status DeviceMarks::waitFor(void* stream) const {
  CudaDeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  if (stream == nullptr) {
    return cudaStatus(cudaEventSynchronize(asEvent(done_)), "cudaEventSynchronize");
  }
  return cudaStatus(cudaStreamWaitEvent(asStream(stream), asEvent(done_), 0),
                    "cudaStreamWaitEvent");
}

struct DeviceBatches::State {
  State(Communicator& c, Options o) : comm(c), options(o), path(c, o.gpuTransport) {}
  ~State() {
    if (device < 0) return;
    CudaDeviceScope scope(device);
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
    CudaDeviceScope scope(d);
    DETCOLL_RETURN_IF_ERROR(scope.status());
    DETCOLL_RETURN_IF_ERROR(cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
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

Status DeviceBatches::run(const Batch& batch, int joinDevice) {
  State& s = *state_;
  const RequestSpec& lead = batch.requests[0]->spec();
  const Descriptor& d = lead.descriptor;
  // What this rank can get wrong alone (the device, the buffer, the queued copies) is agreed
  // before the collective, so that no rank waits in it for one that stayed out.
  // The device: of the requests; for a batch of a joined rank's stand-ins alone, the one its
  // device requests ran on, else the one join() was called on, else 0.
  int device = s.device >= 0 ? s.device : (joinDevice >= 0 ? joinDevice : 0);
  size_t joined = 0;  // the largest stand-in's bytes
  for (const RequestPtr& request : batch.requests) {
    const RequestSpec& spec = request->spec();
    if (spec.marks) device = spec.marks->device();
    if (spec.owned) joined = std::max(joined, request->descriptor().bytes());
  }
  Status local = s.prepare(device);
  std::optional<CudaDeviceScope> scope;
  if (local.isOk()) {
    scope.emplace(s.device);
    local = scope->status();
  }
  for (const RequestPtr& request : batch.requests) {
    const auto& marks = request->spec().marks;
    if (!local.isOk() || !marks) continue;  // a joined rank's stand-in has no marks
    if (marks->device() != s.device) {
      local = Status::invalidArgument(describeRequest(request->name(), request->descriptor()) +
                                      " is on CUDA device " + std::to_string(marks->device()) +
                                      "; this rank's device requests run on device " +
                                      std::to_string(s.device) + ", where the first one was");
      continue;
    }
    local = cudaStatus(cudaStreamWaitEvent(s.stream, asEvent(marks->ready()), 0),
                       "cudaStreamWaitEvent");
  }
  // The stand-ins' zeros and sink, grown (stream-ordered) before any copy refers to them.
  Buffers buffers;
  if (local.isOk() && joined > 0) {
    const size_t had = s.zeros.bytes;
    local = s.zeros.reserve(joined, s.stream);
    if (local.isOk() && s.zeros.bytes != had) {
      local =
          cudaStatus(cudaMemsetAsync(s.zeros.data, 0, s.zeros.bytes, s.stream), "cudaMemsetAsync");
    }
    if (local.isOk()) local = s.sink.reserve(joined, s.stream);
    buffers.zeros = s.zeros.data;
    buffers.sink = s.sink.data;
  }
  const size_t element = dataTypeSize(d.type);
  if (local.isOk() && batch.fused) {
    local = s.fusion.reserve(batch.bytes, s.stream);
    if (local.isOk()) {
      local = copyOnDevice(packing(batch, buffers, s.fusion.data, true), s.stream);
    }
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
    const void* lone = nullptr;
    if (batch.fused) {
      o.leaves = &fused;
      o.recv = s.fusion.data;
      o.count = batch.bytes / element;
    } else {
      lone = buffers.send(lead);
      o.leaves = &lone;
      o.recv = buffers.recv(lead);
      o.count = d.count;
    }
    status = s.path.allreduce(o, s.device);
    if (status.isOk() && batch.fused) {
      status = copyOnDevice(packing(batch, buffers, s.fusion.data, false), s.stream);
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
    local = cudaStatus(
        cudaMemcpyAsync(send.data(), lead.send, sendBytes, cudaMemcpyDeviceToHost, s.stream),
        "cudaMemcpyAsync");
    if (local.isOk()) {
      local = cudaStatus(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
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
      status = cudaStatus(
          cudaMemcpyAsync(lead.recv, recv.data(), recvBytes, cudaMemcpyHostToDevice, s.stream),
          "cudaMemcpyAsync");
    }
    // Pageable memory: the copy may return before it has read `recv`.
    if (status.isOk())
      status = cudaStatus(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  }
  // Every request's `done`, after its result (or the failure: a waiting stream must not hang).
  for (const RequestPtr& request : batch.requests) {
    const auto& marks = request->spec().marks;
    if (!marks) continue;
    const Status recorded =
        cudaStatus(cudaEventRecord(asEvent(marks->done()), s.stream), "cudaEventRecord");
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

Status DeviceBatches::run(const Batch&, int) {
  return Status::invalidArgument("device memory needs a build of detcoll with CUDA");
}

#endif

}  // namespace detcoll::fusion
