// collective/collectives.h over the thread communicator, failures: bad input on one rank, or
// ranks disagreeing on the call, give the same status and message on every rank, leave the output
// untouched, and leave the objects usable for the next call.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "collective/collectives.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::expectSameFailureEverywhere;
using testing::kSentinel;
using testing::makeInputs;
using testing::reference;
using testing::runRanks;
using testing::sameBits;
using testing::untouched;

using collective::Collectives;
using collective::transport::Communicator;
using testing::randomBuffer;

// A failing allreduce: every rank calls `bad`, which must fail the same way everywhere and leave
// recv untouched; then every rank calls a good allreduce on the same Collectives, which must give
// the reference bits.
struct BadCall {
  size_t count = 10;
  int dtype = 0;
  int op = 0;
  Mode mode = Mode::kOrdered;
  const char* name = "grad";
  bool nullSend = false;
  int device = -1;  // the CUDA device the rank says its buffers are on
};

void checkAllreduceFailure(int p, const std::function<BadCall(int rank)>& bad, StatusCode code,
                           const std::vector<std::string>& needles) {
  const size_t goodCount = 777;
  const auto goodInputs = makeInputs(DataType::kFloat32, p, goodCount, 55);
  std::vector<Buffer> badInputs(p), badOut(p), goodOut(p, Buffer(goodCount * 4));
  std::vector<Status> badStatus(p), goodStatus(p);
  runRanks(p, [&](Collectives& c, int r) {
    const BadCall call = bad(r);
    const size_t es =
        isValidDataType(call.dtype) ? dataTypeSize(static_cast<DataType>(call.dtype)) : 8;
    badInputs[r] = Buffer(call.count * es, 0x11);
    badOut[r] = Buffer(call.count * es, kSentinel);
    badStatus[r] =
        c.allreduce(call.mode, call.nullSend ? nullptr : badInputs[r].data(), badOut[r].data(),
                    call.count, call.dtype, call.op, call.name, Status::ok(), call.device);
    goodStatus[r] = c.allreduce(Mode::kOrdered, goodInputs[r].data(), goodOut[r].data(), goodCount,
                                0, 0, "after");
  });
  expectSameFailureEverywhere(badStatus, code, needles);
  const Buffer expected = reference(goodInputs, goodCount, DataType::kFloat32, ReduceOp::kSum);
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(untouched(badOut[r])) << "rank " << r << ": recv written by a failed call";
    ASSERT_TRUE(goodStatus[r].isOk()) << "rank " << r << ": " << goodStatus[r].toString();
    EXPECT_TRUE(sameBits(goodOut[r].data(), expected.data(), goodCount, DataType::kFloat32))
        << "rank " << r << " after the failure";
  }
}

TEST(CollectivesErrorTest, NullSendbufOnOneRank) {
  for (size_t count : {size_t{10}, size_t{10000}}) {  // inline and large path
    SCOPED_TRACE("count=" + std::to_string(count));
    checkAllreduceFailure(3,
                          [&](int r) {
                            BadCall c;
                            c.count = count;
                            c.nullSend = r == 1;
                            return c;
                          },
                          StatusCode::kInvalidArgument, {"sendbuf is null", "rank 1"});
  }
}

TEST(CollectivesErrorTest, UnknownDtypeOnOneRank) {
  checkAllreduceFailure(3,
                        [](int r) {
                          BadCall c;
                          c.dtype = r == 2 ? 17 : 0;
                          return c;
                        },
                        StatusCode::kInvalidArgument, {"unknown dtype 17", "rank 2"});
}

TEST(CollectivesErrorTest, UnknownOpOnOneRank) {
  checkAllreduceFailure(4,
                        [](int r) {
                          BadCall c;
                          c.op = r == 0 ? 9 : 0;
                          return c;
                        },
                        StatusCode::kInvalidArgument, {"unknown reduction op 9", "rank 0"});
}

TEST(CollectivesErrorTest, UnknownOpAndDtypeEverywhere) {
  checkAllreduceFailure(3,
                        [](int) {
                          BadCall c;
                          c.op = -1;
                          return c;
                        },
                        StatusCode::kInvalidArgument, {"unknown reduction op -1"});
  checkAllreduceFailure(3,
                        [](int) {
                          BadCall c;
                          c.dtype = 6;
                          return c;
                        },
                        StatusCode::kInvalidArgument, {"unknown dtype 6"});
}

TEST(CollectivesErrorTest, MismatchedCounts) {
  for (size_t other : {size_t{11}, size_t{100000}, size_t{0}}) {
    SCOPED_TRACE("other count " + std::to_string(other));
    checkAllreduceFailure(3,
                          [&](int r) {
                            BadCall c;
                            c.count = r == 1 ? other : 10;
                            return c;
                          },
                          StatusCode::kMismatch, {"element count", "10", std::to_string(other)});
  }
}

