#include "fusion/negotiation.h"

#include "fusion/wire.h"

namespace detcoll::fusion {
namespace {

constexpr uint32_t kRankMessageMagic = 0x444e5231;  // "DNR1"
constexpr uint32_t kResponseMagic = 0x444e5331;     // "DNS1"

void putBits(ByteWriter& w, const BitSet& bits) {
  w.put<uint32_t>(static_cast<uint32_t>(bits.words().size()));
  for (uint64_t word : bits.words()) w.put(word);
}

bool getBits(ByteReader& r, BitSet* bits) {
  uint32_t n = 0;
  if (!r.get(&n) || n > r.remaining() / sizeof(uint64_t)) return false;
  bits->words().assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    if (!r.get(&bits->words()[i])) return false;
  }
  return true;
}

void putDescriptor(ByteWriter& w, const Descriptor& d) {
  w.put(d.kind);
  w.put(d.type);
  w.put(d.op);
  w.put(d.mode);
  w.put(d.root);
  w.put(d.count);
  w.put(d.groupKey);
  w.put(d.groupSize);
  w.put(d.ndim);
  w.put<uint32_t>(static_cast<uint32_t>(d.shape.size()));
  for (int64_t extent : d.shape) w.put(extent);
  w.put<uint32_t>(static_cast<uint32_t>(d.blocks.size()));
  for (uint64_t block : d.blocks) w.put(block);
  w.put(d.processSet);
  w.put<uint8_t>(d.device ? 1 : 0);
}

// n values of T, each read from the bytes left (a count beyond them is garbage).
template <typename T>
bool getList(ByteReader& r, std::vector<T>* values) {
  uint32_t n = 0;
  if (!r.get(&n) || n > r.remaining() / sizeof(T)) return false;
  values->assign(n, T{});
  for (T& v : *values) {
    if (!r.get(&v)) return false;
  }
  return true;
}

bool getDescriptor(ByteReader& r, Descriptor* d) {
  if (!(r.get(&d->kind) && r.get(&d->type) && r.get(&d->op) && r.get(&d->mode) && r.get(&d->root) &&
        r.get(&d->count) && r.get(&d->groupKey) && r.get(&d->groupSize) && r.get(&d->ndim) &&
        getList(r, &d->shape) && getList(r, &d->blocks) && r.get(&d->processSet))) {
    return false;
  }
  uint8_t device = 0;
  if (!r.get(&device) || device > 1) return false;
  d->device = device == 1;
  const auto kind = static_cast<int>(d->kind);
  const bool shaped = d->ndim < 0 ? d->shape.empty() : d->shape.size() == size_t(d->ndim);
  return shaped && kind >= static_cast<int>(RequestKind::kAllreduce) &&
         kind <= static_cast<int>(RequestKind::kJoin) &&
         isValidDataType(static_cast<int>(d->type)) && isValidReduceOp(static_cast<int>(d->op)) &&
         isValidMode(static_cast<int>(d->mode));
}

// Every element of a list takes at least one byte: a count beyond the bytes left is garbage, and
// must not size a container.
bool plausibleCount(const ByteReader& r, uint32_t n) {
  return n <= r.remaining();
}

Status malformed(const char* what) {
  return Status::internal(std::string("malformed negotiation ") + what);
}

}  // namespace

bool BitSet::empty() const {
  for (uint64_t word : words_) {
    if (word != 0) return false;
  }
  return true;
}

std::vector<uint32_t> BitSet::ids() const {
  std::vector<uint32_t> ids;
  for (size_t w = 0; w < words_.size(); ++w) {
    for (uint64_t word = words_[w]; word != 0; word &= word - 1) {
      ids.push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(word)));
    }
  }
  return ids;
}

std::vector<uint8_t> encode(const RankMessage& m) {
  ByteWriter w;
  w.put(kRankMessageMagic);
  // One byte of flags: 1 shutdown, 2 fast path off.
  w.put<uint8_t>(static_cast<uint8_t>((m.shutdown ? 1 : 0) | (m.fastPathOff ? 2 : 0)));
  putBits(w, m.cached);
  w.put<uint32_t>(static_cast<uint32_t>(m.announced.size()));
  for (const Announcement& a : m.announced) {
    w.putString(a.name);
    putDescriptor(w, a.descriptor);
    w.putString(a.error);
  }
  return std::move(w.bytes());
}

