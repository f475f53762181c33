#pragma once

// What host code calling the CUDA runtime shares: a failed call as a Status naming it, and a
// scope that makes a device current and gives the caller's back. Include where DETCOLL_WITH_CUDA.

#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace detcoll {

// DETCOLL_ERR_BACKEND naming `what` for a failure (its sticky error cleared), else ok.
inline Status cudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();
  return Status::backend(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// The calling thread's current device is `device` for the scope, the caller's again after
// (nothing is set when it already is).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) {
      previous_ = -1;  // nothing to set, nothing to give back
      return;
    }
    status_ = cudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CudaDeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

}  // namespace detcoll
