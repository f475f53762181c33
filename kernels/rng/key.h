#pragma once

// Keys: 128-bit names of random streams, derived from a root seed by a stated construction.
//
// A Key is four words. Words 0-1 are the Philox key and words 2-3 the high half of the Philox
// counter; the low half counts 128-bit blocks along the stream (see distributions.h). Streams of
// different keys are therefore disjoint Philox inputs.
//
// Construction (Davies-Meyer over Philox4x32-10 with Merkle-Damgard strengthening):
//   mix(h, m)        = Philox4x32-10(counter = h, key = (m mod 2^32, m div 2^32)) XOR h
//   absorb(h, m...)  = mix(...mix(mix(h, m_1), m_2)..., m_n), then mix(., n) (the word count)
//   iv(tag)          = the 16 ASCII bytes of tag, zero-padded, as four little-endian words
//   nameHash(bytes)  = the bytes as little-endian 64-bit words (the last zero-padded) mixed into
//                      iv("detcoll/name"), then mix(., the byte length) in place of the word
//                      count (it fixes the padding too)
//   rootKey(seed)    = absorb(iv("detcoll/root"), seed)
//   deriveKey(parent, domain, path[0..n)) =
//                      absorb(parent, nameHash(domain).lo64, nameHash(domain).hi64, path[0], ...,
//                             path[n-1])
// A 128-bit chaining value keeps accidental collisions at the birthday bound of 2^64 derived keys,
// assuming Philox behaves as an ideal cipher. This is a reproducibility tool, not cryptography:
// never use these keys for secrets.
//
// Every function here is a pure function of its arguments and runs on host and device.

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "kernels/rng/philox.h"

namespace detcoll::kernels::rng {

struct Key {
  uint32_t w[4];
};

DETCOLL_HOST_DEVICE inline bool operator==(const Key& a, const Key& b) {
  return a.w[0] == b.w[0] && a.w[1] == b.w[1] && a.w[2] == b.w[2] && a.w[3] == b.w[3];
}
DETCOLL_HOST_DEVICE inline bool operator!=(const Key& a, const Key& b) {
  return !(a == b);
}

DETCOLL_HOST_DEVICE inline uint64_t keyLow64(const Key& k) {
  return static_cast<uint64_t>(k.w[0]) | static_cast<uint64_t>(k.w[1]) << 32;
}
DETCOLL_HOST_DEVICE inline uint64_t keyHigh64(const Key& k) {
  return static_cast<uint64_t>(k.w[2]) | static_cast<uint64_t>(k.w[3]) << 32;
}

// One Davies-Meyer step.
DETCOLL_HOST_DEVICE inline Key keyMix(const Key& h, uint64_t m) {
  const Block b = philox4x32_10(h.w[0], h.w[1], h.w[2], h.w[3], static_cast<uint32_t>(m),
                                static_cast<uint32_t>(m >> 32));
  return Key{{b.v[0] ^ h.w[0], b.v[1] ^ h.w[1], b.v[2] ^ h.w[2], b.v[3] ^ h.w[3]}};
}

// The initial value for a tag of at most 16 ASCII characters.
DETCOLL_HOST_DEVICE inline Key keyIv(const char* tag) {
  Key iv{{0, 0, 0, 0}};
  for (int i = 0; i < 16 && tag[i] != '\0'; ++i) {
    iv.w[i / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(tag[i])) << (8 * (i % 4));
  }
  return iv;
}

// The 128-bit hash of a byte string (domain names, tensor names): stable across processes,
// builds and devices.
DETCOLL_HOST_DEVICE inline Key nameHash(const char* bytes, size_t length) {
  Key h = keyIv("detcoll/name");
  for (size_t start = 0; start < length; start += 8) {
    uint64_t word = 0;
    for (size_t i = 0; i < 8 && start + i < length; ++i) {
      word |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[start + i])) << (8 * i);
    }
    h = keyMix(h, word);
  }
  return keyMix(h, length);
}

DETCOLL_HOST_DEVICE inline Key rootKey(uint64_t seed) {
  return keyMix(keyMix(keyIv("detcoll/root"), seed), 1);
}

// The child of `parent` for a domain (given by its nameHash) and a path of integers.
DETCOLL_HOST_DEVICE inline Key deriveKey(const Key& parent, const Key& domainHash,
                                         const uint64_t* path, size_t length) {
  Key h = keyMix(parent, keyLow64(domainHash));
  h = keyMix(h, keyHigh64(domainHash));
  for (size_t i = 0; i < length; ++i) h = keyMix(h, path[i]);
  return keyMix(h, length + 2);
}

}  // namespace detcoll::kernels::rng
