#include "collective/device_path.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collective/agreement.h"
#include "collective/allgather.h"
#include "collective/broadcast.h"
#include "collective/transport/exchange.h"
#include "common/config.h"
#include "common/logging.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_scope.h"

#include "collective/device_allreduce.h"
#endif
#if DETCOLL_WITH_NCCL
#include "collective/transport/nccl_transport.h"
#endif

namespace detcoll::collective {
namespace {

#if !DETCOLL_WITH_CUDA
Status needsCuda() {
  return Status::invalidArgument("device memory needs a build of detcoll with CUDA");
}
#endif

}  // namespace

DevicePath::DevicePath(transport::Communicator& comm, GpuTransport transport)
    : comm_(comm), transport_(transport) {}

DevicePath::~DevicePath() {
#if DETCOLL_WITH_CUDA
  if (device_ >= 0) {
    CudaDeviceScope scope(device_);
    nccl_.reset();
    if (libraryStream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(libraryStream_));
  }
#endif
}

Status DevicePath::checkDevice(int device) const {
  if (!prepared_ || device == device_) return Status::ok();
  return Status::invalidArgument("the buffers are on CUDA device " + std::to_string(device) +
                                 "; detcoll's device collectives run on device " +
                                 std::to_string(device_) + ", where the first one was called");
}

Status DevicePath::prepare(int device) {
  if (prepared_) return checkDevice(device);
  DETCOLL_RETURN_IF_ERROR(startNccl(device));
  device_ = device;
#if DETCOLL_WITH_CUDA
  // The library's stream, made now so that no later call can fail alone making it.
  {
    CudaDeviceScope scope(device_);
    Status made = scope.status();
    cudaStream_t s = nullptr;
    if (made.isOk()) made = cudaStatus(cudaStreamCreate(&s), "cudaStreamCreate");
    if (made.isOk()) libraryStream_ = s;
    DETCOLL_RETURN_IF_ERROR(agreeOnStatus(comm_, made));
  }
#endif
  prepared_ = true;
  return Status::ok();
}

Status DevicePath::startNccl(int device) {
#if DETCOLL_WITH_NCCL
  if (transport_ == GpuTransport::kMpi) return Status::ok();
  // Rank 0 makes the id; every rank learns it, or that there is none, in one broadcast.
  std::array<char, 1 + sizeof(transport::NcclTransport::UniqueId)> message{};
  Status local = Status::ok();
  if (comm_.rank() == 0) {
    transport::NcclTransport::UniqueId id;
    local = transport::NcclTransport::uniqueId(&id);
    message[0] = local.isOk() ? 1 : 0;
    std::memcpy(message.data() + 1, id.data(), id.size());
  }
  DETCOLL_RETURN_IF_ERROR(collective::broadcast(comm_, {message.data(), message.size(), 0}));
  if (message[0] == 0 && comm_.rank() != 0) {
    local = Status::backend("rank 0 could not create an NCCL id");
  }
  // Every rank on its device, or none goes into NCCL's init.
  std::unique_ptr<transport::NcclTransport> transport;
  Status started = agreeOnStatus(comm_, local);
  if (started.isOk()) {
    CudaDeviceScope scope(device);
    local = scope.status();
    started = agreeOnStatus(comm_, local);
    if (started.isOk()) {
      transport::NcclTransport::UniqueId id;
      std::memcpy(id.data(), message.data() + 1, id.size());
      // A failure here may leave the other ranks inside NCCL's init: NCCL's own behaviour.
      local = transport::NcclTransport::create(id, comm_.rank(), comm_.size(), &transport);
      started = agreeOnStatus(comm_, local);
    }
  }
  if (started.isOk()) {
    transport->setAgreement([this](const Status& s) { return agreeOnStatus(comm_, s); });
    nccl_ = std::move(transport);
    DETCOLL_LOG(kInfo) << "collectives on device memory run over NCCL on device " << device;
    return Status::ok();
  }
  transport.reset();  // where it was made while another rank failed
  if (transport_ == GpuTransport::kNccl) {
    return Status(started.code(),
                  "DETCOLL_GPU_TRANSPORT is nccl, but NCCL could not start: " + started.message());
  }
  DETCOLL_LOG(kWarn) << "NCCL could not start (" << started.message()
                     << "); collectives on device memory are staged through host memory";
  return Status::ok();
#else
  (void)device;
  if (transport_ == GpuTransport::kNccl) {
    return Status::invalidArgument("DETCOLL_GPU_TRANSPORT is nccl, but this build has no NCCL");
  }
  return Status::ok();
#endif
}

#if DETCOLL_WITH_CUDA

Status DevicePath::stream(void** stream) {
  *stream = userStream_ != nullptr ? userStream_ : libraryStream_;
  if (*stream == nullptr) return Status::internal("no stream: the device path is not prepared");
  return Status::ok();
}

Status DevicePath::onStream(const std::function<Status(void* stream)>& work) {
  void* s = nullptr;
  DETCOLL_RETURN_IF_ERROR(stream(&s));
  DETCOLL_RETURN_IF_ERROR(work(s));
  return finish();
}

Status DevicePath::finish() {
  if (userStream_ != nullptr) return Status::ok();
  return cudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(libraryStream_)),
                    "cudaStreamSynchronize");
}