// One rank passing device memory where the others pass host memory is a mismatch that names
// both; it is found by the agreement, before any buffer is read.
TEST(CollectivesErrorTest, MismatchedMemoryKinds) {
  for (size_t count : {size_t{10}, size_t{10000}}) {  // inline and large path
    SCOPED_TRACE("count=" + std::to_string(count));
    checkAllreduceFailure(3,
                          [&](int r) {
                            BadCall c;
                            c.count = count;
                            c.device = r == 1 ? 0 : -1;
                            return c;
                          },
                          StatusCode::kMismatch,
                          {"where the buffers live differs across ranks",
                           "host memory on ranks 0 and 2", "device memory on rank 1"});
  }
}

TEST(CollectivesErrorTest, MismatchedNames) {
  checkAllreduceFailure(3,
                        [](int r) {
                          BadCall c;
                          c.name = r == 2 ? "layer2.bias" : "layer1.weight";
                          return c;
                        },
                        StatusCode::kMismatch, {"tensor name", "layer1.weight", "layer2.bias"});
  // Names equal in the first 64 bytes still differ.
  static const std::string prefix(80, 'x');
  static const std::string a = prefix + "a", b = prefix + "b";
  checkAllreduceFailure(3,
                        [](int r) {
                          BadCall c;
                          c.name = r == 0 ? a.c_str() : b.c_str();
                          return c;
                        },
                        StatusCode::kMismatch, {"tensor name"});
  // A null name and a name.
  checkAllreduceFailure(2,
                        [](int r) {
                          BadCall c;
                          c.name = r == 0 ? nullptr : "w";
                          return c;
                        },
                        StatusCode::kMismatch, {"tensor name"});
}

TEST(CollectivesErrorTest, MismatchedDtypeOpAndMode) {
  checkAllreduceFailure(3,
                        [](int r) {
                          BadCall c;
                          c.dtype = r == 1 ? 1 : 0;
                          return c;
                        },
                        StatusCode::kMismatch, {"dtype", "float32", "float64"});
  checkAllreduceFailure(3,
                        [](int r) {
                          BadCall c;
                          c.op = r == 2 ? 3 : 0;
                          return c;
                        },
                        StatusCode::kMismatch, {"reduction op", "sum", "max"});
  checkAllreduceFailure(3,
                        [](int r) {
                          BadCall c;
                          c.mode = r == 0 ? Mode::kNative : Mode::kOrdered;
                          return c;
                        },
                        StatusCode::kMismatch, {"determinism mode", "native", "ordered"});
}

TEST(CollectivesErrorTest, PartiallyOverlappingBuffers) {
  const int p = 3;
  std::vector<Status> status(p);
  std::vector<Buffer> buffers(p, Buffer(64, kSentinel));
  runRanks(p, [&](Collectives& c, int r) {
    char* base = reinterpret_cast<char*>(buffers[r].data());
    // Rank 1 passes recv = send + 1 element: overlapping, not the same buffer.
    status[r] = c.allreduce(Mode::kOrdered, base, r == 1 ? base + 4 : base + 32, 4, 0, 0, "x");
  });
  expectSameFailureEverywhere(status, StatusCode::kInvalidArgument, {"overlap"});
}

TEST(CollectivesErrorTest, DifferentCallsOnDifferentRanks) {
  const int p = 3;
  std::vector<Status> status(p);
  std::vector<Buffer> buffers(p, Buffer(40, kSentinel));
  runRanks(p, [&](Collectives& c, int r) {
    if (r == 1) {
      status[r] = c.broadcast(buffers[r].data(), 10, 0, 0, "x");
    } else {
      status[r] = c.allreduce(Mode::kOrdered, buffers[r].data(), buffers[r].data(), 10, 0, 0, "x");
    }
  });
  expectSameFailureEverywhere(status, StatusCode::kMismatch, {"broadcast", "allreduce"});
  for (int r = 0; r < p; ++r) EXPECT_TRUE(untouched(buffers[r])) << "rank " << r;
}

TEST(CollectivesErrorTest, BroadcastRootOutOfRange) {
  const int p = 3;
  for (int badRoot : {3, -1, 100}) {
    for (bool everywhere : {true, false}) {
      SCOPED_TRACE("root " + std::to_string(badRoot) +
                   (everywhere ? " on every rank" : " on rank 2"));
      std::vector<Status> status(p), after(p);
      std::vector<Buffer> buffers(p, Buffer(400, kSentinel));
      const Buffer data = randomBuffer(DataType::kFloat32, 100, 1);
      std::vector<Buffer> second(p, Buffer(400, kSentinel));
      second[1] = data;
      runRanks(p, [&](Collectives& c, int r) {
        const int root = everywhere || r == 2 ? badRoot : 0;
        status[r] = c.broadcast(buffers[r].data(), 100, 0, root, "w");
        after[r] = c.broadcast(second[r].data(), 100, 0, 1, "w");
      });
      expectSameFailureEverywhere(status, StatusCode::kInvalidArgument,
                                  {"root " + std::to_string(badRoot)});
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(untouched(buffers[r])) << "rank " << r;
        ASSERT_TRUE(after[r].isOk()) << after[r].toString();
        EXPECT_TRUE(sameBits(second[r].data(), data.data(), 100, DataType::kFloat32));
      }
    }
  }
}

