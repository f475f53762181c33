#include "collective/device_collectives.h"

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "collective/device_transport.h"
#include "common/config.h"
#include "common/logging.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "collective/device_allreduce.h"
#endif
#if DETCOLL_WITH_NCCL
#include "collective/nccl_transport.h"
#endif

namespace detcoll::collective {
namespace {

#if DETCOLL_WITH_CUDA
Status cudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();
  return Status::backend(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// The calling thread's current device is `device` for the scope, and the caller's again after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
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
#endif

#if !DETCOLL_WITH_CUDA
Status needsCuda() {
  return Status::invalidArgument("device memory needs a build of detcoll with CUDA");
}
#endif

}  // namespace

DevicePath::DevicePath(Communicator& comm, GpuTransport transport)
    : comm_(comm), transport_(transport) {}

DevicePath::~DevicePath() {
  nccl_.reset();
#if DETCOLL_WITH_CUDA
  if (libraryStream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(libraryStream_));
#endif
}

Status DevicePath::prepare(int device) {
  if (prepared_) {
    if (device == device_) return Status::ok();
    return Status::invalidArgument("the buffers are on CUDA device " + std::to_string(device) +
                                   "; detcoll's device collectives run on device " +
                                   std::to_string(device_) + ", where the first one was called");
  }
#if DETCOLL_WITH_NCCL
  if (transport_ != GpuTransport::kMpi) {
    // Rank 0 makes the id; every rank learns it, or that there is none, in one broadcast.
    std::array<char, 1 + sizeof(NcclTransport::UniqueId)> message{};
    Status made = Status::ok();
    if (comm_.rank() == 0) {
      NcclTransport::UniqueId id;
      made = NcclTransport::uniqueId(&id);
      message[0] = made.isOk() ? 1 : 0;
      std::memcpy(message.data() + 1, id.data(), id.size());
    }
    DETCOLL_RETURN_IF_ERROR(comm_.broadcast(message.data(), message.size(), 0));
    if (message[0] == 0) {
      const std::string why = "rank 0 could not create an NCCL id" +
                              (made.isOk() ? std::string() : ": " + made.message());
      if (transport_ == GpuTransport::kNccl) {
        return Status::backend("DETCOLL_GPU_TRANSPORT is nccl, but " + why);
      }
      DETCOLL_LOG(kWarn) << why << "; collectives on device memory are staged through host memory";
    } else {
      NcclTransport::UniqueId id;
      std::memcpy(id.data(), message.data() + 1, id.size());
      DeviceScope scope(device);
      DETCOLL_RETURN_IF_ERROR(scope.status());
      std::unique_ptr<NcclTransport> transport;
      DETCOLL_RETURN_IF_ERROR(NcclTransport::create(id, comm_.rank(), comm_.size(), &transport));
      nccl_ = std::move(transport);
      DETCOLL_LOG(kInfo) << "collectives on device memory run over NCCL on device " << device;
    }
  }
#else
  if (transport_ == GpuTransport::kNccl) {
    return Status::invalidArgument("DETCOLL_GPU_TRANSPORT is nccl, but this build has no NCCL");
  }
#endif
  device_ = device;
  prepared_ = true;
  return Status::ok();
}

#if DETCOLL_WITH_CUDA

Status DevicePath::stream(void** stream) {
  if (userStream_ != nullptr) {
    *stream = userStream_;
    return Status::ok();
  }
  if (libraryStream_ == nullptr) {
    cudaStream_t s = nullptr;
    DETCOLL_RETURN_IF_ERROR(cudaCheck(cudaStreamCreate(&s), "cudaStreamCreate"));
    libraryStream_ = s;
  }
  *stream = libraryStream_;
  return Status::ok();
}

Status DevicePath::finish() {
  if (userStream_ != nullptr) return Status::ok();
  return cudaCheck(cudaStreamSynchronize(static_cast<cudaStream_t>(libraryStream_)),
                   "cudaStreamSynchronize");
}

Status DevicePath::stage(const void* const* buffers, int count, size_t bytes,
                         std::vector<std::vector<char>>* out) {
  // The caller's stream first; cudaMemcpy then orders itself after the legacy default stream.
  if (userStream_ != nullptr) {
    DETCOLL_RETURN_IF_ERROR(cudaCheck(cudaStreamSynchronize(static_cast<cudaStream_t>(userStream_)),
                                      "cudaStreamSynchronize"));
  }
  out->resize(count);
  for (int j = 0; j < count; ++j) {
    (*out)[j].resize(bytes);
    DETCOLL_RETURN_IF_ERROR(cudaCheck(
        cudaMemcpy((*out)[j].data(), buffers[j], bytes, cudaMemcpyDeviceToHost), "cudaMemcpy"));
  }
  return Status::ok();
}

Status DevicePath::unstage(void* device, const void* host, size_t bytes) {
  return cudaCheck(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

Status DevicePath::allreduce(Mode mode, const void* const* leaves, int nleaves, void* recv,
                             size_t count, DataType type, ReduceOp op, int64_t totalLeaves,
                             int device, const HostAllreduce& host) {
  DETCOLL_RETURN_IF_ERROR(prepare(device));
  DeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  if (nccl_) {
    void* s = nullptr;
    DETCOLL_RETURN_IF_ERROR(stream(&s));
    DETCOLL_RETURN_IF_ERROR(
        deviceAllreduce(*nccl_, s, mode, leaves, nleaves, recv, count, type, op, totalLeaves));
    return finish();
  }
  const size_t bytes = count * dataTypeSize(type);
  std::vector<std::vector<char>> staged;
  DETCOLL_RETURN_IF_ERROR(stage(leaves, nleaves, bytes, &staged));
  std::vector<const void*> pointers;
  for (const auto& leaf : staged) pointers.push_back(leaf.data());
  std::vector<char> result(bytes);
  DETCOLL_RETURN_IF_ERROR(host(pointers.data(), result.data()));
  return unstage(recv, result.data(), bytes);
}

Status DevicePath::broadcast(void* data, size_t bytes, int root, int device) {
  DETCOLL_RETURN_IF_ERROR(prepare(device));
  DeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
#if DETCOLL_WITH_NCCL
  if (nccl_) {
    void* s = nullptr;
    DETCOLL_RETURN_IF_ERROR(stream(&s));
    DETCOLL_RETURN_IF_ERROR(static_cast<NcclTransport&>(*nccl_).broadcast(data, bytes, root, s));
    return finish();
  }
#endif
  std::vector<std::vector<char>> staged;
  const void* buffers[1] = {data};
  DETCOLL_RETURN_IF_ERROR(stage(buffers, 1, bytes, &staged));
  DETCOLL_RETURN_IF_ERROR(comm_.broadcast(staged[0].data(), bytes, root));
  return unstage(data, staged[0].data(), bytes);
}

Status DevicePath::allgather(const void* send, void* recv, size_t bytes, int device) {
  DETCOLL_RETURN_IF_ERROR(prepare(device));
  DeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
#if DETCOLL_WITH_NCCL
  if (nccl_) {
    void* s = nullptr;
    DETCOLL_RETURN_IF_ERROR(stream(&s));
    DETCOLL_RETURN_IF_ERROR(static_cast<NcclTransport&>(*nccl_).allgather(send, recv, bytes, s));
    return finish();
  }
#endif
  std::vector<std::vector<char>> staged;
  const void* buffers[1] = {send};
  DETCOLL_RETURN_IF_ERROR(stage(buffers, 1, bytes, &staged));
  std::vector<char> all(bytes * comm_.size());
  DETCOLL_RETURN_IF_ERROR(comm_.allgather(staged[0].data(), all.data(), bytes));
  return unstage(recv, all.data(), all.size());
}

#else  // no CUDA: device memory is never found, so these are not reached

Status DevicePath::stream(void**) {
  return needsCuda();
}
Status DevicePath::finish() {
  return needsCuda();
}
Status DevicePath::stage(const void* const*, int, size_t, std::vector<std::vector<char>>*) {
  return needsCuda();
}
Status DevicePath::unstage(void*, const void*, size_t) {
  return needsCuda();
}
Status DevicePath::allreduce(Mode, const void* const*, int, void*, size_t, DataType, ReduceOp,
                             int64_t, int, const HostAllreduce&) {
  return needsCuda();
}
Status DevicePath::broadcast(void*, size_t, int, int) {
  return needsCuda();
}
Status DevicePath::allgather(const void*, void*, size_t, int) {
  return needsCuda();
}

#endif

}  // namespace detcoll::collective
