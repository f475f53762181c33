#pragma once

// Many device-to-device copies in one launch per 128 of them (fusion/device_batches.h packs a
// fused batch's tensors into its fusion buffer and back with it): one copy per row of the grid,
// 16 bytes per thread where the copy's addresses and length allow, else 4 bytes, else 1. Bytes are
// moved, never combined, so the result is the copies' whatever the grid. Built with CUDA only.

#include <cstddef>
#include <vector>

#include "common/status.h"

namespace detcoll::fusion {

struct DeviceCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

// Enqueues every copy on `stream` (a cudaStream_t); a launch failure is DETCOLL_ERR_BACKEND.
Status copyOnDevice(const std::vector<DeviceCopy>& copies, void* stream);

}  // namespace detcoll::fusion
