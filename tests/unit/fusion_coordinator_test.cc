// The pure logic of the fusion engine, without threads: the negotiation messages
// (fusion/negotiation.h) and their wire format, the response cache, the coordinator driven with
// hand-built rank messages and fake time points (ready sets, name order, cache ids, mismatches,
// local errors, groups, stalls, shutdown), and the batch planner.

#include "fusion/coordinator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusion/negotiation.h"
#include "fusion/planner.h"
#include "fusion/response_cache.h"

namespace detcoll {
namespace {

using fusion::Batch;
using fusion::Clock;
using fusion::Coordinator;
using fusion::CoordinatorOptions;
using fusion::Descriptor;
using fusion::RankMessage;
using fusion::RequestKind;
using fusion::RequestPtr;
using fusion::Response;
using Bytes = std::vector<uint8_t>;
using Ids = std::vector<uint32_t>;
using Names = std::vector<std::string>;

Descriptor allreduce(uint64_t count, DataType type = DataType::kFloat32,
                     ReduceOp op = ReduceOp::kSum, Mode mode = Mode::kOrdered) {
  return {RequestKind::kAllreduce, type, op, mode, 0, count};
}

// A broadcast or allgather of float32.
Descriptor other(RequestKind kind, uint64_t count, int32_t root = 0) {
  return {kind, DataType::kFloat32, ReduceOp::kSum, Mode::kOrdered, root, count};
}

Descriptor grouped(Descriptor d, uint64_t key, uint32_t size) {
  d.groupKey = key;
  d.groupSize = size;
  return d;
}

Descriptor shaped(Descriptor d, const std::vector<int64_t>& shape) {
  d.ndim = static_cast<int32_t>(shape.size());
  d.shape = shape;
  return d;
}

// A reduce-scatter of float32 over blocks (count: their sum).
Descriptor reduceScatter(const std::vector<uint64_t>& blocks, Mode mode = Mode::kOrdered) {
  Descriptor d = allreduce(0, DataType::kFloat32, ReduceOp::kSum, mode);
  d.kind = RequestKind::kReducescatter;
  d.blocks = blocks;
  for (uint64_t b : blocks) d.count += b;
  return d;
}

RankMessage announce(const Names& names, const Descriptor& d = allreduce(10)) {
  RankMessage m;
  for (const std::string& name : names) m.announced.push_back({name, d, ""});
  return m;
}

RankMessage cachedBits(const Ids& ids) {
  RankMessage m;
  for (uint32_t id : ids) m.cached.set(id);
  return m;
}

// Fake time points: `seconds` after an arbitrary origin.
Clock::time_point at(double seconds) {
  return Clock::time_point() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1000 + seconds));
}

template <typename Entry>
Names names(const std::vector<Entry>& entries) {
  Names out;
  for (const Entry& e : entries) out.push_back(e.name);
  return out;
}

// "ready a b; cached 0 3; error t MISMATCH; shutdown", leaving out what is empty.
std::string summary(const Response& r) {
  std::string s;
  auto part = [&s](const std::string& p) { s += (s.empty() ? "" : "; ") + p; };
  if (!r.ready.empty()) part("ready");
  for (const auto& e : r.ready) s += " " + e.name;
  if (!r.cachedReady.empty()) part("cached");
  for (uint32_t id : r.cachedReady.ids()) s += " " + std::to_string(id);
  for (const auto& e : r.errors) part("error " + e.name + " " + statusCodeName(e.status.code()));
  if (r.shutdown) part("shutdown");
  return s;
}

