#pragma once

// The fusion engine's settings, read from the environment at init (Horovod's variable where ours
// is unset):
//   DETCOLL_FUSION_THRESHOLD (HOROVOD_FUSION_THRESHOLD)  bytes of a fusion buffer (64 MiB; 0: off)
//   DETCOLL_CYCLE_TIME (HOROVOD_CYCLE_TIME)              milliseconds between cycles (1)
//   DETCOLL_TIMELINE                                     a timeline file written by rank 0
//   DETCOLL_STALL_CHECK_SECONDS                          warn about a stall after (60; 0: never)
//   DETCOLL_STALL_SHUTDOWN_SECONDS                       fail a stalled request after (600; 0:
//   never)

#include "common/env.h"
#include "common/status.h"
#include "fusion/engine.h"

namespace detcoll::fusion {

// Those fields of *options from `env` (the others left as they are); on an invalid value, the
// error and *options untouched.
Status loadEngineSettings(Environment& env, EngineOptions* options);

}  // namespace detcoll::fusion
