#pragma once

// The hash by which ranks compare names (tensor names in the call agreement, the fusion engine's
// group keys): 64-bit FNV-1a, stable across processes, builds and machines. Small programs use
// it as a checksum too (the C++ demo's). It is not a content fingerprint of large tensors (speed
// and collision resistance on large data are not its purpose), and the random streams derive
// their keys from names their own way (kernels/rng/key.h), which is part of those streams'
// published definition.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace detcoll {

class Fnv1a {
 public:
  Fnv1a& add(std::string_view text) { return add(text.data(), text.size()); }
  Fnv1a& add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) value_ = (value_ ^ p[i]) * kPrime;
    return *this;
  }
  Fnv1a& addByte(uint8_t byte) { return add(&byte, 1); }
  uint64_t value() const { return value_; }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t value_ = 0xcbf29ce484222325ull;  // the offset basis
};

inline uint64_t hashName(std::string_view name) {
  return Fnv1a().add(name).value();
}

}  // namespace detcoll