void expectHas(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// ---------------------------------------------------------------------------------------------
// Negotiation messages

RankMessage sampleRankMessage() {
  RankMessage m;
  m.shutdown = true;
  for (uint32_t id : {1u, 63u, 64u, 300u}) m.cached.set(id);
  const Descriptor big =
      allreduce(1ull << 40, DataType::kFloat16, ReduceOp::kMax, Mode::kInvariant);
  m.announced.push_back({"layer.0", grouped(big, 0xdeadbeefcafef00dull, 3), ""});
  m.announced.push_back({std::string("with\0nul", 8), other(RequestKind::kBroadcast, 8, 2), ""});
  m.announced.push_back({"bad", other(RequestKind::kAllgather, 5), "sendbuf is null"});
  m.announced.push_back({"rs", shaped(reduceScatter({4, 0, 8}, Mode::kInvariant), {3, 4}), ""});
  m.announced.push_back({"a2a", shaped(other(RequestKind::kAlltoall, 0), {5}), ""});
  m.announced.push_back({"scalar", shaped(allreduce(1), {}), ""});
  return m;
}

Response sampleResponse() {
  Response r;
  r.shutdown = true;
  r.partial = true;
  r.quiet = true;
  r.fusionThresholdBytes = 123456789;
  r.shutdownReason = "rank 3 shut detcoll down";
  for (uint32_t id : {0u, 65u, 129u}) r.cachedReady.set(id);
  r.ready.push_back({"w", allreduce(7, DataType::kBFloat16, ReduceOp::kAverage, Mode::kNative)});
  r.ready.push_back({"b", other(RequestKind::kBroadcast, 3, 1)});
  r.ready.push_back({"rs", shaped(reduceScatter({2, 2}), {2, 2})});
  // Every failure code (an error entry with success is malformed).
  for (int c = static_cast<int>(StatusCode::kInvalidArgument);
       c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const auto code = static_cast<StatusCode>(c);
    r.errors.push_back({"e" + std::to_string(c), Status(code, statusCodeName(code))});
  }
  return r;
}

void expectEqual(const RankMessage& a, const RankMessage& b) {
  EXPECT_EQ(a.shutdown, b.shutdown);
  EXPECT_EQ(a.cached.ids(), b.cached.ids());
  ASSERT_EQ(a.announced.size(), b.announced.size());
  for (size_t i = 0; i < a.announced.size(); ++i) {
    EXPECT_EQ(a.announced[i].name, b.announced[i].name) << i;
    EXPECT_EQ(a.announced[i].descriptor, b.announced[i].descriptor) << i;
    EXPECT_EQ(a.announced[i].error, b.announced[i].error) << i;
  }
}

void expectEqual(const Response& a, const Response& b) {
  ASSERT_EQ(summary(a), summary(b));  // names, ids, codes, shutdown
  EXPECT_EQ(a.shutdownReason, b.shutdownReason);
  EXPECT_EQ(a.partial, b.partial);
  EXPECT_EQ(a.quiet, b.quiet);
  EXPECT_EQ(a.fusionThresholdBytes, b.fusionThresholdBytes);
  for (size_t i = 0; i < a.ready.size(); ++i) {
    EXPECT_EQ(a.ready[i].descriptor, b.ready[i].descriptor) << i;
  }
  for (size_t i = 0; i < a.errors.size(); ++i) {
    EXPECT_EQ(a.errors[i].status.message(), b.errors[i].status.message()) << i;
  }
}

// Decodes into *m; a decoder that throws fails the test.
template <typename Message>
Status decodeBytes(const Bytes& bytes, Message* m) {
  Status status = Status::internal("decode threw");
  EXPECT_NO_THROW(status = fusion::decode(bytes.data(), bytes.size(), m));
  return status;
}

template <typename Message>
bool decodes(const Bytes& bytes) {
  Message m;
  return decodeBytes(bytes, &m).isOk();
}

Bytes patched(Bytes bytes, size_t offset, const Bytes& value) {
  std::memcpy(bytes.data() + offset, value.data(), value.size());
  return bytes;
}

TEST(FusionNegotiationTest, BitSetSetsTestsAndListsIds) {
  fusion::BitSet bits;
  EXPECT_TRUE(bits.empty());
  EXPECT_FALSE(bits.test(0));
  for (uint32_t id : {200u, 0u, 64u, 63u, 0u}) bits.set(id);
  EXPECT_FALSE(bits.empty());
  EXPECT_EQ(bits.ids(), (Ids{0, 63, 64, 200}));
  EXPECT_TRUE(bits.test(63));
  EXPECT_FALSE(bits.test(199));
  EXPECT_FALSE(bits.test(100000));
}

// Decoding overwrites whatever the destination held.
TEST(FusionNegotiationTest, MessagesRoundTrip) {
  for (const RankMessage& original : {sampleRankMessage(), RankMessage()}) {
    RankMessage decoded = announce({"stale", "entries"});
    decoded.shutdown = !original.shutdown;
    decoded.cached.set(5);
    ASSERT_TRUE(decodeBytes(fusion::encode(original), &decoded).isOk());
    expectEqual(decoded, original);
  }
  for (const Response& original : {sampleResponse(), Response()}) {
    Response decoded = sampleResponse();
    decoded.shutdown = !original.shutdown;
    decoded.partial = !original.partial;
    decoded.quiet = !original.quiet;
    decoded.shutdownReason = "stale";
    ASSERT_TRUE(decodeBytes(fusion::encode(original), &decoded).isOk());
    expectEqual(decoded, original);
  }
}

TEST(FusionNegotiationTest, TruncatedOrExtendedBytesAreMalformed) {
  const Bytes message = fusion::encode(sampleRankMessage());
  const Bytes response = fusion::encode(sampleResponse());
  for (size_t n = 0; n < message.size(); ++n) {
    EXPECT_FALSE(decodes<RankMessage>(Bytes(message.begin(), message.begin() + n))) << n;
  }
  for (size_t n = 0; n < response.size(); ++n) {
    EXPECT_FALSE(decodes<Response>(Bytes(response.begin(), response.begin() + n))) << n;
  }
  Bytes longer = message;
  longer.push_back(0);
  EXPECT_FALSE(decodes<RankMessage>(longer));
  longer = response;
  longer.push_back(0);
  EXPECT_FALSE(decodes<Response>(longer));
  // Each kind of message is refused by the other's decoder (the magic numbers differ).
  EXPECT_FALSE(decodes<RankMessage>(response));
  EXPECT_FALSE(decodes<Response>(message));
}

TEST(FusionNegotiationTest, GarbledFieldsAreMalformed) {
  // A RankMessage with no cache bits and one announcement: magic, shutdown, word count,
  // announcement count, name length, name, descriptor, error.
  const Bytes good = fusion::encode(announce({"abc"}));
  const size_t kWords = 5, kCount = 9, kNameLength = 13;
  ASSERT_TRUE(decodes<RankMessage>(good));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, 0, {1, 2, 3, 4})));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, kWords, {0xe8, 3, 0, 0})));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, kCount, {2, 0, 0, 0})));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, kNameLength, {4, 0, 0, 0})));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, kNameLength, {0xff, 0xff, 0xff, 0xff})));
}

