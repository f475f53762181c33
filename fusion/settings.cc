#include "fusion/settings.h"

namespace detcoll::fusion {

Status loadEngineSettings(Environment& env, EngineOptions* options) {
  EngineOptions result = *options;
  const char* used = nullptr;
  if (const char* v = env.get("DETCOLL_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", &used)) {
    uint64_t bytes = 0;
    DETCOLL_RETURN_IF_ERROR(parseInteger(used, v, kFusionThresholdRange, &bytes));
    result.fusionThresholdBytes = static_cast<size_t>(bytes);
  }
  if (const char* v = env.get("DETCOLL_CYCLE_TIME", "HOROVOD_CYCLE_TIME", &used)) {
    DETCOLL_RETURN_IF_ERROR(parseNumber(used, v, kCycleTimeMsRange, &result.cycleTimeMs));
  }
  if (const char* v = env.get("DETCOLL_TIMELINE", nullptr, &used)) result.timelinePath = v;
  if (const char* v = env.get("DETCOLL_TRACE", nullptr, &used)) result.traceDir = v;
  if (const char* v = env.get("DETCOLL_STALL_CHECK_SECONDS", nullptr, &used)) {
    DETCOLL_RETURN_IF_ERROR(parseNumber(used, v, kStallSecondsRange, &result.stallWarningSeconds));
  }
  if (const char* v = env.get("DETCOLL_STALL_SHUTDOWN_SECONDS", nullptr, &used)) {
    DETCOLL_RETURN_IF_ERROR(parseNumber(used, v, kStallSecondsRange, &result.stallShutdownSeconds));
  }
  *options = std::move(result);
  return Status::ok();
}

}  // namespace detcoll::fusion
