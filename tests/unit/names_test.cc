// common/names.h: names in messages are shown whole up to kNameShownWhole bytes, longer ones
// shortened in the middle with their length and hash, so that two names that differ anywhere
// read differently; and the messages that show names (the call agreement's mismatch, the random
// keys' collision, a random counter's overflow) show long names that differ only at the end as
// different.

#include "common/names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collective/collectives.h"
#include "kernels/rng/key_registry.h"
#include "kernels/rng/seed_state.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

// 'length' bytes of a name with some variety: "n0123456789abcdefghij..." repeated.
std::string longName(size_t length, char last) {
  const std::string alphabet = "0123456789abcdefghijklmnopqrstuvwxyz.";
  std::string name;
  for (size_t i = 0; i + 1 < length; ++i) name += alphabet[i % alphabet.size()];
  return name + last;
}

// Whether every multi-byte UTF-8 sequence of `text` is whole.
bool wholeUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xe  ? 3
                     : (c >> 3) == 0x1e ? 4
                                        : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(NamesTest, ShortNamesAreShownWhole) {
  EXPECT_EQ(quotedName("layer1.weight"), "'layer1.weight'");
  EXPECT_EQ(quotedName(""), "''");
  for (size_t length :
       {size_t{63}, size_t{64}, size_t{65}, size_t{200}, size_t{255}, size_t{256}}) {
    const std::string name = longName(length, 'z');
    EXPECT_EQ(quotedName(name), "'" + name + "'") << length << " bytes";
  }
  EXPECT_EQ(kNameShownWhole, 256u);
}

TEST(NamesTest, ProcessSetsAreNamespaces) {
  // Set 0's names are as given; another set's never equal a name of set 0 or of a third set.
  EXPECT_EQ(qualifiedName("grad.w", 0), "grad.w");
  EXPECT_NE(qualifiedName("grad.w", 1), qualifiedName("grad.w", 0));
  EXPECT_NE(qualifiedName("grad.w", 1), qualifiedName("grad.w", 2));
  EXPECT_NE(qualifiedName("grad.w", 1), qualifiedName("grad.w", 11));
  EXPECT_NE(qualifiedName("grad.w1", 1), qualifiedName("grad.w", 11));
  // Messages show the name as given; the timeline names the set.
  EXPECT_EQ(quotedName(qualifiedName("grad.w", 7)), "'grad.w'");
  EXPECT_EQ(shownName(qualifiedName("grad.w", 7)), "grad.w (process set 7)");
  EXPECT_EQ(shownName(qualifiedName("grad.w", 0)), "grad.w");
  const std::string name = longName(300, 'q');
  EXPECT_EQ(quotedName(qualifiedName(name, 3)), quotedName(name));
  // A binding's later stage of an op: messages show the op's name, the timeline the stage.
  const std::string stage = std::string("allgather.x") + kStageSeparator + "sizes";
  EXPECT_EQ(quotedName(stage), "'allgather.x'");
  EXPECT_NE(stage, std::string("allgather.x.sizes"));
  EXPECT_EQ(shownName(stage), "allgather.x (sizes)");
  EXPECT_EQ(shownName(qualifiedName(stage, 2)), "allgather.x (sizes) (process set 2)");
}

TEST(NamesTest, LongNamesAreShortenedInTheMiddle) {
  const std::string name = longName(257, 'z');
  const std::string shown = quotedName(name);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(hashName(name)));
  EXPECT_EQ(shown, "'" + name.substr(0, 96) + "..." + name.substr(257 - 96) +
                       "' (257 bytes, hash " + hash + ")");
  EXPECT_LT(shown.size(), name.size());  // shorter than the name itself
  // A huge name costs no more than any long one.
  EXPECT_LT(quotedName(std::string(1 << 20, 'q')).size(), 240u);
}