// A count far beyond the bytes that follow is refused, not allocated.
TEST(FusionNegotiationTest, HugeCountsAreMalformed) {
  // After magic, shutdown, partial, threshold, last joined, reason, words.
  const size_t kCount = 9, kReadyCount = 4 + 1 + 1 + 8 + 4 + 4 + 4;
  const Bytes huge = {0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(decodes<RankMessage>(patched(fusion::encode(announce({"abc"})), kCount, huge)));
  EXPECT_FALSE(decodes<Response>(patched(fusion::encode(Response()), kReadyCount, huge)));
}

// Values that no enum holds: request kind, dtype, op, mode; a status code.
TEST(FusionNegotiationTest, OutOfRangeEnumsAreMalformed) {
  const Bytes good = fusion::encode(announce({"abc"}));
  const size_t kKind = 20;  // after magic, shutdown, word count, count, name length, name
  for (const auto& [offset, value] :
       std::vector<std::pair<size_t, Bytes>>{{kKind, {0}},
                                             {kKind, {7}},
                                             {kKind + 1, {6, 0, 0, 0}},
                                             {kKind + 5, {4, 0, 0, 0}},
                                             {kKind + 9, {3, 0, 0, 0}}}) {
    EXPECT_FALSE(decodes<RankMessage>(patched(good, offset, value))) << "offset " << offset;
  }
  Response r;
  r.errors.push_back({"x", Status::mismatch("m")});
  const Bytes withError = fusion::encode(r);
  const size_t kCode = 4 + 1 + 1 + 8 + 4 + 4 + 4 + 4 + 4 + 4 + 1;
  ASSERT_EQ(withError[kCode], static_cast<uint8_t>(StatusCode::kMismatch));
  EXPECT_FALSE(decodes<Response>(patched(withError, kCode, {7})));
}

// The offset of the first occurrence of `pattern` in bytes (the test fails where there is none).
size_t find(const Bytes& bytes, const Bytes& pattern) {
  const auto at = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  EXPECT_NE(at, bytes.end());
  return static_cast<size_t>(at - bytes.begin());
}

Bytes littleEndian(uint64_t v, size_t n) {
  Bytes out;
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return out;
}

// Shapes and blocks travel with the descriptor and come back whole; no shape (ndim -1) and a
// scalar's empty shape (ndim 0) stay distinct.
TEST(FusionNegotiationTest, ShapesAndBlocksRoundTrip) {
  const Descriptor cases[] = {
      shaped(allreduce(6), {2, 3}),
      shaped(allreduce(1), {}),
      allreduce(1),
      shaped(reduceScatter({1, 0, 5, 7}), {13}),
      reduceScatter({3, 3}),
      shaped(other(RequestKind::kAlltoall, 0), {4, -1, int64_t{1} << 40}),
      shaped(other(RequestKind::kAllgather, 9), {3, 3}),
  };
  for (const Descriptor& d : cases) {
    SCOPED_TRACE(fusion::describe(d));
    RankMessage decoded;
    ASSERT_TRUE(decodeBytes(fusion::encode(announce({"t"}, d)), &decoded).isOk());
    ASSERT_EQ(decoded.announced.size(), 1u);
    EXPECT_EQ(decoded.announced[0].descriptor, d);
    EXPECT_EQ(decoded.announced[0].descriptor.ndim, d.ndim);
    EXPECT_EQ(decoded.announced[0].descriptor.shape, d.shape);
    EXPECT_EQ(decoded.announced[0].descriptor.blocks, d.blocks);
  }
  EXPECT_NE(shaped(allreduce(1), {}), allreduce(1));
  EXPECT_NE(shaped(allreduce(6), {2, 3}), shaped(allreduce(6), {3, 2}));
  EXPECT_NE(reduceScatter({1, 2}), reduceScatter({2, 1}));
}

// ndim must be the length of the shape list (or -1 with none); list lengths beyond the bytes
// that follow are refused, not allocated.
TEST(FusionNegotiationTest, ShapeAndBlockListsThatDisagreeOrOverrunAreMalformed) {
  const Descriptor d = shaped(reduceScatter({5, 6}), {11, 1});
  const Bytes good = fusion::encode(announce({"t"}, d));
  ASSERT_TRUE(decodes<RankMessage>(good));
  // ndim 2, 2 extents, 11 and 1, 2 blocks.
  Bytes tail = littleEndian(2, 4);
  for (const Bytes& part :
       {littleEndian(2, 4), littleEndian(11, 8), littleEndian(1, 8), littleEndian(2, 4)}) {
    tail.insert(tail.end(), part.begin(), part.end());
  }
  const size_t ndim = find(good, tail);
  const size_t shapeLength = ndim + 4, blocksLength = ndim + 4 + 4 + 16;
  for (uint32_t wrong : {0u, 1u, 3u, 64u, 0xffffffffu /* -1: no shape, yet two extents */}) {
    EXPECT_FALSE(decodes<RankMessage>(patched(good, ndim, littleEndian(wrong, 4)))) << wrong;
  }
  EXPECT_FALSE(decodes<RankMessage>(patched(good, shapeLength, littleEndian(3, 4))));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, shapeLength, littleEndian(0xffffffff, 4))));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, blocksLength, littleEndian(3, 4))));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, blocksLength, littleEndian(0x10000000, 4))));
  // A shorter list leaves bytes that the next field misreads, or left over.
  EXPECT_FALSE(decodes<RankMessage>(patched(good, blocksLength, littleEndian(1, 4))));
  // Cut anywhere inside the lists.
  for (size_t n = ndim; n < good.size(); ++n) {
    EXPECT_FALSE(decodes<RankMessage>(Bytes(good.begin(), good.begin() + n))) << n;
  }
  // The request kinds up to join decode, the next one does not (after magic, shutdown, word
  // count, count, name length, name).
  const size_t kKind = 18;
  EXPECT_TRUE(decodes<RankMessage>(patched(good, kKind, {6})));
  EXPECT_FALSE(decodes<RankMessage>(patched(good, kKind, {7})));
}

TEST(FusionNegotiationTest, DescribeNamesTheShapeAndTheBlocks) {
  EXPECT_EQ(fusion::describe(shaped(allreduce(6), {2, 3})),
            "allreduce float32[6] shape (2, 3) sum ordered");
  EXPECT_EQ(fusion::describe(shaped(allreduce(4), {4})),
            "allreduce float32[4] shape (4,) sum ordered");
  EXPECT_EQ(fusion::describe(shaped(allreduce(1), {})),
            "allreduce float32[1] shape () sum ordered");
  EXPECT_EQ(fusion::describe(allreduce(6)), "allreduce float32[6] sum ordered");
  EXPECT_EQ(fusion::describe(shaped(reduceScatter({2, 4}, Mode::kInvariant), {2, 3})),
            "reducescatter float32[6] shape (2, 3) in blocks of 2, 4 sum invariant");
  EXPECT_EQ(fusion::describe(reduceScatter({0, 5, 1})),
            "reducescatter float32[6] in blocks of 0, 5, 1 sum ordered");
  EXPECT_EQ(fusion::describe(shaped(other(RequestKind::kAlltoall, 0), {3, 2})),
            "alltoall float32 rows of shape (3, 2)");
  EXPECT_EQ(fusion::describe(shaped(other(RequestKind::kAllgather, 6), {3})),
            "allgather float32[6] rows of shape (3,)");
}

