#pragma once

// Helpers shared by the unit tests: bit comparison with a described failure, random inputs per
// rank, the reference fold over them, and ranks as threads running the checked collectives.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective/collectives.h"
#include "collective/thread_communicator.h"
#include "tests/support/reference.h"

namespace detcoll::testing {

using Buffer = std::vector<uint8_t>;
// Fill of output buffers that must stay untouched.
constexpr uint8_t kSentinel = 0xa5;

// Bit equality with the first differing element described.
inline ::testing::AssertionResult sameBits(const void* actual, const void* expected, size_t count,
                                           DataType type) {
  const long i = firstDifference(actual, expected, count, type);
  if (i < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dataTypeName(type) << " element " << i << " of " << count
                                       << ": got " << describeElement(actual, i, type)
                                       << ", reference " << describeElement(expected, i, type);
}

inline bool untouched(const Buffer& b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == kSentinel; });
}

// One random buffer per rank (randomBuffer: non-integer, wide range), distinct per seed and rank.
inline std::vector<Buffer> makeInputs(DataType type, int p, size_t count, uint64_t seed) {
  std::vector<Buffer> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(randomBuffer(type, count, seed * 7919 + r));
  return inputs;
}

inline std::vector<const void*> pointers(const std::vector<Buffer>& buffers) {
  std::vector<const void*> out;
  for (const Buffer& b : buffers) out.push_back(b.data());
  return out;
}

// referenceFold of the inputs; the divisor of average defaults to the number of inputs.
inline Buffer reference(const std::vector<Buffer>& inputs, size_t count, DataType type, ReduceOp op,
                        int64_t divisor = 0) {
  Buffer out(count * dataTypeSize(type) + 1);
  referenceFold(out.data(), pointers(inputs), count, type, op,
                divisor > 0 ? divisor : static_cast<int64_t>(inputs.size()));
  return out;
}

// Runs fn on p ranks as threads, each with its own Collectives over the rank's communicator.
inline void runRanks(int p, const std::function<void(collective::Collectives&, int rank)>& fn) {
  const Status spawned = collective::spawn(p, [&](collective::Communicator& comm) {
    collective::Collectives collectives(comm);
    fn(collectives, comm.rank());
  });
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
}

// Every rank must return the same code and the same message, containing every `needle`.
inline void expectSameFailureEverywhere(const std::vector<Status>& status, StatusCode code,
                                        const std::vector<std::string>& needles) {
  for (size_t r = 0; r < status.size(); ++r) {
    EXPECT_EQ(status[r].code(), code) << "rank " << r << ": " << status[r].toString();
    EXPECT_EQ(status[r].message(), status[0].message()) << "rank " << r << " vs rank 0";
    for (const std::string& needle : needles) {
      EXPECT_NE(status[r].message().find(needle), std::string::npos)
          << "rank " << r << ": '" << needle << "' not in: " << status[r].message();
    }
  }
}

}  // namespace detcoll::testing
