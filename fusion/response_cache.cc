#include "fusion/response_cache.h"

namespace detcoll::fusion {

std::optional<uint32_t> ResponseCache::find(const std::string& name, const Descriptor& d) const {
  const auto it = ids_.find(name);
  if (it == ids_.end() || entries_[it->second].descriptor != d) return std::nullopt;
  return it->second;
}

void ResponseCache::record(const std::string& name, const Descriptor& d) {
  const auto it = ids_.find(name);
  if (it != ids_.end()) {
    entries_[it->second].descriptor = d;
    return;
  }
  if (entries_.size() >= kCapacity) return;
  ids_.emplace(name, static_cast<uint32_t>(entries_.size()));
  entries_.push_back({name, d});
}

}  // namespace detcoll::fusion
