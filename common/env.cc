#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace detcoll {

EnvLookup processEnvironment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

const char* Environment::get(const char* name, const char* fallback, const char** used) {
  for (const char* candidate : {name, fallback}) {
    if (candidate == nullptr) continue;
    const char* value = lookup_(candidate);
    if (value != nullptr && value[0] != '\0') {
      *used = candidate;
      set_.push_back(std::string(candidate) + "=" + value);
      return value;
    }
  }
  return nullptr;
}

Status invalidValue(const char* name, const std::string& text, const std::string& expected) {
  return Status::invalidArgument("invalid value '" + text + "' for " + name + ": expected " +
                                 expected);
}

Status parseUnsignedValue(const char* name, const std::string& text, uint64_t* value) {
  const std::string expected = "a non-negative integer";
  if (text.empty() || text.size() > 20) return invalidValue(name, text, expected);
  for (char c : text) {
    if (c < '0' || c > '9') return invalidValue(name, text, expected);
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return invalidValue(name, text, expected + " below 2^64");
  *value = parsed;
  return Status::ok();
}

Status parseNonNegativeNumber(const char* name, const std::string& text, double* value) {
  const std::string expected = "a non-negative decimal number";
  if (text.empty()) return invalidValue(name, text, expected);
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return invalidValue(name, text, expected);
    }
  }
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || *end != '\0' || !std::isfinite(parsed) || parsed < 0) {
    return invalidValue(name, text, expected);
  }
  *value = parsed;
  return Status::ok();
}

}  // namespace detcoll