Status decode(const uint8_t* data, size_t size, RankMessage* m) {
  ByteReader r(data, size);
  uint32_t magic = 0;
  uint8_t shutdown = 0;  // the flags byte
  uint32_t n = 0;
  if (!r.get(&magic) || magic != kRankMessageMagic || !r.get(&shutdown) ||
      !getBits(r, &m->cached) || !r.get(&n) || !plausibleCount(r, n)) {
    return malformed("message from a rank");
  }
  if (shutdown > 3) return malformed("message from a rank");
  m->shutdown = (shutdown & 1) != 0;
  m->fastPathOff = (shutdown & 2) != 0;
  m->announced.resize(n);
  for (Announcement& a : m->announced) {
    if (!r.getString(&a.name) || !getDescriptor(r, &a.descriptor) || !r.getString(&a.error)) {
      return malformed("message from a rank");
    }
  }
  return r.atEnd() ? Status::ok() : malformed("message from a rank");
}

std::vector<uint8_t> encode(const Response& resp) {
  ByteWriter w;
  w.put(kResponseMagic);
  // One byte: 0, or the status code of the shutdown (never kSuccess).
  w.put<uint8_t>(resp.shutdown ? static_cast<uint8_t>(resp.shutdownCode) : 0);
  // One byte of flags: 1 partial, 2 quiet.
  w.put<uint8_t>(static_cast<uint8_t>((resp.partial ? 1 : 0) | (resp.quiet ? 2 : 0)));
  w.put<uint64_t>(resp.fusionThresholdBytes);
  w.put<int32_t>(resp.lastJoined);
  w.putString(resp.shutdownReason);
  putBits(w, resp.cachedReady);
  w.put<uint32_t>(static_cast<uint32_t>(resp.ready.size()));
  for (const ReadyEntry& e : resp.ready) {
    w.putString(e.name);
    putDescriptor(w, e.descriptor);
  }
  w.put<uint32_t>(static_cast<uint32_t>(resp.errors.size()));
  for (const ErrorEntry& e : resp.errors) {
    w.putString(e.name);
    w.put(e.status.code());
    w.putString(e.status.message());
  }
  return std::move(w.bytes());
}

Status decode(const uint8_t* data, size_t size, Response* resp) {
  ByteReader r(data, size);
  uint32_t magic = 0;
  uint8_t shutdown = 0;
  uint8_t partial = 0;  // the flags byte
  uint32_t n = 0;
  if (!r.get(&magic) || magic != kResponseMagic || !r.get(&shutdown) || !r.get(&partial) ||
      !r.get(&resp->fusionThresholdBytes) || !r.get(&resp->lastJoined) ||
      !r.getString(&resp->shutdownReason) || !getBits(r, &resp->cachedReady) || !r.get(&n) ||
      !plausibleCount(r, n)) {
    return malformed("response");
  }
  if (shutdown > static_cast<uint8_t>(StatusCode::kInternal)) return malformed("response");
  resp->shutdown = shutdown != 0;
  resp->shutdownCode =
      shutdown != 0 ? static_cast<StatusCode>(shutdown) : StatusCode::kNotInitialized;
  if (partial > 3) return malformed("response");
  resp->partial = (partial & 1) != 0;
  resp->quiet = (partial & 2) != 0;
  resp->ready.resize(n);
  for (ReadyEntry& e : resp->ready) {
    if (!r.getString(&e.name) || !getDescriptor(r, &e.descriptor)) return malformed("response");
  }
  if (!r.get(&n) || !plausibleCount(r, n)) return malformed("response");
  resp->errors.resize(n);
  for (ErrorEntry& e : resp->errors) {
    StatusCode code = StatusCode::kSuccess;
    std::string message;
    // An error fails its request: a success there would complete it with a buffer no collective
    // wrote.
    if (!r.getString(&e.name) || !r.get(&code) || !r.getString(&message) ||
        static_cast<int>(code) <= static_cast<int>(StatusCode::kSuccess) ||
        static_cast<int>(code) > static_cast<int>(StatusCode::kInternal)) {
      return malformed("response");
    }
    e.status = Status(code, std::move(message));
  }
  return r.atEnd() ? Status::ok() : malformed("response");
}

}  // namespace detcoll::fusion
