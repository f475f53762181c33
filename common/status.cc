#include "common/status.h"

namespace detcoll {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kSuccess:
      return "SUCCESS";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kMismatch:
      return "MISMATCH";
    case StatusCode::kTimeout:
      return "TIMEOUT";
    case StatusCode::kBackend:
      return "BACKEND";
    case StatusCode::kNotInitialized:
      return "NOT_INITIALIZED";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::toString() const {
  if (isOk()) return "SUCCESS";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

}  // namespace detcoll