// ---------------------------------------------------------------------------------------------
// Response cache

TEST(FusionResponseCacheTest, FindAndRecord) {
  fusion::ResponseCache cache;
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.contains(0));
  const Descriptor b = other(RequestKind::kBroadcast, 2, 1);
  cache.record("a", allreduce(1));
  cache.record("b", b);
  ASSERT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.contains(2));
  EXPECT_EQ(cache.find("a", allreduce(1)), std::optional<uint32_t>(0));
  EXPECT_EQ(cache.find("b", b), std::optional<uint32_t>(1));
  EXPECT_EQ(cache.name(1), "b");
  EXPECT_EQ(cache.descriptor(0), allreduce(1));
  EXPECT_FALSE(cache.find("a", allreduce(2)).has_value());
  EXPECT_FALSE(cache.find("b", other(RequestKind::kBroadcast, 2, 0)).has_value());
  EXPECT_FALSE(cache.find("c", allreduce(1)).has_value());
  // A known name with a new descriptor keeps its id and forgets the old descriptor.
  cache.record("a", allreduce(1, DataType::kInt64));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find("a", allreduce(1, DataType::kInt64)), std::optional<uint32_t>(0));
  EXPECT_FALSE(cache.find("a", allreduce(1)).has_value());
  EXPECT_EQ(cache.descriptor(0), allreduce(1, DataType::kInt64));
}

TEST(FusionResponseCacheTest, StopsGrowingAtCapacity) {
  fusion::ResponseCache cache;
  const uint32_t n = fusion::ResponseCache::kCapacity;
  for (uint32_t i = 0; i < n; ++i) cache.record("t" + std::to_string(i), allreduce(i + 1));
  ASSERT_EQ(cache.size(), n);
  cache.record("one too many", allreduce(1));
  EXPECT_EQ(cache.size(), n);
  EXPECT_FALSE(cache.find("one too many", allreduce(1)).has_value());
  const std::string last = "t" + std::to_string(n - 1);
  EXPECT_EQ(cache.find(last, allreduce(n)), std::optional<uint32_t>(n - 1));
  cache.record(last, allreduce(3));  // known names still take new descriptors
  EXPECT_EQ(cache.find(last, allreduce(3)), std::optional<uint32_t>(n - 1));
}

// ---------------------------------------------------------------------------------------------
// Coordinator

// No stall warnings or timeouts.
CoordinatorOptions quiet() {
  return {0, 0, nullptr};
}

std::vector<RankMessage> all(int size, const RankMessage& m) {
  return std::vector<RankMessage>(size, m);
}

TEST(FusionCoordinatorTest, ReadyEverywhereThenCachedById) {
  Coordinator c(3, quiet());
  Response r = c.process(all(3, announce({"w1", "w0"})), at(0));
  EXPECT_EQ(summary(r), "ready w0 w1");
  EXPECT_EQ(r.ready[0].descriptor, allreduce(10));
  EXPECT_EQ(c.pendingCount(), 0u);
  // Ids follow the ready order: w0 is 0, w1 is 1.
  EXPECT_EQ(summary(c.process(all(3, cachedBits({1})), at(1))), "cached 1");
  // By a bit on some ranks and in full with the cached descriptor on others: still by id.
  r = c.process({cachedBits({0}), announce({"w0"}), announce({"w0"})}, at(2));
  EXPECT_EQ(summary(r), "cached 0");
  // A new descriptor comes in full, then the same id stands for it.
  r = c.process(all(3, announce({"w0"}, allreduce(20))), at(3));
  ASSERT_EQ(summary(r), "ready w0");
  EXPECT_EQ(r.ready[0].descriptor, allreduce(20));
  EXPECT_EQ(summary(c.process(all(3, announce({"w0"}, allreduce(20))), at(4))), "cached 0");
  // An id the coordinator never gave is ignored.
  EXPECT_EQ(summary(c.process(all(3, cachedBits({9})), at(5))), "");
  EXPECT_EQ(c.pendingCount(), 0u);
}

TEST(FusionCoordinatorTest, WaitsForEveryRank) {
  Coordinator c(3, quiet());
  EXPECT_EQ(summary(c.process({announce({"a"}), announce({"a"}), RankMessage()}, at(0))), "");
  EXPECT_EQ(c.pendingCount(), 1u);
  // Rank 0 announcing again in between changes nothing: a rank's first announcement stands.
  Response r = c.process({announce({"a"}, allreduce(99)), RankMessage(), RankMessage()}, at(1));
  EXPECT_EQ(summary(r), "");
  r = c.process({RankMessage(), RankMessage(), announce({"a"})}, at(2));
  ASSERT_EQ(summary(r), "ready a");
  EXPECT_EQ(r.ready[0].descriptor, allreduce(10));
  EXPECT_EQ(c.pendingCount(), 0u);
}

TEST(FusionCoordinatorTest, WhileARankHasJoinedOnlyAllreducesWaitForTheOthers) {
  Coordinator c(3, quiet());
  const Descriptor join = other(RequestKind::kJoin, 0);
  // Rank 0 joins; rank 1 announces an allgather the others never make (as after a call that
  // numbered unnamed ops differently): it fails at once, naming rank 0, without waiting.
  Response r = c.process({announce({fusion::kJoinName}, join),
                          announce({"g"}, other(RequestKind::kAllgather, 4)), RankMessage()},
                         at(0));
  ASSERT_EQ(summary(r), "error g INVALID_ARGUMENT");
  expectHas(r.errors[0].status.message(), "rank 0 has joined");
  // An allreduce still waits for rank 2 only, and runs with rank 0's zeros.
  EXPECT_EQ(summary(c.process({RankMessage(), announce({"a"}), RankMessage()}, at(1))), "");
  EXPECT_EQ(summary(c.process({RankMessage(), RankMessage(), announce({"a"})}, at(2))), "ready a");
  // Once every rank has joined, an allgather waits for every rank again.
  r = c.process(
      {RankMessage(), announce({fusion::kJoinName}, join), announce({fusion::kJoinName}, join)},
      at(3));
  EXPECT_EQ(summary(r), std::string("ready ") + fusion::kJoinName);
  const Descriptor gather = other(RequestKind::kAllgather, 4);
  EXPECT_EQ(summary(c.process({announce({"h"}, gather), RankMessage(), RankMessage()}, at(4))), "");
  EXPECT_EQ(
      summary(c.process({RankMessage(), announce({"h"}, gather), announce({"h"}, gather)}, at(5))),
      "ready h");
}

