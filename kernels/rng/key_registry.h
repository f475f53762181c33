#pragma once

// The optional check that no two consumers of one step share a key: two dropout layers deriving
// from the same domain and path would draw the same mask, a silent error. Consumers derive
// through the registry and name their purpose ("layer3.dropout"); a key derived again within the
// step for another purpose is an error that names both purposes and both derivations. Deriving
// the same key again for the same purpose is allowed. beginStep forgets the previous step's keys.
// Thread-safe.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "kernels/rng/key.h"

namespace detcoll::kernels::rng {

class KeyRegistry {
 public:
  void beginStep(uint64_t step);
  uint64_t step() const;
  size_t size() const;

  Status derive(const Key& parent, std::string_view domain, const uint64_t* path, size_t length,
                std::string_view purpose, Key* child);

 private:
  struct Claim {
    std::string purpose;
    std::string derivation;  // "domain 'dropout', path [3, 17]"
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return keyLow64(k) ^ (keyHigh64(k) * 0x9E3779B97F4A7C15ull);
    }
  };

  mutable std::mutex mutex_;
  uint64_t step_ = 0;
  std::unordered_map<Key, Claim, KeyHash> claims_;
};

// The child key, deriving the domain's hash from its text.
Key deriveKey(const Key& parent, std::string_view domain, const uint64_t* path, size_t length);

}  // namespace detcoll::kernels::rng
