#pragma once

// Fuzz target: the fusion negotiation's decoders (fusion/negotiation.h) on any bytes, as rank 0
// decodes what a rank sent and every rank decodes rank 0's response. A message either decodes or
// is refused as malformed; one that decodes is encoded again to the same number of bytes (the
// format has one encoding per message, up to nonzero flag bytes) and that encoding decodes to
// itself. What a decoded message holds is read as the engine reads it: cache ids, descriptions.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fusion/negotiation.h"
#include "tests/fuzz/fuzz_check.h"

namespace detcoll::fuzz {

inline void checkCacheIds(const fusion::BitSet& bits) {
  const std::vector<uint32_t> ids = bits.ids();
  for (size_t i = 0; i < ids.size(); ++i) {
    DETCOLL_FUZZ_CHECK(bits.test(ids[i]));
    DETCOLL_FUZZ_CHECK(i == 0 || ids[i - 1] < ids[i]);
  }
  DETCOLL_FUZZ_CHECK(bits.empty() == ids.empty());
}

inline bool refusedAsMalformed(const Status& s) {
  return s.code() == StatusCode::kInternal && s.message().rfind("malformed negotiation", 0) == 0;
}

// Decodes the input as a T; when it decodes, checks the round trip and returns true.
template <typename T>
bool roundTrip(const uint8_t* data, size_t size) {
  T decoded;
  const Status s = fusion::decode(data, size, &decoded);
  if (!s.isOk()) {
    DETCOLL_FUZZ_CHECK(refusedAsMalformed(s));
    return false;
  }
  const std::vector<uint8_t> encoded = fusion::encode(decoded);
  DETCOLL_FUZZ_CHECK(encoded.size() == size);
  T again;
  DETCOLL_FUZZ_CHECK(fusion::decode(encoded.data(), encoded.size(), &again).isOk());
  DETCOLL_FUZZ_CHECK(fusion::encode(again) == encoded);
  return true;
}

inline int negotiationTarget(const uint8_t* data, size_t size) {
  if (roundTrip<fusion::RankMessage>(data, size)) {
    fusion::RankMessage m;
    DETCOLL_FUZZ_CHECK(fusion::decode(data, size, &m).isOk());
    checkCacheIds(m.cached);
    for (const fusion::Announcement& a : m.announced) {
      DETCOLL_FUZZ_CHECK(!fusion::describe(a.descriptor).empty());
    }
  }
  if (roundTrip<fusion::Response>(data, size)) {
    fusion::Response r;
    DETCOLL_FUZZ_CHECK(fusion::decode(data, size, &r).isOk());
    checkCacheIds(r.cachedReady);
    for (const fusion::ReadyEntry& e : r.ready) {
      DETCOLL_FUZZ_CHECK(!fusion::describe(e.descriptor).empty());
    }
    for (const fusion::ErrorEntry& e : r.errors) {
      // A failure the C API can return: one of detcoll_status_t's values, not success (the
      // engine completes the request with it, and a success would hand back a buffer no
      // collective wrote).
      const int code = static_cast<int>(e.status.code());
      DETCOLL_FUZZ_CHECK(code > 0 && code <= static_cast<int>(StatusCode::kInternal));
      DETCOLL_FUZZ_CHECK(std::string(statusCodeName(e.status.code())) != "UNKNOWN");
    }
  }
  return 0;
}

}  // namespace detcoll::fuzz