TEST(FusionCoordinatorTest, ReadyOrderIsNameOrderNotArrivalOrder) {
  Coordinator c(3, quiet());
  Response r = c.process(
      {announce({"c", "a", "d", "b"}), announce({"b", "d", "a", "c"}), announce({"d", "a"})},
      at(0));
  EXPECT_EQ(summary(r), "ready a d");
  r = c.process({RankMessage(), RankMessage(), announce({"c", "b"})}, at(1));
  EXPECT_EQ(summary(r), "ready b c");
  // Other arrival orders give byte-identical responses.
  Coordinator x(3, quiet()), y(3, quiet());
  const Response rx = x.process(
      {announce({"b", "a", "c"}), announce({"c", "b", "a"}), announce({"a", "c", "b"})}, at(0));
  const Response ry = y.process(
      {announce({"a", "c", "b"}), announce({"a", "b", "c"}), announce({"c", "b", "a"})}, at(0));
  EXPECT_EQ(summary(rx), "ready a b c");
  EXPECT_EQ(fusion::encode(rx), fusion::encode(ry));
}

TEST(FusionCoordinatorTest, MismatchNamesTheTensorAndEveryRank) {
  const Descriptor base = allreduce(10);
  const Descriptor count = allreduce(11), dtype = allreduce(10, DataType::kFloat64);
  const Descriptor op = allreduce(10, DataType::kFloat32, ReduceOp::kAverage);
  const Descriptor mode = allreduce(10, DataType::kFloat32, ReduceOp::kSum, Mode::kInvariant);
  const Descriptor root0 = other(RequestKind::kBroadcast, 4, 0);
  const Descriptor root1 = other(RequestKind::kBroadcast, 4, 1);
  const std::pair<Descriptor, Descriptor> cases[] = {{base, count},  {base, dtype},
                                                     {base, op},     {base, mode},
                                                     {root0, root1}, {base, grouped(base, 5, 2)}};
  for (const auto& [agreed, odd] : cases) {
    SCOPED_TRACE(fusion::describe(odd));
    Coordinator c(3, quiet());
    std::vector<RankMessage> m = all(3, announce({"t"}, agreed));
    m[1] = announce({"t"}, odd);
    for (RankMessage& rank : m) rank.announced.push_back({"fine", base, ""});
    const Response r = c.process(m, at(0));
    ASSERT_EQ(summary(r), "ready fine; error t MISMATCH");
    expectHas(r.errors[0].status.message(), "'t'");
    expectHas(r.errors[0].status.message(), "ranks 0 and 2 have " + fusion::describe(agreed) +
                                                "; rank 1 has " + fusion::describe(odd));
    EXPECT_EQ(c.pendingCount(), 0u);
  }
  // Three different descriptors: each rank named with its own.
  Coordinator c(3, quiet());
  const Response r =
      c.process({announce({"t"}, count), announce({"t"}, base), announce({"t"}, dtype)}, at(0));
  ASSERT_EQ(summary(r), "error t MISMATCH");
  expectHas(r.errors[0].status.message(), "rank 0 has " + fusion::describe(count) +
                                              "; rank 1 has " + fusion::describe(base) +
                                              "; rank 2 has " + fusion::describe(dtype));
}

// Equal counts, different shapes (or a shape against none): a mismatch naming both shapes.
TEST(FusionCoordinatorTest, MismatchNamesBothShapes) {
  const Descriptor a = shaped(allreduce(6), {2, 3}), b = shaped(allreduce(6), {3, 2});
  const Descriptor flat = shaped(allreduce(6), {6}), none = allreduce(6);
  const Descriptor rsA = shaped(reduceScatter({3, 3}), {2, 3});
  const Descriptor rsB = shaped(reduceScatter({3, 3}), {6, 1});
  const Descriptor rsBlocks = shaped(reduceScatter({2, 4}), {2, 3});
  const std::pair<Descriptor, Descriptor> cases[] = {
      {a, b}, {a, flat}, {a, none}, {rsA, rsB}, {rsA, rsBlocks}};
  for (const auto& [agreed, odd] : cases) {
    SCOPED_TRACE(fusion::describe(odd));
    ASSERT_EQ(agreed.count, odd.count);
    Coordinator c(3, quiet());
    std::vector<RankMessage> m = all(3, announce({"t"}, agreed));
    m[1] = announce({"t"}, odd);
    const Response r = c.process(m, at(0));
    ASSERT_EQ(summary(r), "error t MISMATCH");
    const std::string& text = r.errors[0].status.message();
    expectHas(text, "'t'");
    expectHas(text, "ranks 0 and 2 have " + fusion::describe(agreed) + "; rank 1 has " +
                        fusion::describe(odd));
    expectHas(text, "shape (2, 3)");
    if (odd.ndim >= 0) {
      std::string shape = "shape (";
      for (size_t i = 0; i < odd.shape.size(); ++i) {
        shape += (i ? ", " : "") + std::to_string(odd.shape[i]);
      }
      expectHas(text, shape);
    }
  }
  // Agreeing shapes are ready, by id the next time.
  Coordinator c(2, quiet());
  EXPECT_EQ(summary(c.process(all(2, announce({"t"}, a)), at(0))), "ready t");
  EXPECT_EQ(summary(c.process(all(2, cachedBits({0})), at(1))), "cached 0");
  // The same name with another shape is announced in full and fails if the ranks disagree.
  const Response r = c.process({announce({"t"}, a), announce({"t"}, b)}, at(2));
  EXPECT_EQ(summary(r), "error t MISMATCH");
}

