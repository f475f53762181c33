#pragma once

// The random state a training job checkpoints: the root seed and named counters (step, epoch,
// anything the job advances). Keys are derived from the root key and these counters, never drawn
// from a sequence, so saving this state and restoring it resumes every stream exactly.
//
// Serialized form (little-endian): the 8 bytes "DCSEED\0\1" (format 1), the seed (u64), the
// number of counters (u32), each counter as its name's length (u32), the name's bytes and the
// value (u64), in name order; then the 16-byte nameHash of everything before it, as a check.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/env.h"
#include "common/status.h"
#include "kernels/rng/key.h"

namespace detcoll::kernels::rng {

class SeedState {
 public:
  // Counter names are 1 to kMaxNameBytes bytes; a state holds at most kMaxCounters of them.
  static constexpr size_t kMaxNameBytes = 1024;
  static constexpr size_t kMaxCounters = 1 << 16;

  explicit SeedState(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  Key rootKey() const { return rng::rootKey(seed_); }

  // A counter that was never set is 0.
  Status counter(const std::string& name, uint64_t* value) const;
  Status setCounter(const std::string& name, uint64_t value);
  // *value = the counter, which then advances by one.
  Status next(const std::string& name, uint64_t* value);
  const std::map<std::string, uint64_t>& counters() const { return counters_; }

  std::string serialize() const;
  // Checks the format, every length and the check hash; *state is unchanged on error.
  static Status deserialize(const void* data, size_t size, SeedState* state);

 private:
  Status checkName(const std::string& name) const;

  uint64_t seed_;
  std::map<std::string, uint64_t> counters_;
};

bool operator==(const SeedState& a, const SeedState& b);

// DETCOLL_SEED, the root seed of every rank (the same on every rank; unset: rank 0 draws one at
// init): an integer from 0 to 2^64 - 1 (kRootSeedRange). *seed stays empty when it is unset.
constexpr IntegerRange kRootSeedRange{0, UINT64_MAX, nullptr};
Status loadRootSeed(Environment& env, std::optional<uint64_t>* seed);

}  // namespace detcoll::kernels::rng
