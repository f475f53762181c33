#pragma once

// The fuzz targets, each a function of one input (see each header for what it drives and what it
// asserts). libFuzzer runs them through fuzz_main.cc (scripts/fuzz.sh); the unit tests replay
// every file of tests/fuzz/corpus/<target>/ through them (tests/unit/fuzz_corpus_test.cc).

#include <cstddef>
#include <cstdint>

#include "tests/fuzz/call_agreement_target.h"
#include "tests/fuzz/negotiation_target.h"
#include "tests/fuzz/response_cache_target.h"
#include "tests/fuzz/seed_state_target.h"

namespace detcoll::fuzz {

struct Target {
  const char* name;  // also the folder of its corpus
  int (*run)(const uint8_t* data, size_t size);
};

inline constexpr Target kTargets[] = {
    {"negotiation", negotiationTarget},
    {"response_cache", responseCacheTarget},
    {"call_agreement", callAgreementTarget},
    {"seed_state", seedStateTarget},
};

}  // namespace detcoll::fuzz
