#pragma once

// Message tags of the fusion engine, above the collective layer's on the engine's communicator.

#include "collective/tags.h"

namespace detcoll::fusion {

constexpr int kTagNegotiation = collective::kFirstUpperTag;   // rank messages to the coordinator
constexpr int kTagResponse = collective::kFirstUpperTag + 1;  // the coordinator's response

}  // namespace detcoll::fusion