TEST(FusionCoordinatorTest, LocalErrorFailsTheNameEverywhere) {
  Coordinator c(3, quiet());
  std::vector<RankMessage> m = all(3, announce({"t"}));
  m[1].announced[0].error = "sendbuf is null";
  m[2].announced[0].descriptor = allreduce(11);  // a local error outranks a mismatch
  Response r = c.process(m, at(0));
  ASSERT_EQ(summary(r), "error t INVALID_ARGUMENT");
  expectHas(r.errors[0].status.message(), "'t'");
  expectHas(r.errors[0].status.message(), "rank 1: sendbuf is null");
  EXPECT_EQ(c.pendingCount(), 0u);
  m = all(3, announce({"u"}));
  m[0].announced[0].error = "first";
  m[2].announced[0].error = "third";
  r = c.process(m, at(1));
  ASSERT_EQ(summary(r), "error u INVALID_ARGUMENT");
  expectHas(r.errors[0].status.message(), "rank 0: first; rank 2: third");
}

TEST(FusionCoordinatorTest, GroupIsReadyTogether) {
  Coordinator c(3, quiet());
  const Descriptor g = grouped(allreduce(10), 7, 3);
  std::vector<RankMessage> m = all(3, announce({"g.a", "g.b", "g.c"}, g));
  m[2] = announce({"g.b", "g.a"}, g);
  for (RankMessage& rank : m) rank.announced.push_back({"solo", allreduce(10), ""});
  EXPECT_EQ(summary(c.process(m, at(0))), "ready solo");
  EXPECT_EQ(c.pendingCount(), 3u);
  const Response r = c.process({RankMessage(), RankMessage(), announce({"g.c"}, g)}, at(1));
  EXPECT_EQ(summary(r), "ready g.a g.b g.c");
  EXPECT_EQ(c.pendingCount(), 0u);
}

TEST(FusionCoordinatorTest, FailingMemberFailsTheRestOfItsGroup) {
  Coordinator c(3, quiet());
  const Descriptor g = grouped(allreduce(10), 9, 3);
  std::vector<RankMessage> m = all(3, announce({"g.a", "g.b", "g.c"}, g));
  m[1].announced[1].descriptor.count = 12;  // g.b mismatches
  m[2] = announce({"g.a", "g.b"}, g);       // g.c still missing on rank 2
  const Response r = c.process(m, at(0));
  ASSERT_EQ(summary(r), "error g.b MISMATCH; error g.a MISMATCH; error g.c MISMATCH");
  expectHas(r.errors[1].status.message(), "'g.b'");
  expectHas(r.errors[2].status.message(), "'g.b'");
  EXPECT_EQ(c.pendingCount(), 0u);
}

// Every member of a group failing in one cycle, as when one rank enqueued a different group. Runs
// in a child process, so that a crash fails this test alone; exits 0 when the response is right.
void failEveryMemberOfAGroupAndExit() {
  Coordinator c(3, quiet());
  std::vector<RankMessage> m = all(3, announce({"g.a", "g.b"}, grouped(allreduce(10), 4, 2)));
  m[2] = announce({"g.a", "g.b"}, grouped(allreduce(10), 5, 3));
  const Response r = c.process(m, at(0));
  std::fprintf(stderr, "%s; %zu pending\n", summary(r).c_str(), c.pendingCount());
  const bool right =
      names(r.errors) == Names{"g.a", "g.b"} && r.ready.empty() && c.pendingCount() == 0;
  std::exit(right ? 0 : 1);
}

TEST(FusionCoordinatorTest, EveryMemberOfAGroupFailing) {
  EXPECT_EXIT(failEveryMemberOfAGroupAndExit(), ::testing::ExitedWithCode(0), "");
}

CoordinatorOptions stallOptions(Names* warnings) {
  return {10, 30, [warnings](const std::string& text) { warnings->push_back(text); }};
}

TEST(FusionCoordinatorTest, StallWarnsThenFails) {
  Names warnings;
  Coordinator c(3, stallOptions(&warnings));
  const std::vector<RankMessage> idle(3);
  Response r = c.process({announce({"s"}), announce({"s"}), RankMessage()}, at(0));
  for (double t : {5.0, 9.9}) r = c.process(idle, at(t));
  EXPECT_TRUE(warnings.empty());
  r = c.process(idle, at(10));
  ASSERT_EQ(warnings.size(), 1u);
  expectHas(warnings[0], "'s'");
  expectHas(warnings[0], "for rank 2; submitted by ranks 0 and 1");
  for (double t : {12.0, 19.9}) r = c.process(idle, at(t));
  EXPECT_EQ(warnings.size(), 1u);
  r = c.process(idle, at(20));
  EXPECT_EQ(warnings.size(), 2u);
  EXPECT_EQ(summary(c.process(idle, at(29.9))), "");
  EXPECT_EQ(c.pendingCount(), 1u);
  r = c.process(idle, at(30));
  // The stall fails the name and stops every engine, with TIMEOUT and the stall as the reason.
  ASSERT_EQ(summary(r), "error s TIMEOUT; shutdown");
  expectHas(r.errors[0].status.message(), "'s'");
  expectHas(r.errors[0].status.message(), "rank 2 did not submit");
  EXPECT_EQ(r.shutdownCode, StatusCode::kTimeout);
  EXPECT_EQ(r.shutdownReason, r.errors[0].status.message());
  EXPECT_EQ(c.pendingCount(), 0u);
  EXPECT_EQ(warnings.size(), 2u);
}

