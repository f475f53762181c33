#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace detcoll {
namespace {

Status invalid(const char* name, const std::string& text, const std::string& expected) {
  return Status::invalidArgument("invalid value '" + text + "' for " + name + ": expected " +
                                 expected);
}

// Returns the value of `name`, or of `fallback` when `name` is unset; records what was used.
const char* lookUp(const EnvLookup& lookup, const char* name, const char* fallback,
                   const char** used, Config* config) {
  for (const char* candidate : {name, fallback}) {
    if (candidate == nullptr) continue;
    const char* value = lookup(candidate);
    if (value != nullptr && value[0] != '\0') {
      *used = candidate;
      config->setVariables.push_back(std::string(candidate) + "=" + value);
      return value;
    }
  }
  return nullptr;
}

}  // namespace

EnvLookup processEnvironment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

Status parseUnsignedValue(const char* name, const std::string& text, uint64_t* value) {
  const std::string expected = "a non-negative integer";
  if (text.empty() || text.size() > 20) return invalid(name, text, expected);
  for (char c : text) {
    if (c < '0' || c > '9') return invalid(name, text, expected);
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return invalid(name, text, expected + " below 2^64");
  *value = parsed;
  return Status::ok();
}

Status parseNonNegativeNumber(const char* name, const std::string& text, double* value) {
  const std::string expected = "a non-negative decimal number";
  if (text.empty()) return invalid(name, text, expected);
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return invalid(name, text, expected);
    }
  }
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || *end != '\0' || !std::isfinite(parsed) || parsed < 0) {
    return invalid(name, text, expected);
  }
  *value = parsed;
  return Status::ok();
}

Status loadConfig(const EnvLookup& lookup, Config* config) {
  Config result;
  const char* used = nullptr;
  if (const char* v = lookUp(lookup, "DETCOLL_DETERMINISM", nullptr, &used, &result)) {
    if (!parseMode(v, &result.mode)) return invalid(used, v, "native, ordered or invariant");
  }
  if (const char* v =
          lookUp(lookup, "DETCOLL_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", &used, &result)) {
    DETCOLL_RETURN_IF_ERROR(parseUnsignedValue(used, v, &result.fusionThresholdBytes));
  }
  if (const char* v = lookUp(lookup, "DETCOLL_CYCLE_TIME", "HOROVOD_CYCLE_TIME", &used, &result)) {
    DETCOLL_RETURN_IF_ERROR(parseNonNegativeNumber(used, v, &result.cycleTimeMs));
  }
  if (const char* v = lookUp(lookup, "DETCOLL_LOG_LEVEL", nullptr, &used, &result)) {
    if (!parseLogLevel(v, &result.logLevel)) {
      return invalid(used, v, "NONE, ERROR, WARN, INFO, DEBUG or TRACE");
    }
  }
  if (const char* v = lookUp(lookup, "DETCOLL_TIMELINE", nullptr, &used, &result)) {
    result.timelinePath = v;
  }
  if (const char* v = lookUp(lookup, "DETCOLL_STALL_CHECK_SECONDS", nullptr, &used, &result)) {
    DETCOLL_RETURN_IF_ERROR(parseNonNegativeNumber(used, v, &result.stallCheckSeconds));
  }
  if (const char* v = lookUp(lookup, "DETCOLL_STALL_SHUTDOWN_SECONDS", nullptr, &used, &result)) {
    DETCOLL_RETURN_IF_ERROR(parseNonNegativeNumber(used, v, &result.stallShutdownSeconds));
  }
  if (const char* v = lookUp(lookup, "DETCOLL_GPU_TRANSPORT", nullptr, &used, &result)) {
    const std::string text = v;
    if (text == "auto") {
      result.gpuTransport = GpuTransport::kAuto;
    } else if (text == "nccl") {
      result.gpuTransport = GpuTransport::kNccl;
    } else if (text == "mpi") {
      result.gpuTransport = GpuTransport::kMpi;
    } else {
      return invalid(used, v, "auto, nccl or mpi");
    }
  }
  if (const char* v = lookUp(lookup, "DETCOLL_SEED", nullptr, &used, &result)) {
    DETCOLL_RETURN_IF_ERROR(parseUnsignedValue(used, v, &result.seed));
    result.seedSet = true;
  }
  *config = std::move(result);
  return Status::ok();
}

}  // namespace detcoll
