#pragma once

// Every setting of a process, read once at detcoll_init by the layers' own loaders (common/env.h):
// the collective layer's (collective/settings.h), the fusion engine's (fusion/settings.h), the
// root seed's (kernels/rng/seed_state.h) and the log level (common/logging.h). Not installed.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collective/collectives.h"
#include "collective/settings.h"
#include "common/env.h"
#include "common/logging.h"
#include "common/status.h"
#include "fusion/engine.h"

namespace detcoll::bindings::c {

struct Config {
  collective::Settings collective;  // DETCOLL_DETERMINISM, DETCOLL_GPU_TRANSPORT
  fusion::EngineOptions engine;     // the fusion engine's variables
  LogLevel logLevel = LogLevel::kWarn;
  std::optional<uint64_t> seed;  // DETCOLL_SEED
  // "NAME=value" for every variable that was set, for the INFO log at init.
  std::vector<std::string> setVariables;
};

// Every layer's settings from `lookup`; the first invalid value is the error, and *config is
// then untouched.
Status loadConfig(const EnvLookup& lookup, Config* config);

// Agrees, at init, on the settings every rank must share beside the mode (DETCOLL_GPU_TRANSPORT,
// DETCOLL_INVARIANT_TRANSPORT, DETCOLL_FAST_PATH): a rank whose value differs fails init on every
// rank, naming the variable and each rank's value.
Status agreeOnSettings(const Config& config, collective::Collectives& collectives);

}  // namespace detcoll::bindings::c