TEST(NamesTest, LongNamesThatDifferAnywhereReadDifferently) {
  // Only in the last character: the end is shown.
  const std::string a = longName(300, 'a'), b = longName(300, 'b');
  ASSERT_NE(quotedName(a), quotedName(b));
  EXPECT_NE(quotedName(a).find(a.substr(300 - 96)), std::string::npos);
  EXPECT_NE(quotedName(b).find(b.substr(300 - 96)), std::string::npos);
  // Only in the middle, where neither end shows it: the hash does.
  std::string c = a, d = a;
  c[150] = 'X';
  d[150] = 'Y';
  EXPECT_NE(quotedName(c), quotedName(d));
  // Only in their length.
  EXPECT_NE(quotedName(a), quotedName(a.substr(0, 299) + "xa"));
}

TEST(NamesTest, ShorteningKeepsUtf8CharactersWhole) {
  // "x" then 150 two-byte characters: byte 96 is the middle of one, and so is the last 96 bytes'
  // first; both cuts move to a character's edge.
  std::string name = "x";
  for (int i = 0; i < 150; ++i) name += "\xc3\xa9";  // é
  ASSERT_TRUE(wholeUtf8(name));
  const std::string shown = quotedName(name);
  EXPECT_TRUE(wholeUtf8(shown)) << shown;
  EXPECT_EQ(shown.substr(0, 96), "'" + name.substr(0, 95));
  // Three- and four-byte characters too.
  for (const char* character : {"\xe2\x82\xac", "\xf0\x9f\x98\x80"}) {  // €, 😀
    for (size_t offset = 0; offset < 4; ++offset) {
      std::string text(offset, 'o');
      while (text.size() < 400) text += character;
      EXPECT_TRUE(wholeUtf8(quotedName(text))) << character << " at offset " << offset;
    }
  }
}

TEST(NamesTest, CallMismatchOfLongNamesShowsThemApart) {
  // Two ranks call with 300-byte names that differ only in the last character: the agreed error
  // must tell them apart (a message cut to a common prefix would show the same name twice).
  const std::string a = longName(300, 'a'), b = longName(300, 'b');
  std::vector<Status> status(2);
  testing::runRanks(2, [&](collective::Collectives& c, int r) {
    std::vector<float> send(8, 1.0f), recv(8);
    status[r] = c.allreduce(Mode::kOrdered, send.data(), recv.data(), send.size(), 0, 0,
                            (r == 0 ? a : b).c_str());
  });
  testing::expectSameFailureEverywhere(status, StatusCode::kMismatch,
                                       {"tensor name", a.substr(300 - 96), b.substr(300 - 96)});
}

TEST(NamesTest, RandomKeyCollisionShowsLongPurposesApart) {
  const std::string first = longName(300, '1'), second = longName(300, '2');
  kernels::rng::KeyRegistry registry;
  kernels::rng::Key child{};
  const kernels::rng::Key parent{{1, 2, 3, 4}};
  const uint64_t path[2] = {3, 17};
  ASSERT_TRUE(registry.derive(parent, "dropout", path, 2, first, &child).isOk());
  const Status status = registry.derive(parent, "dropout", path, 2, second, &child);
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(quotedName(first)), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(quotedName(second)), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("domain 'dropout', path [3, 17]"), std::string::npos)
      << status.message();
}

TEST(NamesTest, CounterOverflowShowsTheCounter) {
  kernels::rng::SeedState state(1);
  const std::string name = longName(1000, 'c');
  ASSERT_TRUE(state.setCounter(name, UINT64_MAX).isOk());
  uint64_t value = 0;
  const Status status = state.next(name, &value);
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(quotedName(name)), std::string::npos) << status.message();
  ASSERT_TRUE(state.setCounter("step", UINT64_MAX).isOk());
  EXPECT_NE(state.next("step", &value).message().find("counter 'step' is at 2^64 - 1"),
            std::string::npos);
}

}  // namespace
}  // namespace detcoll
