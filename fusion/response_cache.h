#pragma once

// The response cache: names that were negotiated before, with the descriptor they had, by id.
// Every rank and the coordinator update their copies from the same responses in the same order,
// so ids mean the same thing everywhere; a request whose name and descriptor are cached is
// announced as one bit (Horovod's response cache, without its eviction: ids are never reused).

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusion/request.h"

namespace detcoll::fusion {

class ResponseCache {
 public:
  static constexpr size_t kCapacity = 1 << 16;

  // The id of `name` if it is cached with this descriptor.
  std::optional<uint32_t> find(const std::string& name, const Descriptor& d) const;
  const std::string& name(uint32_t id) const { return entries_[id].name; }
  const Descriptor& descriptor(uint32_t id) const { return entries_[id].descriptor; }
  size_t size() const { return entries_.size(); }
  bool contains(uint32_t id) const { return id < entries_.size(); }

  // Records a negotiated name: a cached name takes the new descriptor under its id; a new name
  // gets the next id while there is room.
  void record(const std::string& name, const Descriptor& d);

 private:
  struct Entry {
    std::string name;
    Descriptor descriptor;
  };
  std::vector<Entry> entries_;
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace detcoll::fusion
