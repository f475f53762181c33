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

// For callOp: the device kernel kernels::ops::device::CALL and the CPU reference
// kernels::ops::CALL, each a lambda of the dtype (`type`; the device's also of `stream`).
#if DETCOLL_WITH_CUDA
#define DETCOLL_DEVICE_OP(...) \
  [&](DataType type, void* stream) -> Status { return kernels::ops::device::__VA_ARGS__; }
#else
#define DETCOLL_DEVICE_OP(...)                                        \
  [&](DataType, void*) -> Status {                                    \
    return Status::internal("device memory in a build without CUDA"); \
  }
#endif
#define DETCOLL_HOST_OP(...) [&](DataType type) -> Status { return kernels::ops::__VA_ARGS__; }

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

// The buffers an op names, for placeOf.
using Buffers = std::initializer_list<std::pair<const void*, const char*>>;

// What an op's C entry does: the dtype checked, then check() (the entry's own arguments), the
// buffers placed, then onDevice(type, stream) or onHost(type) (DETCOLL_DEVICE_OP and
// DETCOLL_HOST_OP make them); the C status.
template <typename Check, typename Device, typename Host>
detcoll_status_t callOpChecked(const char* op, detcoll_dtype_t dtype, Check check, Buffers buffers,
                               Device onDevice, Host onHost) {
  int device = -1;
  DataType type = DataType::kFloat32;
  Status status = typeOf(op, dtype, &type);
  if (status.isOk()) status = check();
  if (status.isOk()) status = placeOf(op, buffers, &device);
  if (status.isOk()) {
    status = run(
        op, device, [&](void* stream) { return onDevice(type, stream); },
        [&] { return onHost(type); });
  }
  return finish(status);
}

template <typename Device, typename Host>
detcoll_status_t callOp(const char* op, detcoll_dtype_t dtype, Buffers buffers, Device onDevice,
                        Host onHost) {
  return callOpChecked(
      op, dtype, [] { return Status::ok(); }, buffers, onDevice, onHost);
}

// lo to hi spatial dimensions, with their arrays given (`what` names them).
inline Status spatialRange(const char* op, int spatial, int lo, int hi, bool given,
                           const char* what) {
  if (spatial >= lo && spatial <= hi && given) return Status::ok();
  return Status::invalidArgument(std::string(op) + ": " + std::to_string(lo) +
                                 (hi == lo + 1 ? " or " : " to ") + std::to_string(hi) +
                                 " spatial dimensions, with " + what);
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