Status DevicePath::stage(const void* const* buffers, int count, size_t bytes,
                         std::vector<std::vector<char>>* out) {
  // On the call's stream, after the work already there; then wait for the copies. Every rank
  // learns whether every rank's copies succeeded, before the host collective that follows.
  auto copy = [&]() -> Status {
    void* s = nullptr;
    DETCOLL_RETURN_IF_ERROR(stream(&s));
    out->resize(count);
    for (int j = 0; j < count; ++j) {
      (*out)[j].resize(bytes);
      DETCOLL_RETURN_IF_ERROR(
          cudaStatus(cudaMemcpyAsync((*out)[j].data(), buffers[j], bytes, cudaMemcpyDeviceToHost,
                                     static_cast<cudaStream_t>(s)),
                     "cudaMemcpyAsync"));
    }
    return cudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
  };
  return agreeOnStatus(comm_, copy());
}

Status DevicePath::unstage(void* device, const void* host, size_t bytes) {
  // Pageable memory: the copy may return before it lands, so wait for the stream.
  void* s = nullptr;
  DETCOLL_RETURN_IF_ERROR(stream(&s));
  DETCOLL_RETURN_IF_ERROR(cudaStatus(
      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(s)),
      "cudaMemcpyAsync"));
  return cudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
}

Status DevicePath::allreduce(const AllreduceOptions& options, int device) {
  DETCOLL_RETURN_IF_ERROR(prepare(device));
  CudaDeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
  if (nccl_) {
    AllreduceOptions device = options;
    device.segmentBytes = kDeviceSegmentBytes;
    // DETCOLL_INVARIANT_TRANSPORT=mpi is the host path's: device memory keeps NCCL's pipeline.
    if (device.invariantTransport == InvariantTransport::kMpi) {
      device.invariantTransport = InvariantTransport::kAuto;
    }
    return onStream([&](void* s) { return deviceAllreduce(*nccl_, s, device); });
  }
  const size_t bytes = options.count * dataTypeSize(options.type);
  std::vector<std::vector<char>> staged;
  DETCOLL_RETURN_IF_ERROR(stage(options.leaves, options.nleaves, bytes, &staged));
  std::vector<const void*> pointers;
  for (const auto& leaf : staged) pointers.push_back(leaf.data());
  std::vector<char> result(bytes);
  AllreduceOptions host = options;
  host.leaves = pointers.data();
  host.recv = result.data();
  DETCOLL_RETURN_IF_ERROR(collective::allreduce(comm_, host));
  return unstage(options.recv, result.data(), bytes);
}

Status DevicePath::broadcast(void* data, size_t bytes, int root, int device) {
  DETCOLL_RETURN_IF_ERROR(prepare(device));
  CudaDeviceScope scope(device_);  // the caller's device again on return
  DETCOLL_RETURN_IF_ERROR(scope.status());
#if DETCOLL_WITH_NCCL
  if (nccl_) {
    return onStream([&](void* s) {
      return static_cast<transport::NcclTransport&>(*nccl_).broadcast(data, bytes, root, s);
    });
  }
#endif
  std::vector<std::vector<char>> staged;
  const void* buffers[1] = {data};
  DETCOLL_RETURN_IF_ERROR(stage(buffers, 1, bytes, &staged));
  DETCOLL_RETURN_IF_ERROR(collective::broadcast(comm_, {staged[0].data(), bytes, root}));
  return unstage(data, staged[0].data(), bytes);
}

Status DevicePath::allgather(const void* send, void* recv, size_t bytes, int device) {
  DETCOLL_RETURN_IF_ERROR(prepare(device));
  CudaDeviceScope scope(device_);
  DETCOLL_RETURN_IF_ERROR(scope.status());
#if DETCOLL_WITH_NCCL
  if (nccl_) {
    return onStream([&](void* s) {
      return static_cast<transport::NcclTransport&>(*nccl_).allgather(send, recv, bytes, s);
    });
  }
#endif
  std::vector<std::vector<char>> staged;
  const void* buffers[1] = {send};
  DETCOLL_RETURN_IF_ERROR(stage(buffers, 1, bytes, &staged));
  std::vector<char> all(bytes * comm_.size());
  DETCOLL_RETURN_IF_ERROR(collective::allgather(comm_, {staged[0].data(), all.data(), bytes}));
  return unstage(recv, all.data(), all.size());
}

#else  // no CUDA: device memory is never found, so these are not reached

Status DevicePath::stream(void**) {
  return needsCuda();
}
Status DevicePath::onStream(const std::function<Status(void* stream)>& work) {
  void* s = nullptr;
  DETCOLL_RETURN_IF_ERROR(stream(&s));
  DETCOLL_RETURN_IF_ERROR(work(s));
  return finish();
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
Status DevicePath::allreduce(const AllreduceOptions&, int) {
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
