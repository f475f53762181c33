#pragma once

// What the fuzz targets assert: properties of the code under test that must hold for every input.
// A violation prints what failed and aborts, which libFuzzer records as a crash and the replay of
// the corpora in the unit tests (tests/unit/fuzz_corpus_test.cc) as a failed test.

#include <cstdio>
#include <cstdlib>

#define DETCOLL_FUZZ_CHECK(condition)                                                              \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)

namespace detcoll::fuzz {

// Reads an input front to back; past its end every read gives zeros, so that a target can take
// what it needs from any input.
class FuzzInput {
 public:
  FuzzInput(const unsigned char* data, size_t size) : data_(data), size_(size) {}
  unsigned byte() { return at_ < size_ ? data_[at_++] : 0; }
  // The next n bytes, or fewer at the end.
  const unsigned char* take(size_t n, size_t* got) {
    *got = n < size_ - at_ ? n : size_ - at_;
    const unsigned char* p = data_ + at_;
    at_ += *got;
    return p;
  }
  size_t remaining() const { return size_ - at_; }

 private:
  const unsigned char* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace detcoll::fuzz