TEST(FusionCoordinatorTest, RequestsOfAProcessSetAreNamedWithTheSetAndFailWhenItIsRemoved) {
  Names warnings;
  CoordinatorOptions options = stallOptions(&warnings);
  const auto members = std::make_shared<const std::vector<int>>(std::vector<int>{0, 1});
  bool removed = false;
  options.members = [&](uint32_t id) {
    return id == 5 && !removed ? members : std::shared_ptr<const std::vector<int>>();
  };
  options.removed = [&](uint32_t id) { return id == 5 && removed; };
  Coordinator c(3, options);
  Descriptor inSet = allreduce(10);
  inSet.processSet = 5;
  const std::vector<RankMessage> idle(3);
  // A stall in a set names the set: the same name may run in another set at the same time.
  c.process({announce({"s"}, inSet), RankMessage(), RankMessage()}, at(0));
  Response r = c.process(idle, at(30));
  ASSERT_EQ(summary(r), "error s TIMEOUT; shutdown");
  expectHas(r.errors[0].status.message(), "allreduce 's' in process set 5 stalled: rank 1");
  // A set removed while a request of it waits: the request fails at once, naming the set.
  Coordinator d(3, options);
  d.process({announce({"r"}, inSet), RankMessage(), RankMessage()}, at(0));
  removed = true;
  r = d.process(idle, at(1));
  ASSERT_EQ(summary(r), "error r INVALID_ARGUMENT");
  expectHas(r.errors[0].status.message(),
            "allreduce 'r' in process set 5: the process set was removed while the request was "
            "in flight");
  EXPECT_EQ(d.pendingCount(), 0u);
}

TEST(FusionCoordinatorTest, ARanksShutdownIsNotATimeout) {
  Names warnings;
  Coordinator c(3, stallOptions(&warnings));
  std::vector<RankMessage> m(3);
  m[2].shutdown = true;
  const Response r = c.process(m, at(0));
  ASSERT_EQ(summary(r), "shutdown");
  EXPECT_EQ(r.shutdownCode, StatusCode::kNotInitialized);
}

TEST(FusionCoordinatorTest, StallClockStartsAtFirstAnnouncement) {
  Names warnings;
  Coordinator c(4, stallOptions(&warnings));
  const std::vector<RankMessage> idle(4);
  Response r = c.process({RankMessage(), announce({"late"}), RankMessage(), RankMessage()}, at(50));
  r = c.process(idle, at(59));
  EXPECT_TRUE(warnings.empty());
  r = c.process(idle, at(60));
  ASSERT_EQ(warnings.size(), 1u);
  expectHas(warnings[0], "ranks 0, 2 and 3; submitted by rank 1");
  EXPECT_EQ(summary(c.process(idle, at(80))), "error late TIMEOUT; shutdown");
}

TEST(FusionCoordinatorTest, AStalledGroupMemberTakesItsGroupWithIt) {
  Names warnings;
  Coordinator c(4, stallOptions(&warnings));
  const std::vector<RankMessage> idle(4);
  const Descriptor g = grouped(allreduce(10), 3, 2);
  std::vector<RankMessage> m = all(4, announce({"g.a", "g.b"}, g));
  m[3] = announce({"g.b"}, g);
  EXPECT_EQ(summary(c.process(m, at(85))), "");
  EXPECT_EQ(summary(c.process(idle, at(114.9))), "");
  EXPECT_EQ(summary(c.process(idle, at(115))), "error g.a TIMEOUT; error g.b TIMEOUT; shutdown");
  EXPECT_EQ(c.pendingCount(), 0u);
}

TEST(FusionCoordinatorTest, PartialWhileANameIsYoungOnSomeRanksOnly) {
  // A name some ranks announced less than 5 ms ago asks for the next cycle at once; an older one
  // (a stall in the making) or one every rank has does not.
  Coordinator c(3, quiet());
  Response r = c.process({announce({"a"}), RankMessage(), RankMessage()}, at(0));
  EXPECT_TRUE(r.partial);
  EXPECT_TRUE(c.process({RankMessage(), RankMessage(), RankMessage()}, at(0.004)).partial);
  EXPECT_FALSE(c.process({RankMessage(), RankMessage(), RankMessage()}, at(0.006)).partial);
  r = c.process({RankMessage(), announce({"a"}), announce({"a"})}, at(0.007));
  EXPECT_EQ(summary(r), "ready a");
  EXPECT_FALSE(r.partial);
}

TEST(FusionCoordinatorTest, QuietWhenNothingIsPendingAndNoRankHasJoined) {
  // The point where the engines may start the fast path of a repeated step together.
  Coordinator c(3, quiet());
  Response r = c.process({announce({"a", "b"}), announce({"a"}), announce({"a"})}, at(0));
  EXPECT_EQ(summary(r), "ready a");
  EXPECT_FALSE(r.quiet) << "'b' is pending";
  r = c.process({RankMessage(), announce({"b"}), announce({"b"})}, at(0.001));
  EXPECT_EQ(summary(r), "ready b");
  EXPECT_TRUE(r.quiet);
  const Descriptor join = other(RequestKind::kJoin, 0);
  r = c.process({announce({fusion::kJoinName}, join), RankMessage(), RankMessage()}, at(0.002));
  EXPECT_FALSE(r.quiet) << "rank 0 has joined";
  r = c.process({RankMessage(), announce({"c"}), announce({"c"})}, at(0.003));
  EXPECT_EQ(summary(r), "ready c");
  EXPECT_FALSE(r.quiet) << "rank 0 has joined, and the join is pending";
  r = c.process(
      {RankMessage(), announce({fusion::kJoinName}, join), announce({fusion::kJoinName}, join)},
      at(0.004));
  EXPECT_TRUE(r.quiet) << "every rank has joined: the join is ready and the next starts afresh";
  EXPECT_TRUE(c.process({RankMessage(), RankMessage(), RankMessage()}, at(0.005)).quiet);
}

TEST(FusionCoordinatorTest, ShutdownNamesTheRank) {
  Coordinator c(3, quiet());
  Response r = c.process(all(3, announce({"a"})), at(0));
  EXPECT_EQ(summary(r), "ready a");
  EXPECT_EQ(r.shutdownReason, "");
  std::vector<RankMessage> m = all(3, announce({"b"}));
  m[1].shutdown = m[2].shutdown = true;
  r = c.process(m, at(1));
  EXPECT_EQ(summary(r), "shutdown");
  expectHas(r.shutdownReason, "rank 1");
  EXPECT_EQ(r.shutdownReason.find("rank 2"), std::string::npos) << r.shutdownReason;
}

