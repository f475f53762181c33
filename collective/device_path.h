#pragma once

// Collectives on CUDA device memory, run by the checked collectives (collectives.h) once every
// rank has agreed on the call. Two ways, the same bits (the CPU path's):
//   NCCL  the GPU data path (collective/device_allreduce.h) over an NCCL communicator
//         (collective/transport/nccl_transport.h), created at the first device call on the device
//         of its buffers, its unique id broadcast from rank 0 over the host communicator;
//   host  the buffers staged through host memory onto the CPU path: where NCCL is not built, or
//         DETCOLL_GPU_TRANSPORT=mpi, or (auto) NCCL could not start on some rank.
// What one rank can get wrong alone (NCCL's start, scratch, staging copies) is agreed over the
// host communicator before any transfer, so a failure is every rank's and no rank waits for
// another. Work runs on the caller's stream when one is set (and the call returns without waiting
// for it, like NCCL), else on the library's own stream, and the call returns when it is done. The
// host way always waits.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collective/allreduce.h"
#include "collective/settings.h"
#include "collective/transport/communicator.h"

namespace detcoll::collective {

class DevicePath {
 public:
  DevicePath(transport::Communicator& comm, GpuTransport transport);
  ~DevicePath();
  DevicePath(const DevicePath&) = delete;
  DevicePath& operator=(const DevicePath&) = delete;

  // The cudaStream_t of later calls; null: the library's own stream.
  void setStream(void* stream) { userStream_ = stream; }

  // The same call on every rank; every buffer is memory of CUDA device `device`. Staged through
  // host memory, it runs the CPU path (allreduce.h) on host copies of the leaves.
  Status allreduce(const AllreduceOptions& options, int device);
  Status broadcast(void* data, size_t bytes, int root, int device);
  Status allgather(const void* send, void* recv, size_t bytes, int device);

  // Whether the calls so far went over NCCL (false before the first device call).
  bool usesNccl() const { return nccl_ != nullptr; }
  // A local check, made before the call agreement: the buffers must be on the device the first
  // device call fixed.
  Status checkDevice(int device) const;

 private:
  // Decides, at the first device call, NCCL or host; the same decision on every rank.
  Status prepare(int device);
  // The stream of this call: the caller's, or the library's (made by prepare).
  Status stream(void** stream);
  // Waits for the call's work when it ran on the library's stream.
  Status finish();
  // work(stream) on the call's stream, then finish().
  Status onStream(const std::function<Status(void* stream)>& work);
  // Host copies of `count` device buffers of `bytes`, after the work before the call; agreed, so
  // a rank whose copy failed fails every rank.
  Status stage(const void* const* buffers, int count, size_t bytes,
               std::vector<std::vector<char>>* out);
  // Copies a host result to the device and waits until it is there.
  Status unstage(void* device, const void* host, size_t bytes);
  // NCCL on every rank, or (auto) the host way on every rank; an error on every rank otherwise.
  Status startNccl(int device);

  transport::Communicator& comm_;
  GpuTransport transport_;
  bool prepared_ = false;
  std::unique_ptr<transport::Exchange> nccl_;  // an NcclTransport once NCCL is in use
  int device_ = -1;
  void* userStream_ = nullptr;
  void* libraryStream_ = nullptr;
};

}  // namespace detcoll::collective
