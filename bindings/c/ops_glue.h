#pragma once

// What the C entries of the deterministic ops share (detcoll_ops.cc, detcoll_ops_taps.cc): where
// a call's buffers live, the device or host run, and the argument conversions.

#include <atomic>
#include <exception>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "bindings/c/detcoll.h"
#include "bindings/c/runtime.h"
#include "common/config.h"
#include "kernels/ops/resample.h"
#include "kernels/ops/scatter.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/ops/device.h"
#endif

namespace detcoll::bindings::c {

// The CPU ops' thread count (detcoll_ops_set_threads; 0: every core).
extern std::atomic<int> g_opsThreads;

// Where an op's buffers live: *device = -1 for host memory, else the CUDA device holding them all.
inline Status placeOf(const char* op,
                      std::initializer_list<std::pair<const void*, const char*>> all, int* device) {
  BufferPlace place;
  for (const auto& [pointer, what] : all) {
    DETCOLL_RETURN_IF_ERROR(place.add(pointer, what).prefixed(op));
  }
  *device = place.device();
  return Status::ok();
}

// The device kernel (`call`, naming the stream `stream`) or, without CUDA, an internal error: no
// buffer is device memory in such a build.
#if DETCOLL_WITH_CUDA
#define DETCOLL_ON_DEVICE(...) \
  [&](void* stream) -> Status { return kernels::ops::device::__VA_ARGS__; }
#else
#define DETCOLL_ON_DEVICE(...) \
  [&](void*) -> Status { return Status::internal("device memory in a build without CUDA"); }
#endif

// onHost() for host memory; onDevice(stream) on `device`, on the calling thread's stream, or on
// the legacy default stream, waited for, when none is set.
template <typename Device, typename Host>
Status runChecked(const char* op, int device, Device onDevice, Host onHost);

// A kernel that throws (an allocation its sizes make impossible) fails with a status naming the
// op, instead of escaping through the C API.
template <typename Device, typename Host>
Status run(const char* op, int device, Device onDevice, Host onHost) {
  try {
    return runChecked(op, device, onDevice, onHost);
  } catch (const std::length_error&) {
    return Status::invalidArgument(std::string(op) + ": the sizes need more memory than there is");
  } catch (const std::bad_alloc&) {
    return Status::invalidArgument(std::string(op) + ": the sizes need more memory than there is");
  } catch (const std::exception& e) {
    return Status::invalidArgument(std::string(op) + ": " + e.what());
  }
}

template <typename Device, typename Host>
Status runChecked(const char* op, int device, Device onDevice, Host onHost) {
  if (device < 0) return onHost();
#if DETCOLL_WITH_CUDA
  int current = 0;
  cudaGetDevice(&current);
  cudaError_t error = cudaSetDevice(device);
  Status status;
  if (error == cudaSuccess) {
    void* stream = callingThreadCudaStream();
    status = onDevice(stream);
    if (status.isOk() && stream == nullptr) error = cudaStreamSynchronize(nullptr);
    cudaSetDevice(current);
  }
  if (status.isOk() && error != cudaSuccess) {
    (void)cudaGetLastError();
    status = Status::backend(std::string(op) + ": CUDA: " + cudaGetErrorString(error));
  }
  return status;
#else
  (void)op;
  return onDevice(nullptr);
#endif
}

inline Status shapeOf(const char* op, const char* what, const int64_t* dims, int ndim,
                      kernels::ops::Shape* shape) {
  if (ndim < 0 || ndim > 16 || (ndim > 0 && dims == nullptr)) {
    return Status::invalidArgument(std::string(op) + ": " + what + " needs 0 to 16 dimensions");
  }
  shape->assign(dims, dims + ndim);
  return Status::ok();
}

inline Status typeOf(const char* op, detcoll_dtype_t dtype, DataType* type) {
  if (!isValidDataType(static_cast<int>(dtype))) {
    return Status::invalidArgument(std::string(op) + ": unknown dtype " +
                                   std::to_string(static_cast<int>(dtype)));
  }
  *type = static_cast<DataType>(dtype);
  return Status::ok();
}

inline Status poolOf(const char* op, const detcoll_pool2d_t* pool, int64_t planes, int64_t inHeight,
                     int64_t inWidth, kernels::ops::Pool2d* p) {
  if (pool == nullptr) return Status::invalidArgument(std::string(op) + ": pool is null");
  p->planes = planes;
  p->inHeight = inHeight;
  p->inWidth = inWidth;
  p->kernelHeight = pool->kernel[0];
  p->kernelWidth = pool->kernel[1];
  p->strideHeight = pool->stride[0];
  p->strideWidth = pool->stride[1];
  p->padHeight = pool->padding[0];
  p->padWidth = pool->padding[1];
  p->dilationHeight = pool->dilation[0];
  p->dilationWidth = pool->dilation[1];
  p->ceilMode = pool->ceil_mode != 0;
  return Status::ok();
}

}  // namespace detcoll::bindings::c
