// kernels/rng/seed_state.h: named counters, the serialized form against the layout documented in
// the header, and the rejection of every corrupted or malformed state with the target unchanged.

#include "kernels/rng/seed_state.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/rng/key.h"

namespace detcoll::kernels::rng {
namespace {

std::string le(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
  return out;
}

const std::string kMagic("DCSEED\0\1", 8);

// body + the 16-byte nameHash of body, four little-endian words.
std::string withCheck(const std::string& body) {
  const Key check = nameHash(body.data(), body.size());
  std::string out = body;
  for (uint32_t w : check.w) out += le(w, 4);
  return out;
}

// The documented form; `counters` must already be in name (byte) order.
std::string documented(uint64_t seed, const std::vector<std::pair<std::string, uint64_t>>& counters,
                       const std::string& magic = kMagic) {
  std::string body = magic + le(seed, 8) + le(counters.size(), 4);
  for (const auto& [name, value] : counters) body += le(name.size(), 4) + name + le(value, 8);
  return withCheck(body);
}

TEST(RngStateTest, CountersStartAtZeroAndNextAdvancesThem) {
  SeedState state(17);
  uint64_t value = 99;
  ASSERT_TRUE(state.counter("step", &value).isOk());
  EXPECT_EQ(value, 0u);
  EXPECT_TRUE(state.counters().empty()) << "reading a counter created it";
  ASSERT_TRUE(state.setCounter("step", 41).isOk());
  ASSERT_TRUE(state.counter("step", &value).isOk());
  EXPECT_EQ(value, 41u);
  ASSERT_TRUE(state.next("step", &value).isOk());
  EXPECT_EQ(value, 41u);
  ASSERT_TRUE(state.next("step", &value).isOk());
  EXPECT_EQ(value, 42u);
  ASSERT_TRUE(state.counter("step", &value).isOk());
  EXPECT_EQ(value, 43u);
  ASSERT_TRUE(state.next("epoch", &value).isOk());
  EXPECT_EQ(value, 0u);
  ASSERT_TRUE(state.counter("epoch", &value).isOk());
  EXPECT_EQ(value, 1u);
  EXPECT_EQ(state.seed(), 17u);
  EXPECT_EQ(state.rootKey(), rootKey(17));
  EXPECT_NE(SeedState(18).rootKey(), state.rootKey());
}

TEST(RngStateTest, ACounterAtTheTopDoesNotWrap) {
  SeedState state(1);
  ASSERT_TRUE(state.setCounter("step", UINT64_MAX - 1).isOk());
  uint64_t value = 0;
  ASSERT_TRUE(state.next("step", &value).isOk());
  EXPECT_EQ(value, UINT64_MAX - 1);
  value = 7;
  const Status status = state.next("step", &value);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'step'"), std::string::npos) << status.message();
  EXPECT_EQ(value, 7u) << "a refused next wrote its output";
  ASSERT_TRUE(state.counter("step", &value).isOk());
  EXPECT_EQ(value, UINT64_MAX);
}

TEST(RngStateTest, CounterNamesAreOneTo1024Bytes) {
  SeedState state(1);
  ASSERT_TRUE(state.setCounter("kept", 5).isOk());
  const SeedState before = state;
  for (const std::string& bad : {std::string(), std::string(1025, 'x')}) {
    uint64_t value = 99;
    const std::string got = "got " + std::to_string(bad.size());
    for (const Status& status :
         {state.counter(bad, &value), state.setCounter(bad, 3), state.next(bad, &value)}) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("1 to 1024 bytes"), std::string::npos) << status.message();
      EXPECT_NE(status.message().find(got), std::string::npos) << status.message();
    }
    EXPECT_EQ(value, 99u);
    EXPECT_TRUE(state == before);
  }
  EXPECT_TRUE(state.setCounter(std::string(1024, 'y'), 1).isOk());
  EXPECT_TRUE(state.setCounter(std::string("\0", 1), 2).isOk());
  EXPECT_EQ(state.counters().size(), 3u);
}

