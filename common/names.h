#pragma once

// How errors and logs show a name (a tensor's, a call's, a counter's, a key's purpose): whole, in
// single quotes, up to kNameShownWhole bytes. Only a longer name is shortened, and in the middle,
// never to a common prefix: its first and last kNameShownEnds bytes (cut at UTF-8 character
// boundaries), its length and its hash (common/hash.h, the hash by which the call agreement
// compares names), so that two long names that differ anywhere, at the end included, still read
// differently:
//   'layer1.weight'
//   '<the first 96 bytes>...<the last 96 bytes>' (300 bytes, hash 0123456789abcdef)
// Every message that shows a name goes through quotedName.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/hash.h"

namespace detcoll {

// Above this length the shortened form (about 230 bytes) is shorter than the name.
constexpr size_t kNameShownWhole = 256;
constexpr size_t kNameShownEnds = 96;

// Process sets are namespaces, as in Horovod: requests of different sets never pair, whatever
// their names. The engine keys a request by its qualified name: set 0's names as given, set k's
// as the name, a NUL byte and k in decimal (a C string holds no NUL, so no name given collides
// with another set's). Messages show the name as given (quotedName stops at the NUL; the
// request's description names its set), the timeline as shownName gives it.
inline std::string qualifiedName(std::string_view name, uint32_t set) {
  if (set == 0) return std::string(name);
  return std::string(name) + '\0' + std::to_string(set);
}

// A binding that makes one op of several requests (detcoll.torch's allgather: the row counts,
// then the rows) names the later ones name + kStageSeparator + stage. The byte is reserved: the
// bindings refuse it in names given to them, so a stage never pairs with an op of another name.
constexpr char kStageSeparator = '\x1f';

// The name as given: up to the stage separator or the set's NUL.
inline std::string_view givenName(std::string_view name) {
  return name.substr(0, std::min(name.find('\0'), name.find(kStageSeparator)));
}

// "name" for set 0, "name (process set k)" for set k; a stage as "name (stage)".
inline std::string shownName(std::string_view qualified) {
  const size_t nul = qualified.find('\0');
  const std::string_view own = qualified.substr(0, nul);
  std::string shown(givenName(own));
  if (own.size() > shown.size()) shown += " (" + std::string(own.substr(shown.size() + 1)) + ")";
  if (nul != std::string_view::npos) {
    shown += " (process set " + std::string(qualified.substr(nul + 1)) + ")";
  }
  return shown;
}

inline std::string quotedName(std::string_view name) {
  name = givenName(name);  // the name as given (see qualifiedName and kStageSeparator)
  if (name.size() <= kNameShownWhole) return "'" + std::string(name) + "'";
  const auto continuation = [&](size_t i) {
    return (static_cast<unsigned char>(name[i]) & 0xc0) == 0x80;
  };
  size_t headEnd = kNameShownEnds;  // back to the start of the character it would cut
  while (headEnd > 0 && continuation(headEnd)) --headEnd;
  size_t tailBegin = name.size() - kNameShownEnds;  // on to the next character's start
  while (tailBegin < name.size() && continuation(tailBegin)) ++tailBegin;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(hashName(name)));
  return "'" + std::string(name.substr(0, headEnd)) + "..." + std::string(name.substr(tailBegin)) +
         "' (" + std::to_string(name.size()) + " bytes, hash " + hash + ")";
}

}  // namespace detcoll
