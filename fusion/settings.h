#pragma once

// The fusion engine's settings, read from the environment at init (Horovod's variable where ours
// is unset), each refused outside its range with an error naming the variable, the value and the
// range:
//   DETCOLL_FUSION_THRESHOLD (HOROVOD_FUSION_THRESHOLD)  bytes of a fusion buffer (64 MiB; 0: off),
//                                                        0 to 2^40
//   DETCOLL_CYCLE_TIME (HOROVOD_CYCLE_TIME)              milliseconds between cycles (1), 0 to 1000
//   DETCOLL_TIMELINE                                     a timeline file written by rank 0
//   DETCOLL_TRACE                                        the collective trace's directory
//                                                        (fusion/trace.h), created where missing;
//                                                        one that cannot be fails init
//   DETCOLL_STALL_CHECK_SECONDS                          warn about a stall after (60; 0: never),
//                                                        0.1 to 86400
//   DETCOLL_STALL_SHUTDOWN_SECONDS                       fail a stalled request after (600; 0:
//                                                        never), 0.1 to 86400
//   DETCOLL_FAST_PATH (HOROVOD_CACHE_CAPACITY)           the fast path of a repeated step
//                                                        (fusion/fast_path.h): 1 (default) or 0;
//                                                        Horovod's capacity 0 turns it off, any
//                                                        other (0 to 2^32) leaves it on

#include "common/env.h"
#include "common/status.h"
#include "fusion/engine.h"

namespace detcoll::fusion {

// Above 1 TiB a threshold is no limit on any machine: a larger value is a typo or a negative
// number wrapped around (18446744073709551615 is -1), not a wish.
constexpr IntegerRange kFusionThresholdRange{0, uint64_t{1} << 40, "bytes"};
// A cycle is the longest a request waits for its negotiation once the engine is busy, and the
// stall checks run once per cycle: above a second every asynchronous call would crawl (and a
// value meant in microseconds or seconds is the likely mistake). 0: cycles back to back.
constexpr NumberRange kCycleTimeMsRange{0, 1000, false, "milliseconds"};
// Stall limits: 0 turns them off; below a tenth of a second a request that one rank enqueues a
// moment after the others would be reported or failed in normal running; above a day a stall is
// a hang, for which 0 is the honest setting.
constexpr NumberRange kStallSecondsRange{0.1, 86400, true, "seconds"};
// Horovod's HOROVOD_CACHE_CAPACITY, of which only 0 (no cache) means anything here.
constexpr IntegerRange kCacheCapacityRange{0, uint64_t{1} << 32, "entries"};

// Those fields of *options from `env` (the others left as they are); on an invalid value, the
// error and *options untouched.
Status loadEngineSettings(Environment& env, EngineOptions* options);

}  // namespace detcoll::fusion
