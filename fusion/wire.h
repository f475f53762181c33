#pragma once

// Little helpers that write and read the negotiation messages: fixed-width little-endian integers
// and length-prefixed strings, with bounds checks on reading.

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace detcoll::fusion {

class ByteWriter {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>, "integers only");
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
  }
  void putString(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  bool get(T* value) {
    if (size_ - at_ < sizeof(T)) return fail();
    std::memcpy(value, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool getString(std::string* s) {
    uint32_t n = 0;
    if (!get(&n) || size_ - at_ < n) return fail();
    s->assign(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return true;
  }
  bool ok() const { return ok_; }
  size_t remaining() const { return size_ - at_; }
  bool atEnd() const { return at_ == size_; }

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace detcoll::fusion
