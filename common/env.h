#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/logging.h"
#include "common/status.h"

namespace detcoll {

// How collectives on CUDA device memory travel: NCCL when it is built and a device is there (auto),
// NCCL only (nccl: an error where it cannot be used), or staged through host memory onto the
// MPI path (mpi).
enum class GpuTransport : int { kAuto = 0, kNccl = 1, kMpi = 2 };

// Every DETCOLL_* setting, parsed once at init. An invalid value is an error that names the
// variable and the value. An empty value counts as unset.
struct Config {
  Mode mode = Mode::kOrdered;                       // DETCOLL_DETERMINISM
  uint64_t fusionThresholdBytes = 64ull << 20;      // DETCOLL_FUSION_THRESHOLD (bytes)
  double cycleTimeMs = 1.0;                         // DETCOLL_CYCLE_TIME (milliseconds)
  LogLevel logLevel = LogLevel::kWarn;              // DETCOLL_LOG_LEVEL
  std::string timelinePath;                         // DETCOLL_TIMELINE (file; empty: off)
  double stallCheckSeconds = 60.0;                  // DETCOLL_STALL_CHECK_SECONDS (0: off)
  double stallShutdownSeconds = 600.0;              // DETCOLL_STALL_SHUTDOWN_SECONDS (0: never)
  GpuTransport gpuTransport = GpuTransport::kAuto;  // DETCOLL_GPU_TRANSPORT
  bool seedSet = false;                             // DETCOLL_SEED given
  uint64_t seed = 0;                                // DETCOLL_SEED: the root seed of every rank
  // "NAME=value" for every variable that was set, for the INFO log at init.
  std::vector<std::string> setVariables;
};

// Returns the value of a variable or nullptr; std::getenv in production, a map in tests.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup processEnvironment();

Status loadConfig(const EnvLookup& lookup, Config* config);

// Strict parsers, exposed for tests. `name` is used in the error text.
Status parseUnsignedValue(const char* name, const std::string& text, uint64_t* value);
Status parseNonNegativeNumber(const char* name, const std::string& text, double* value);

}  // namespace detcoll