TEST(CollectivesErrorTest, BroadcastMismatches) {
  const int p = 3;
  std::vector<Status> roots(p), counts(p), nulls(p);
  std::vector<Buffer> buffers(p, Buffer(400, kSentinel));
  runRanks(p, [&](Collectives& c, int r) {
    roots[r] = c.broadcast(buffers[r].data(), 100, 0, r == 0 ? 1 : 0, "w");
    counts[r] = c.broadcast(buffers[r].data(), r == 2 ? 99 : 100, 0, 0, "w");
    nulls[r] = c.broadcast(r == 1 ? nullptr : buffers[r].data(), 100, 0, 0, "w");
  });
  expectSameFailureEverywhere(roots, StatusCode::kMismatch, {"root"});
  expectSameFailureEverywhere(counts, StatusCode::kMismatch, {"element count"});
  expectSameFailureEverywhere(nulls, StatusCode::kInvalidArgument, {"null", "rank 1"});
  for (int r = 0; r < p; ++r) EXPECT_TRUE(untouched(buffers[r])) << "rank " << r;
}

TEST(CollectivesErrorTest, AllgatherMismatchAndNull) {
  const int p = 3;
  std::vector<Status> counts(p), nulls(p), after(p);
  const auto inputs = makeInputs(DataType::kFloat32, p, 50, 9);
  std::vector<Buffer> out(p, Buffer(p * 200, kSentinel));
  runRanks(p, [&](Collectives& c, int r) {
    counts[r] = c.allgather(inputs[r].data(), out[r].data(), r == 0 ? 49 : 50, 0, "g");
    nulls[r] = c.allgather(inputs[r].data(), r == 2 ? nullptr : out[r].data(), 50, 0, "g");
    if (counts[r].isOk() || nulls[r].isOk()) return;
    after[r] = c.allgather(inputs[r].data(), out[r].data(), 50, 0, "g");
  });
  expectSameFailureEverywhere(counts, StatusCode::kMismatch, {"element count"});
  expectSameFailureEverywhere(nulls, StatusCode::kInvalidArgument, {"recvbuf is null", "rank 2"});
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(after[r].isOk()) << after[r].toString();
    for (int j = 0; j < p; ++j) {
      EXPECT_TRUE(sameBits(out[r].data() + j * 200, inputs[j].data(), 50, DataType::kFloat32));
    }
  }
}

TEST(CollectivesErrorTest, AgreeOnInit) {
  const int p = 3;
  std::vector<Status> failed(p), mode(p), ok(p);
  runRanks(p, [&](Collectives& c, int r) {
    failed[r] = c.agreeOnInit(Mode::kOrdered,
                              r == 1 ? Status::invalidArgument("bad variable X") : Status::ok());
    mode[r] = c.agreeOnInit(r == 2 ? Mode::kNative : Mode::kOrdered, Status::ok());
    ok[r] = c.agreeOnInit(Mode::kOrdered, Status::ok());
  });
  expectSameFailureEverywhere(failed, StatusCode::kInvalidArgument, {"bad variable X", "rank 1"});
  expectSameFailureEverywhere(mode, StatusCode::kMismatch, {"determinism mode"});
  for (int r = 0; r < p; ++r) EXPECT_TRUE(ok[r].isOk()) << ok[r].toString();
}

TEST(CollectivesErrorTest, PrecheckFailureReachesEveryRank) {
  const int p = 3;
  std::vector<Status> status(p);
  std::vector<Buffer> in(p, Buffer(40, 1)), out(p, Buffer(40, kSentinel));
  runRanks(p, [&](Collectives& c, int r) {
    const Status precheck =
        r == 2 ? Status::invalidArgument("sendbuf is device memory") : Status::ok();
    status[r] = c.allreduce(Mode::kOrdered, in[r].data(), out[r].data(), 10, 0, 0, "x", precheck);
  });
  expectSameFailureEverywhere(status, StatusCode::kInvalidArgument,
                              {"sendbuf is device memory", "rank 2"});
  for (int r = 0; r < p; ++r) EXPECT_TRUE(untouched(out[r])) << "rank " << r;
}

}  // namespace
}  // namespace detcoll
