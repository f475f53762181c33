#pragma once

// The one hash of names (tensor names, group keys, labels): 64-bit FNV-1a. It is stable across
// processes, builds and machines, which is what ranks comparing names by their hash need; it is
// not a content fingerprint of tensors (speed and collision resistance on large data are not
// its purpose).

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
