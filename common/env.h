#pragma once

// The process environment as the layers read their settings from it: each layer parses its own
// variables, beside its code (collective/settings.h, fusion/settings.h,
// kernels/rng/seed_state.h, the log level in common/logging.h), strictly, once, at init
// (bindings/c/config.h puts them together). An invalid value is an error that names the variable
// and the value; an empty value counts as unset.

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

// Strict parsers; `name` is used in the error text, and a rejected value is not stored.
Status parseUnsignedValue(const char* name, const std::string& text, uint64_t* value);
Status parseNonNegativeNumber(const char* name, const std::string& text, double* value);

}  // namespace detcoll
