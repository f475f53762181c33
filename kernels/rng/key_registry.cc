#include "kernels/rng/key_registry.h"

#include "common/names.h"

namespace detcoll::kernels::rng {

Key deriveKey(const Key& parent, std::string_view domain, const uint64_t* path, size_t length) {
  return deriveKey(parent, nameHash(domain.data(), domain.size()), path, length);
}

void KeyRegistry::beginStep(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
  claims_.clear();
}

uint64_t KeyRegistry::step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return step_;
}

size_t KeyRegistry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return claims_.size();
}

Status KeyRegistry::derive(const Key& parent, std::string_view domain, const uint64_t* path,
                           size_t length, std::string_view purpose, Key* child) {
  if (path == nullptr && length > 0) return Status::invalidArgument("derive: path is null");
  const Key key = deriveKey(parent, domain, path, length);
  std::string derivation = "domain " + quotedName(domain) + ", path [";
  for (size_t i = 0; i < length; ++i) derivation += (i ? ", " : "") + std::to_string(path[i]);
  derivation += "]";
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, fresh] = claims_.try_emplace(key, Claim{std::string(purpose), derivation});
  if (!fresh && it->second.purpose != purpose) {
    return Status::invalidArgument(
        "random key collision in step " + std::to_string(step_) + ": " + quotedName(purpose) +
        " derived (" + derivation + ") the key that " + quotedName(it->second.purpose) +
        " derived (" + it->second.derivation +
        "); give each consumer its own domain, or its op id in the path");
  }
  *child = key;
  return Status::ok();
}

}  // namespace detcoll::kernels::rng
