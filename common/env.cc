#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
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

namespace {

// A bound as the error shows it: whole numbers in full (86400, 1099511627776), others in the
// shortest text that reads back as the same double (0.1).
std::string shortest(double v) {
  char text[32];
  if (v == std::floor(v) && std::fabs(v) < 0x1p53) {
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return text;
}

std::string withUnit(const char* unit, const std::string& what) {
  return unit == nullptr ? what : std::string(unit) + ", " + what;
}

}  // namespace

std::string describeRange(const NumberRange& range) {
  return withUnit(range.unit, std::string(range.zeroMeansOff ? "0 (off) or " : "") +
                                  "a decimal number from " + shortest(range.min) + " to " +
                                  shortest(range.max));
}

std::string describeRange(const IntegerRange& range) {
  return withUnit(range.unit, "an integer from " + std::to_string(range.min) + " to " +
                                  std::to_string(range.max));
}

Status parseInteger(const char* name, const std::string& text, const IntegerRange& range,
                    uint64_t* value) {
  const std::string expected = describeRange(range);
  if (text.empty() || text.size() > 20) return invalidValue(name, text, expected);
  for (char c : text) {
    if (c < '0' || c > '9') return invalidValue(name, text, expected);
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0' || parsed < range.min || parsed > range.max) {
    return invalidValue(name, text, expected);
  }
  *value = parsed;
  return Status::ok();
}

Status parseNumber(const char* name, const std::string& text, const NumberRange& range,
                   double* value) {
  const std::string expected = describeRange(range);
  // No sign on the number itself: "-0" is not a way to write zero here.
  if (text.empty() || text[0] == '-' || text[0] == '+') return invalidValue(name, text, expected);
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return invalidValue(name, text, expected);
    }
  }
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  // ERANGE: beyond double's range, or below its normal range (a nonzero value read as 0 or a
  // subnormal); either way not the value written.
  if (errno == ERANGE || *end != '\0' || !std::isfinite(parsed)) {
    return invalidValue(name, text, expected);
  }
  const bool inRange = parsed >= range.min && parsed <= range.max;
  if (!inRange && !(range.zeroMeansOff && parsed == 0)) return invalidValue(name, text, expected);
  *value = parsed;
  return Status::ok();
}

}  // namespace detcoll
