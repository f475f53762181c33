#pragma once

// Agreement on a small value every rank holds (the root seed, a restored random state): the
// verdict over every rank's value, the same on every rank. A value that differs between ranks is
// DETCOLL_ERR_MISMATCH naming each group of ranks and its value. The exchange itself is the call
// agreement's (Collectives::agreeOnValue), so a rank making another call is told so, not hung.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace detcoll::collective {

struct AgreedValue {
  bool present = false;  // false: this rank has no value
  uint64_t words[2] = {0, 0};
};

// OK when every rank's value is the same (all absent counts as the same); else a mismatch that
// starts with `what` ("DETCOLL_SEED") and renders each group's value with describe ("42",
// "unset").
Status compareValues(const std::string& what, const std::vector<AgreedValue>& values,
                     const std::function<std::string(const AgreedValue&)>& describe);

// "rank 3", "ranks 0, 2 and 5".
std::string describeRanks(const std::vector<int>& ranks);

}  // namespace detcoll::collective