TEST(RngStateTest, AtMostMaxCounters) {
  SeedState state(2);
  for (size_t i = 0; i < SeedState::kMaxCounters; ++i) {
    ASSERT_TRUE(state.setCounter("c" + std::to_string(i), i).isOk()) << i;
  }
  const Status full = state.setCounter("one more", 1);
  EXPECT_EQ(full.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(full.message().find("65536"), std::string::npos) << full.message();
  uint64_t value = 0;
  EXPECT_FALSE(state.next("one more", &value).isOk());
  EXPECT_TRUE(state.setCounter("c7", 70).isOk()) << "an existing counter may still change";
  EXPECT_EQ(state.counters().size(), SeedState::kMaxCounters);
  // The full state still round-trips.
  const std::string bytes = state.serialize();
  SeedState restored;
  ASSERT_TRUE(SeedState::deserialize(bytes.data(), bytes.size(), &restored).isOk());
  EXPECT_TRUE(restored == state);
}

// Names with NUL bytes, bytes above 0x7f, UTF-8, 1 and 1024 bytes; values across 64 bits.
SeedState awkwardState(uint64_t seed, int randomCounters) {
  std::mt19937_64 random(seed);
  SeedState state(seed);
  const std::string names[] = {"step",
                               "epoch",
                               std::string("a\0b", 3),
                               std::string("\0", 1),
                               "\xff\xfe",
                               "\xc3\xb1o\xc3\xb1o",
                               "z",
                               std::string(1024, '\x80')};
  const uint64_t values[] = {0, 1, UINT64_MAX, 1ull << 63, 0x0123456789abcdefull, 12, 13, 14};
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(state.setCounter(names[i], values[i]).isOk());
  for (int i = 0; i < randomCounters; ++i) {
    std::string name(1 + random() % 40, '\0');
    for (char& c : name) c = static_cast<char>(random());
    EXPECT_TRUE(state.setCounter(name, random() >> (random() % 64)).isOk());
  }
  return state;
}

TEST(RngStateTest, SerializedFormIsTheDocumentedOneAndRoundTrips) {
  for (int randomCounters : {0, 3, 200}) {
    const SeedState state = awkwardState(0x9e3779b97f4a7c15ull + randomCounters, randomCounters);
    const std::string bytes = state.serialize();
    // std::map<std::string> orders names by unsigned bytes, the documented name order.
    const std::vector<std::pair<std::string, uint64_t>> counters(state.counters().begin(),
                                                                 state.counters().end());
    EXPECT_TRUE(bytes == documented(state.seed(), counters))
        << randomCounters << " random counters";
    SeedState restored(5);
    ASSERT_TRUE(restored.setCounter("stale", 1).isOk());
    const Status status = SeedState::deserialize(bytes.data(), bytes.size(), &restored);
    ASSERT_TRUE(status.isOk()) << status.toString();
    EXPECT_TRUE(restored == state) << "the restored state differs (or kept a stale counter)";
    EXPECT_TRUE(restored.serialize() == bytes);
  }
  const SeedState empty(0);
  const std::string bytes = empty.serialize();
  EXPECT_EQ(bytes.size(), 8 + 8 + 4 + 16u);
  SeedState restored = awkwardState(1, 2);
  ASSERT_TRUE(SeedState::deserialize(bytes.data(), bytes.size(), &restored).isOk());
  EXPECT_TRUE(restored == empty);
}

// Deserializing `bytes` fails with INVALID_ARGUMENT naming `needle`, and leaves the target alone.
::testing::AssertionResult rejected(const std::string& bytes, const std::string& needle) {
  SeedState target = awkwardState(77, 1);
  const SeedState before = target;
  const Status status = SeedState::deserialize(bytes.data(), bytes.size(), &target);
  if (status.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "accepted, or wrong code: " << status.toString();
  }
  if (status.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message does not name '" << needle << "': " << status.message();
  }
  if (!(target == before)) return ::testing::AssertionFailure() << "the target state changed";
  return ::testing::AssertionSuccess();
}

TEST(RngStateTest, EveryFlipAndTruncationIsRejected) {
  const std::string good = awkwardState(3, 4).serialize();
  for (size_t at = 0; at < good.size(); ++at) {
    for (int mask : {0x01, 0x80, 0xff, 0x5a}) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ mask);
      ASSERT_TRUE(rejected(bad, "not a valid saved state")) << "byte " << at << " ^ " << mask;
    }
  }
  for (size_t size = 0; size < good.size(); ++size) {
    ASSERT_TRUE(rejected(good.substr(0, size), "not a valid saved state")) << size << " bytes";
  }
  EXPECT_TRUE(rejected(good + std::string(1, '\0'), "check hash")) << "one byte appended";
  SeedState target(4);
  const Status null = SeedState::deserialize(nullptr, good.size(), &target);
  EXPECT_EQ(null.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(null.message().find("data is null"), std::string::npos) << null.message();
  EXPECT_EQ(target.seed(), 4u);
}

// Well-formed check hash around malformed contents: each check inside must catch it.
TEST(RngStateTest, MalformedStatesWithAValidCheckAreRejected) {
  const std::string head = le(99, 8);
  auto counter = [](const std::string& name, uint64_t value) {
    return le(name.size(), 4) + name + le(value, 8);
  };
  const std::string one = counter("step", 5);
  EXPECT_TRUE(rejected(withCheck(std::string("DCSEEX\0\1", 8) + head + le(0, 4)), "wrong magic"));
  EXPECT_TRUE(rejected(withCheck(std::string("DCSEED\0\2", 8) + head + le(0, 4)), "format 2"));
  EXPECT_TRUE(rejected(withCheck(std::string("DCSEED\1\1", 8) + head + le(0, 4)), "format 257"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(1, 4) + one + "x"), "trailing bytes"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(0, 4) + one), "trailing bytes"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(65537, 4) + one), "65537 counters"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(0xffffffffu, 4)), "4294967295 counters"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(2, 4) + one), "counter 1 is malformed"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(1, 4) + counter("", 5)), "malformed"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(1, 4) + counter(std::string(1025, 'n'), 5)),
                       "malformed"));
  EXPECT_TRUE(
      rejected(withCheck(kMagic + head + le(1, 4) + le(1000, 4) + "step" + le(5, 8)), "malformed"));
  EXPECT_TRUE(
      rejected(withCheck(kMagic + head + le(1, 4) + one.substr(0, one.size() - 1)), "malformed"));
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(2, 4) + one + one), "repeats a name"));
  // Names must come in order, so that one state has one serialized form.
  EXPECT_TRUE(rejected(withCheck(kMagic + head + le(2, 4) + one + counter("epoch", 2)),
                       "out of name order"));
  // The same documented layout with a correct count is accepted: the checks above are specific.
  SeedState target;
  const std::string fine = withCheck(kMagic + head + le(2, 4) + counter("epoch", 2) + one);
  ASSERT_TRUE(SeedState::deserialize(fine.data(), fine.size(), &target).isOk());
  uint64_t value = 0;
  ASSERT_TRUE(target.counter("step", &value).isOk());
  EXPECT_EQ(value, 5u);
  EXPECT_EQ(target.seed(), 99u);
}

}  // namespace
}  // namespace detcoll::kernels::rng
