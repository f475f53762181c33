// The one local check of a call's arguments (collective/call_checks.h): the overlap and overflow
// rules, driven directly with addresses inside one array, so that every boundary is exact.

#include "collective/call_checks.h"

#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace
}  // namespace detcoll::collective
