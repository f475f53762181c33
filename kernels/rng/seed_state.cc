#include "kernels/rng/seed_state.h"

#include <cstring>

#include "common/names.h"

namespace detcoll::kernels::rng {
namespace {

constexpr char kMagic[8] = {'D', 'C', 'S', 'E', 'E', 'D', 0, 1};
constexpr size_t kCheckBytes = 16;

void put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

class Reader {
 public:
  Reader(const unsigned char* data, size_t size) : data_(data), size_(size) {}
  bool take(int bytes, uint64_t* value) {
    if (size_ - at_ < static_cast<size_t>(bytes)) return false;
    *value = 0;
    for (int i = 0; i < bytes; ++i) *value |= static_cast<uint64_t>(data_[at_ + i]) << (8 * i);
    at_ += bytes;
    return true;
  }
  bool takeBytes(size_t n, std::string* text) {
    if (size_ - at_ < n) return false;
    text->assign(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return true;
  }
  size_t at() const { return at_; }

 private:
  const unsigned char* data_;
  size_t size_;
  size_t at_ = 0;
};

void putCheck(std::string& out) {
  const Key check = nameHash(out.data(), out.size());
  for (uint32_t word : check.w) put(out, word, 4);
}

Status corrupt(const std::string& why) {
  return Status::invalidArgument("random state: not a valid saved state (" + why + ")");
}

}  // namespace

Status SeedState::checkName(const std::string& name) const {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return Status::invalidArgument("random state: counter names are 1 to " +
                                   std::to_string(kMaxNameBytes) + " bytes, got " +
                                   std::to_string(name.size()));
  }
  return Status::ok();
}

Status SeedState::counter(const std::string& name, uint64_t* value) const {
  DETCOLL_RETURN_IF_ERROR(checkName(name));
  auto it = counters_.find(name);
  *value = it == counters_.end() ? 0 : it->second;
  return Status::ok();
}

Status SeedState::setCounter(const std::string& name, uint64_t value) {
  DETCOLL_RETURN_IF_ERROR(checkName(name));
  if (counters_.size() >= kMaxCounters && counters_.count(name) == 0) {
    return Status::invalidArgument("random state: more than " + std::to_string(kMaxCounters) +
                                   " counters");
  }
  counters_[name] = value;
  return Status::ok();
}

Status SeedState::next(const std::string& name, uint64_t* value) {
  uint64_t current = 0;
  DETCOLL_RETURN_IF_ERROR(counter(name, &current));
  if (current == UINT64_MAX) {
    return Status::invalidArgument("random state: counter " + quotedName(name) +
                                   " is at 2^64 - 1 and cannot advance");
  }
  DETCOLL_RETURN_IF_ERROR(setCounter(name, current + 1));
  *value = current;
  return Status::ok();
}

std::string SeedState::serialize() const {
  std::string out(kMagic, sizeof kMagic);
  put(out, seed_, 8);
  put(out, counters_.size(), 4);
  for (const auto& [name, value] : counters_) {
    put(out, name.size(), 4);
    out += name;
    put(out, value, 8);
  }
  putCheck(out);
  return out;
}

Status SeedState::deserialize(const void* data, size_t size, SeedState* state) {
  if (data == nullptr) return Status::invalidArgument("random state: data is null");
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (size < sizeof kMagic + 12 + kCheckBytes) {
    return corrupt(std::to_string(size) + " bytes is too short");
  }
  if (std::memcmp(bytes, kMagic, 6) != 0) return corrupt("wrong magic bytes");
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    return corrupt("format " + std::to_string(bytes[6] * 256 + bytes[7]) +
                   " is not the supported format 1");
  }
  std::string body(reinterpret_cast<const char*>(bytes), size - kCheckBytes);
  std::string expected = body;
  putCheck(expected);
  if (std::memcmp(expected.data() + body.size(), bytes + body.size(), kCheckBytes) != 0) {
    return corrupt("check hash does not match: the data was altered or truncated");
  }
  Reader reader(bytes + sizeof kMagic, body.size() - sizeof kMagic);
  uint64_t seed = 0, count = 0;
  reader.take(8, &seed);
  reader.take(4, &count);
  if (count > kMaxCounters) return corrupt(std::to_string(count) + " counters");
  SeedState result(seed);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length = 0, value = 0;
    std::string name;
    if (!reader.take(4, &length) || length == 0 || length > kMaxNameBytes ||
        !reader.takeBytes(length, &name) || !reader.take(8, &value)) {
      return corrupt("counter " + std::to_string(i) + " is malformed");
    }
    if (!result.counters_.empty() && !(result.counters_.rbegin()->first < name)) {
      return corrupt("counter " + std::to_string(i) + " is out of name order or repeats a name");
    }
    result.counters_.emplace_hint(result.counters_.end(), std::move(name), value);
  }
  if (reader.at() != body.size() - sizeof kMagic) return corrupt("trailing bytes");
  *state = std::move(result);
  return Status::ok();
}

bool operator==(const SeedState& a, const SeedState& b) {
  return a.seed() == b.seed() && a.counters() == b.counters();
}

Status loadRootSeed(Environment& env, std::optional<uint64_t>* seed) {
  const char* used = nullptr;
  if (const char* v = env.get("DETCOLL_SEED", nullptr, &used)) {
    uint64_t value = 0;
    DETCOLL_RETURN_IF_ERROR(parseInteger(used, v, kRootSeedRange, &value));
    *seed = value;
  } else {
    seed->reset();
  }
  return Status::ok();
}

}  // namespace detcoll::kernels::rng
