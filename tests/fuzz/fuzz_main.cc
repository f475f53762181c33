// One libFuzzer binary per target: DETCOLL_FUZZ_TARGET is its name in targets.h.

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/fuzz/targets.h"

namespace {

const detcoll::fuzz::Target& target() {
  static const detcoll::fuzz::Target* const found = [] {
    for (const detcoll::fuzz::Target& t : detcoll::fuzz::kTargets) {
      if (std::strcmp(t.name, DETCOLL_FUZZ_TARGET) == 0) return &t;
    }
    std::fprintf(stderr, "no fuzz target named %s\n", DETCOLL_FUZZ_TARGET);
    std::abort();
  }();
  return *found;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return target().run(data, size);
}
