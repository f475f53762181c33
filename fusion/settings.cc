#include "fusion/settings.h"

#include <string>

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
  if (const char* v = env.get("DETCOLL_FAST_PATH", "HOROVOD_CACHE_CAPACITY", &used)) {
    if (std::string(used) == "DETCOLL_FAST_PATH") {
      const std::string text = v;
      if (text != "0" && text != "1") return invalidValue(used, text, "0 (off) or 1 (on)");
      result.fastPath = text == "1";
    } else {
      // Horovod's response cache: 0 turns it off, and with it every shortcut of a known request.
      uint64_t capacity = 0;
      DETCOLL_RETURN_IF_ERROR(parseInteger(used, v, kCacheCapacityRange, &capacity));
      result.fastPath = capacity > 0;
    }
  }
  *options = std::move(result);
  return Status::ok();
}

}  // namespace detcoll::fusion
