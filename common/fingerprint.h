#pragma once

// Content fingerprints (docs/design.md, "The debugger"): XXH3's 64-bit hash of a buffer's bytes,
// from xxHash (Debian's libxxhash-dev: the library's run-time dispatch on x86-64, else its
// header's code compiled in). The same bytes give the same value on every machine, build and
// run, so two runs' traces compare by fingerprint; two buffers that differ in any bit differ in
// fingerprint but for a 2^-64 chance. Names are hashed by common/hash.h, not here.

#include <cstddef>
#include <cstdint>
#include <string>

namespace detcoll {

uint64_t fingerprint(const void* data, size_t bytes);

// A fingerprint as 16 lowercase hexadecimal digits, as traces write it.
std::string fingerprintHex(uint64_t value);

}  // namespace detcoll