TEST(FusionCoordinatorTest, DescribeRanks) {
  EXPECT_EQ(fusion::describeRanks({3}), "rank 3");
  EXPECT_EQ(fusion::describeRanks({0, 1}), "ranks 0 and 1");
  EXPECT_EQ(fusion::describeRanks({0, 2, 5}), "ranks 0, 2 and 5");
  EXPECT_EQ(fusion::describeRanks({4, 7, 8, 9}), "ranks 4, 7, 8 and 9");
}

// ---------------------------------------------------------------------------------------------
// Planner

RequestPtr request(const std::string& name, const Descriptor& d) {
  fusion::RequestSpec spec;
  spec.name = name;
  spec.descriptor = d;
  return std::make_shared<fusion::Request>(spec, nullptr);
}

// "a+b*800" for a fused batch of a and b with 800 bytes, "c 4" for an unfused one.
Names layout(const std::vector<Batch>& batches) {
  Names out;
  for (const Batch& b : batches) {
    std::string text;
    for (const RequestPtr& r : b.requests) text += (text.empty() ? "" : "+") + r->name();
    out.push_back(text + (b.fused ? "*" : " ") + std::to_string(b.bytes));
  }
  return out;
}

TEST(FusionPlannerTest, ThresholdZeroRunsEachAlone) {
  const std::vector<RequestPtr> ready = {request("a", allreduce(10)), request("b", allreduce(20)),
                                         request("c", allreduce(30))};
  EXPECT_EQ(layout(fusion::planBatches(ready, {0, 1 << 20})), (Names{"a 40", "b 80", "c 120"}));
}

TEST(FusionPlannerTest, PacksUpToTheThresholdInReadyOrder) {
  const std::vector<RequestPtr> ready = {
      request("a", allreduce(100)), request("b", allreduce(100)),   request("c", allreduce(50)),
      request("d", allreduce(1)),   request("big", allreduce(300)), request("e", allreduce(100))};
  EXPECT_EQ(layout(fusion::planBatches(ready, {1000, 1 << 20})),
            (Names{"a+b+c*1000", "d+e*404", "big 1200"}));
  // A lone small tensor is not fused.
  EXPECT_EQ(layout(fusion::planBatches({request("x", allreduce(3))}, {1000, 1 << 20})),
            (Names{"x 12"}));
}

TEST(FusionPlannerTest, DirectTensorsRunAlone) {
  const std::vector<RequestPtr> ready = {
      request("a", allreduce(100)), request("direct", allreduce(250)),
      request("under", allreduce(249)), request("c", allreduce(1))};
  EXPECT_EQ(layout(fusion::planBatches(ready, {1 << 20, 1000})),
            (Names{"a+under+c*1400", "direct 1000"}));
}

TEST(FusionPlannerTest, DtypeOpModeAndKindNeverShareABatch) {
  const std::vector<RequestPtr> ready = {
      request("a", allreduce(10)),
      request("f64", allreduce(10, DataType::kFloat64)),
      request("avg", allreduce(10, DataType::kFloat32, ReduceOp::kAverage)),
      request("inv", allreduce(10, DataType::kFloat32, ReduceOp::kSum, Mode::kInvariant)),
      request("b", allreduce(10)),
      request("f64b", allreduce(10, DataType::kFloat64)),
      request("bcast", other(RequestKind::kBroadcast, 10)),
      request("gather", other(RequestKind::kAllgather, 10)),
      request("bcast2", other(RequestKind::kBroadcast, 10, 1)),
      request("zero", allreduce(0)),
      request("zero2", allreduce(0)),
      request("c", allreduce(10))};
  EXPECT_EQ(layout(fusion::planBatches(ready, {1 << 20, 1 << 20})),
            (Names{"a+b+c*120", "f64+f64b*160", "avg 40", "inv 40", "bcast 40", "gather 40",
                   "bcast2 40", "zero 0", "zero2 0"}));
}

TEST(FusionPlannerTest, DeviceRequestsFuseApartAndUpToTheThresholdAlone) {
  auto onDevice = [](fusion::Descriptor d) {
    d.device = true;
    return d;
  };
  const std::vector<RequestPtr> ready = {request("a", allreduce(100)),
                                         request("da", onDevice(allreduce(100))),
                                         request("direct", allreduce(250)),
                                         request("dbig", onDevice(allreduce(250))),
                                         request("b", allreduce(1)),
                                         request("db", onDevice(allreduce(1))),
                                         request("dover", onDevice(allreduce(400)))};
  // Host: under directBytes (1000 bytes) fused, `direct` alone; device: fused up to the
  // threshold (1500 bytes) whatever directBytes says, never with host requests.
  EXPECT_EQ(layout(fusion::planBatches(ready, {1500, 1000})),
            (Names{"a+b*404", "da+dbig+db*1404", "direct 1000", "dover 1600"}));
  fusion::PlanOptions bounded{1 << 20, 1000};
  bounded.deviceDirectBytes = 1000;
  EXPECT_EQ(layout(fusion::planBatches(ready, bounded)),
            (Names{"a+b*404", "da+db*404", "direct 1000", "dbig 1000", "dover 1600"}));
}

TEST(FusionPlannerTest, PlanIsAPureFunction) {
  std::vector<RequestPtr> ready;
  for (int i = 0; i < 40; ++i) {
    const DataType type = i % 3 == 0 ? DataType::kFloat16 : DataType::kFloat32;
    ready.push_back(request("t" + std::to_string(i), allreduce(1 + (i * 37) % 200, type)));
  }
  const fusion::PlanOptions options{1500, 700};
  const std::vector<Batch> first = fusion::planBatches(ready, options);
  const std::vector<Batch> second = fusion::planBatches(ready, options);
  EXPECT_EQ(layout(first), layout(second));
  EXPECT_LT(first.size(), ready.size());  // something was fused
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].requests, second[i].requests) << i;
}

}  // namespace
}  // namespace detcoll
