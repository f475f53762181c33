#pragma once

// Fuzz target: the parser of a saved random state (kernels/rng/seed_state.h), what
// detcoll_rng_state_restore runs on every rank's bytes before the ranks agree. The first byte
// chooses whether the rest is parsed as it is, or with its last 16 bytes replaced by the check
// hash of the bytes before them, so that the fuzzer reaches the parser behind the check.
// Properties:
// - bytes either parse or are refused as invalid, with the state left as it was;
// - a state that parses serializes to exactly the bytes it came from (one encoding per state:
//   the ranks compare restored states by that encoding), and its counters obey the limits.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rng/key.h"
#include "kernels/rng/seed_state.h"
#include "tests/fuzz/fuzz_check.h"

namespace detcoll::fuzz {

inline int seedStateTarget(const uint8_t* data, size_t size) {
  using kernels::rng::SeedState;
  if (size == 0) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  constexpr size_t kCheckBytes = 16;
  if ((data[0] & 1) != 0 && bytes.size() >= kCheckBytes) {
    const size_t body = bytes.size() - kCheckBytes;
    const kernels::rng::Key check =
        kernels::rng::nameHash(reinterpret_cast<const char*>(bytes.data()), body);
    for (int i = 0; i < 4; ++i) {
      for (int b = 0; b < 4; ++b)
        bytes[body + 4 * i + b] = static_cast<uint8_t>(check.w[i] >> 8 * b);
    }
  }
  SeedState before(0x5eed);
  DETCOLL_FUZZ_CHECK(before.setCounter("untouched", 7).isOk());
  SeedState state = before;
  const Status s = SeedState::deserialize(bytes.data(), bytes.size(), &state);
  if (!s.isOk()) {
    DETCOLL_FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument);
    DETCOLL_FUZZ_CHECK(state == before);
    return 0;
  }
  const std::string canonical = state.serialize();
  DETCOLL_FUZZ_CHECK(canonical.size() == bytes.size());
  DETCOLL_FUZZ_CHECK(canonical.compare(0, canonical.size(),
                                       reinterpret_cast<const char*>(bytes.data()),
                                       bytes.size()) == 0);
  DETCOLL_FUZZ_CHECK(state.counters().size() <= SeedState::kMaxCounters);
  for (const auto& [name, value] : state.counters()) {
    DETCOLL_FUZZ_CHECK(!name.empty() && name.size() <= SeedState::kMaxNameBytes);
    uint64_t read = 0;
    DETCOLL_FUZZ_CHECK(state.counter(name, &read).isOk() && read == value);
  }
  SeedState again;
  DETCOLL_FUZZ_CHECK(SeedState::deserialize(canonical.data(), canonical.size(), &again).isOk());
  DETCOLL_FUZZ_CHECK(again == state);
  return 0;
}

}  // namespace detcoll::fuzz
