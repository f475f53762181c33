#pragma once

#include <string>
#include <utility>

namespace detcoll {

// Mirrors detcoll_status_t in bindings/c/detcoll.h; the values must stay equal.
enum class StatusCode : int {
  kSuccess = 0,
  kInvalidArgument = 1,
  kMismatch = 2,
  kTimeout = 3,
  kBackend = 4,
  kNotInitialized = 5,
  kInternal = 6,
};

const char* statusCodeName(StatusCode code);

// A result code with a human-readable message. Cheap to return when OK.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status invalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
  static Status timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status backend(std::string m) { return {StatusCode::kBackend, std::move(m)}; }
  static Status notInitialized(std::string m) {
    return {StatusCode::kNotInitialized, std::move(m)};
  }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool isOk() const { return code_ == StatusCode::kSuccess; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "SUCCESS".
  std::string toString() const;
  // The same failure with "context: " before its message (e.g. the C call that failed); OK stays
  // OK.
  Status prefixed(const std::string& context) const {
    return isOk() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kSuccess;
  std::string message_;
};

}  // namespace detcoll

#define DETCOLL_RETURN_IF_ERROR(expr)                    \
  do {                                                   \
    ::detcoll::Status detcoll_status_ = (expr);          \
    if (!detcoll_status_.isOk()) return detcoll_status_; \
  } while (0)
