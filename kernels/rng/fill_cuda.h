#pragma once

// The CUDA fill: the same bits as fillHost (fill.h), computed on the device from the same
// host/device functions of distributions.h. Built only when CUDA is found.

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/rng/fill.h"

namespace detcoll::kernels::rng {

// `out` is device memory. The fill is enqueued on `stream` (a cudaStream_t; null: the legacy
// default stream) and not waited for; launch errors are returned as DETCOLL_ERR_BACKEND.
Status fillDevice(const Key& key, const FillSpec& spec, uint64_t offset, size_t count, void* out,
                  void* stream);

}  // namespace detcoll::kernels::rng
