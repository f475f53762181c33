#pragma once

// The process environment as the layers read their settings from it: each layer parses its own
// variables, beside its code (collective/settings.h, fusion/settings.h,
// kernels/rng/seed_state.h, the log level in common/logging.h), strictly, once, at init
// (bindings/c/config.h puts them together). An invalid value is an error that names the variable,
// the value and what was expected (for a number, its range); an empty value counts as unset.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace detcoll {

// Returns the value of a variable or nullptr; std::getenv in production, a map in tests.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup processEnvironment();

class Environment {
 public:
  explicit Environment(EnvLookup lookup) : lookup_(std::move(lookup)) {}

  // The value of `name`, or of `fallback` (Horovod's variable of the same meaning, or null) when
  // `name` is unset, or null; *used is then the variable the value came from. Every value read is
  // recorded.
  const char* get(const char* name, const char* fallback, const char** used);

  // "NAME=value" for every variable read that was set, for the INFO log at init.
  const std::vector<std::string>& setVariables() const { return set_; }

 private:
  EnvLookup lookup_;
  std::vector<std::string> set_;
};

// "invalid value 'text' for NAME: expected ...".
Status invalidValue(const char* name, const std::string& text, const std::string& expected);

// The values a numeric variable accepts: [min, max], both ends included, and 0 as well where
// `zeroMeansOff` (a switch below a smallest sensible value). `unit` heads the error's wording
// ("milliseconds"; null: none).
struct NumberRange {
  double min;
  double max;
  bool zeroMeansOff;
  const char* unit;
};
struct IntegerRange {
  uint64_t min;
  uint64_t max;
  const char* unit;
};

// "milliseconds, a decimal number from 0 to 1000", "seconds, 0 (off) or a decimal number from 0.1
// to 86400", "bytes, an integer from 0 to 1099511627776": what an error expects.
std::string describeRange(const NumberRange& range);
std::string describeRange(const IntegerRange& range);

// Strict parsers; `name` is used in the error text, which names the value and the range, and a
// rejected value is not stored. Numbers: decimal digits, a point and an exponent (no sign but in
// the exponent, no hexadecimal, nan or inf, no spaces), finite, within the range. Integers:
// decimal digits only.
Status parseNumber(const char* name, const std::string& text, const NumberRange& range,
                   double* value);
Status parseInteger(const char* name, const std::string& text, const IntegerRange& range,
                    uint64_t* value);

}  // namespace detcoll
