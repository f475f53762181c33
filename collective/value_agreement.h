#pragma once

// Agreement on a small value every rank holds (the root seed, a restored random state): each rank
// contributes its value, or none, and the outcome of its own checks; every rank returns the same
// verdict. A value that differs between ranks is DETCOLL_ERR_MISMATCH naming each group of ranks
// and its value; a rank whose own check failed fails every rank with its message.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective/communicator.h"

namespace detcoll::collective {

struct AgreedValue {
  bool present = false;  // false: this rank has no value
  uint64_t words[2] = {0, 0};
};

// `what` names the value in messages ("DETCOLL_SEED"); describe(v) renders one value ("42",
// "unset"). On success *all (if given) holds every rank's value.
Status agreeOnValue(Communicator& comm, const std::string& what, const Status& local,
                    const AgreedValue& mine,
                    const std::function<std::string(const AgreedValue&)>& describe,
                    std::vector<AgreedValue>* all = nullptr);

// "rank 3", "ranks 0, 2 and 5".
std::string describeRanks(const std::vector<int>& ranks);

}  // namespace detcoll::collective
