#pragma once

// The collective layer's settings, read from the environment at init:
//   DETCOLL_DETERMINISM    native | ordered | invariant (default ordered): the mode of every call
//   DETCOLL_GPU_TRANSPORT  auto | nccl | mpi (default auto): how collectives on device memory
//                          travel (device_path.h)

#include <string>

#include "common/dtype.h"
#include "common/env.h"
#include "common/status.h"

namespace detcoll::collective {

// NCCL when it is built and a device is there (auto), NCCL only (nccl: an error where it cannot
// be used), or staged through host memory onto the CPU path (mpi).
enum class GpuTransport : int { kAuto = 0, kNccl = 1, kMpi = 2 };
const char* gpuTransportName(GpuTransport transport);

struct Settings {
  Mode mode = Mode::kOrdered;
  GpuTransport gpuTransport = GpuTransport::kAuto;
};

// The settings from `env`; on an invalid value, the error and *settings untouched.
Status loadSettings(Environment& env, Settings* settings);

}  // namespace detcoll::collective
