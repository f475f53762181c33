// The one local check of a call's arguments (collective/call_checks.h): the overlap and overflow
// rules, driven directly with addresses inside one array, so that every boundary is exact.

#include "collective/call_checks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace detcoll::collective {
namespace {

CallArguments allreduce(const void* const* leaves, int nleaves, void* recv, size_t count) {
  CallArguments c;
  c.kind = CallKind::kAllreduce;
  c.leaves = leaves;
  c.nleaves = nleaves;
  c.namedLeaves = nleaves > 1;
  c.recv = recv;
  c.count = count;
  c.dtype = static_cast<int>(DataType::kFloat32);
  c.op = static_cast<int>(ReduceOp::kSum);
  return c;
}

TEST(CallChecks, RecvStartingInsideTheLeafOrBeforeItIsRefusedBothWays) {
  std::vector<float> memory(64);
  const size_t count = 16;
  for (const int shift : {-15, -1, 1, 15}) {
    const void* leaf = memory.data() + 32;
    void* recv = memory.data() + 32 + shift;
    const Status status = checkCall(allreduce(&leaf, 1, recv, count), 0, 3);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "shift " << shift;
    EXPECT_NE(status.message().find("sendbuf and recvbuf overlap"), std::string::npos)
        << status.message();
  }
  // Adjacent and identical buffers are fine.
  for (const int shift : {-16, 0, 16}) {
    const void* leaf = memory.data() + 32;
    EXPECT_TRUE(checkCall(allreduce(&leaf, 1, memory.data() + 32 + shift, count), 0, 3).isOk())
        << "shift " << shift;
  }
}

TEST(CallChecks, EveryLeafIsCheckedForOverlapAndNamed) {
  std::vector<float> memory(256);
  const size_t count = 16;
  for (int bad = 0; bad < 3; ++bad) {
    const void* leaves[3] = {memory.data(), memory.data() + 64, memory.data() + 128};
    void* recv = memory.data() + 192;
    leaves[bad] = memory.data() + 192 - 8;  // its second half is recv's first half
    const Status status = checkCall(allreduce(leaves, 3, recv, count), 1, 3);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("leaves[" + std::to_string(bad) + "] and recvbuf overlap"),
              std::string::npos)
        << status.message();
  }
}

TEST(CallChecks, AllgatherCountOverflowCountsEveryRanksSlot) {
  std::vector<float> memory(8);
  CallArguments c;
  c.kind = CallKind::kAllgather;
  c.send = memory.data();
  c.recv = memory.data() + 4;
  c.dtype = static_cast<int>(DataType::kFloat32);
  // count * 4 bytes fits, count * 4 bytes * 3 ranks does not.
  c.count = SIZE_MAX / 4 / 2;
  const Status status = checkCall(c, 0, 3);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("overflows"), std::string::npos) << status.message();
  // Just below the bound, the size is no complaint.
  c.count = SIZE_MAX / 4 / 3 - 1;
  const Status fits = checkCall(c, 0, 3);
  EXPECT_EQ(fits.message().find("overflows"), std::string::npos) << fits.message();
}

// ---- reducescatter and alltoall: counts, one per rank ------------------------------------------

CallArguments reduceScatter(const void* send, void* recv, const std::vector<uint64_t>& blocks) {
  CallArguments c;
  c.kind = CallKind::kReducescatter;
  c.send = send;
  c.recv = recv;
  c.counts = blocks.data();
  c.ncounts = blocks.size();
  for (uint64_t b : blocks) c.count += b;
  c.dtype = static_cast<int>(DataType::kFloat32);
  c.op = static_cast<int>(ReduceOp::kSum);
  return c;
}

CallArguments alltoall(const void* send, void* recv, const std::vector<uint64_t>& sendCounts,
                       const std::vector<uint64_t>& recvCounts) {
  CallArguments c;
  c.kind = CallKind::kAlltoall;
  c.send = send;
  c.recv = recv;
  c.counts = sendCounts.data();
  c.recvCounts = recvCounts.data();
  c.ncounts = sendCounts.size();
  c.dtype = static_cast<int>(DataType::kFloat32);
  return c;
}

void expectRefused(const Status& status, const std::string& needle) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.toString();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << status.message();
}

TEST(CallChecks, ReducescatterAcceptsGoodCalls) {
  std::vector<float> memory(64);
  const std::vector<uint64_t> blocks = {3, 0, 5};
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(checkCall(reduceScatter(memory.data(), memory.data() + 8, blocks), rank, 3).isOk());
  }
  // Rank 1's block is empty: its recvbuf may be null, or anywhere.
  EXPECT_TRUE(checkCall(reduceScatter(memory.data(), nullptr, blocks), 1, 3).isOk());
  EXPECT_TRUE(checkCall(reduceScatter(memory.data(), memory.data() + 2, blocks), 1, 3).isOk());
  // Nothing at all: null buffers are fine.
  EXPECT_TRUE(checkCall(reduceScatter(nullptr, nullptr, {0, 0, 0}), 2, 3).isOk());
}

TEST(CallChecks, ReducescatterCountsOfTheWrongLength) {
  std::vector<float> memory(64);
  expectRefused(checkCall(reduceScatter(memory.data(), memory.data() + 32, {4, 4}), 0, 3),
                "counts has 2 entries; it needs one for each of the 3 ranks");
  expectRefused(checkCall(reduceScatter(memory.data(), memory.data() + 32, {4, 4, 4, 4}), 0, 3),
                "counts has 4 entries; it needs one for each of the 3 ranks");
  CallArguments none = reduceScatter(memory.data(), memory.data() + 32, {});
  none.counts = nullptr;
  expectRefused(checkCall(none, 0, 3), "counts has no entries");
}

TEST(CallChecks, ReducescatterCountsWhoseSumOverflows) {
  std::vector<float> memory(64);
  // Their sum wraps to 8, the count a caller adding them in 64 bits would pass.
  const uint64_t big = uint64_t{1} << 63;
  const std::vector<uint64_t> blocks = {big, big, 8};
  ASSERT_EQ(reduceScatter(nullptr, nullptr, blocks).count, 8u);
  expectRefused(checkCall(reduceScatter(memory.data(), memory.data() + 32, blocks), 0, 3),
                "counts sum to more elements than a buffer can hold");
  // One count alone too large for a buffer.
  expectRefused(
      checkCall(reduceScatter(memory.data(), memory.data() + 32, {SIZE_MAX / 2, 1, 1}), 1, 3),
      "overflow");
}

TEST(CallChecks, ReducescatterNullBuffersWithElements) {
  std::vector<float> memory(64);
  expectRefused(checkCall(reduceScatter(nullptr, memory.data(), {2, 3, 4}), 0, 3),
                "sendbuf is null while count is 9");
  expectRefused(checkCall(reduceScatter(memory.data(), nullptr, {2, 3, 4}), 2, 3),
                "recvbuf is null while this rank's block has 4 elements");
}

TEST(CallChecks, ReducescatterOverlapAnywhereIsRefused) {
  std::vector<float> memory(64);
  const std::vector<uint64_t> blocks = {4, 4, 4};  // send: 12 floats, recv: 4
  for (const int at : {-3, 0, 4, 8, 11}) {
    expectRefused(
        checkCall(reduceScatter(memory.data() + 16, memory.data() + 16 + at, blocks), 1, 3),
        "sendbuf and recvbuf overlap");
  }
  // Even the rank's own slice of sendbuf: in place is not supported.
  expectRefused(checkCall(reduceScatter(memory.data(), memory.data() + 4, blocks), 1, 3),
                "sendbuf and recvbuf overlap");
  // Adjacent on either side is fine.
  for (const int at : {-4, 12}) {
    EXPECT_TRUE(
        checkCall(reduceScatter(memory.data() + 16, memory.data() + 16 + at, blocks), 1, 3).isOk())
        << at;
  }
}

TEST(CallChecks, ReducescatterUnknownOp) {
  std::vector<float> memory(64);
  CallArguments c = reduceScatter(memory.data(), memory.data() + 32, {1, 1, 1});
  c.op = 99;
  expectRefused(checkCall(c, 0, 3), "unknown reduction op 99");
}

TEST(CallChecks, AlltoallAcceptsGoodCalls) {
  std::vector<float> memory(64);
  EXPECT_TRUE(
      checkCall(alltoall(memory.data(), memory.data() + 32, {1, 0, 2}, {0, 3, 4}), 1, 3).isOk());
  EXPECT_TRUE(checkCall(alltoall(nullptr, memory.data(), {0, 0, 0}, {1, 1, 1}), 0, 3).isOk());
  EXPECT_TRUE(checkCall(alltoall(memory.data(), nullptr, {1, 1, 1}, {0, 0, 0}), 0, 3).isOk());
}

TEST(CallChecks, AlltoallCountsOfTheWrongLength) {
  std::vector<float> memory(64);
  const std::vector<uint64_t> two = {1, 1}, three = {1, 1, 1};
  expectRefused(checkCall(alltoall(memory.data(), memory.data() + 32, two, two), 0, 3),
                "send counts has 2 entries; it needs one for each of the 3 ranks");
  CallArguments c = alltoall(memory.data(), memory.data() + 32, three, three);
  c.recvCounts = nullptr;
  expectRefused(checkCall(c, 0, 3), "receive counts has no entries");
}

TEST(CallChecks, AlltoallCountsWhoseSumOverflows) {
  std::vector<float> memory(64);
  const uint64_t half = SIZE_MAX / 4 / 2 + 1;
  expectRefused(
      checkCall(alltoall(memory.data(), memory.data() + 32, {half, half, 1}, {1, 1, 1}), 0, 3),
      "send counts sum to more elements than a buffer can hold");
  expectRefused(
      checkCall(alltoall(memory.data(), memory.data() + 32, {1, 1, 1}, {1, half, half}), 0, 3),
      "receive counts sum to more elements than a buffer can hold");
}

TEST(CallChecks, AlltoallNullBuffersWithElements) {
  std::vector<float> memory(64);
  expectRefused(checkCall(alltoall(nullptr, memory.data(), {1, 2, 3}, {1, 1, 1}), 0, 3),
                "sendbuf is null while count is 6");
  expectRefused(checkCall(alltoall(memory.data(), nullptr, {1, 1, 1}, {4, 0, 1}), 0, 3),
                "recvbuf is null while count is 5");
}

TEST(CallChecks, AlltoallOverlapIsRefused) {
  std::vector<float> memory(64);
  // send: 6 floats at 16, recv: 6 floats.
  for (const int at : {11, 16, 21}) {
    expectRefused(
        checkCall(alltoall(memory.data() + 16, memory.data() + at, {1, 2, 3}, {3, 2, 1}), 0, 3),
        "sendbuf and recvbuf overlap");
  }
  for (const int at : {10, 22}) {
    EXPECT_TRUE(
        checkCall(alltoall(memory.data() + 16, memory.data() + at, {1, 2, 3}, {3, 2, 1}), 0, 3)
            .isOk())
        << at;
  }
}

}  // namespace
}  // namespace detcoll::collective
