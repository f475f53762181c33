// collective/transport/record_board.h over the thread communicator's board: every rank reads
// every record of every exchange in place and no agreement message is sent; records another
// agreement's size fail every rank as mismatches and leave the ranks in step; small and large
// allreduces give the rank-order reference's bits and the message path's; a silent rank is named
// on every rank within the stall limit, with one text, and cannot complete a call afterwards; a
// notice fails every later exchange at once.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/agreement.h"
#include "collective/call_agreement.h"
#include "collective/collectives.h"
#include "collective/tags.h"
#include "collective/transport/record_board.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::Agreement;
using collective::CallAgreement;
using collective::kTagAgreement;
using collective::transport::Communicator;
using collective::transport::Patience;
using collective::transport::spawn;
using testing::exchangeInStep;
using Clock = std::chrono::steady_clock;

constexpr size_t kCapacity = CallAgreement::kRecordBytes;

void runOnBoard(int p, const std::function<void(Communicator&)>& fn) {
  const Status spawned = spawn(
      p,
      [&](Communicator& comm) {
        ASSERT_NE(comm.board(), nullptr);
        fn(comm);
      },
      true);
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
}

std::vector<char> recordOf(int p, int r, int call) {
  std::mt19937_64 gen(static_cast<uint64_t>(p) * 1000003 + r * 7919 + call * 31 + 11);
  size_t bytes = gen() % (kCapacity + 1);
  if (gen() % 4 == 0) bytes = gen() % 2 == 0 ? 0 : kCapacity;
  std::vector<char> record(bytes);
  for (char& c : record) c = static_cast<char>(gen());
  return record;
}

TEST(RecordBoardTest, EveryRankReadsEveryRecordInPlaceWithNoMessages) {
  for (int p : {1, 2, 3, 5, 9}) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    std::vector<std::string> failures(p);
    runOnBoard(p, [&](Communicator& comm) {
      const int r = comm.rank();
      Agreement agreement;
      const uint64_t before = comm.sentMessages(kTagAgreement);
      for (int call = 0; call < 40; ++call) {
        const std::vector<char> mine = recordOf(p, r, call);
        const Status s = agreement.exchangeRecords(comm, mine.data(), mine.size(), kCapacity, 0);
        if (!s.isOk()) {
          failures[r] = "call " + std::to_string(call) + ": " + s.toString();
          return;
        }
        for (int j = 0; j < p; ++j) {
          const std::vector<char> theirs = recordOf(p, j, call);
          if (agreement.record(j) != comm.board()->record(j)) {
            failures[r] = "call " + std::to_string(call) + ": rank " + std::to_string(j) +
                          "'s record was copied, not read in place";
            return;
          }
          if (agreement.recordBytes(j) != theirs.size() ||
              (!theirs.empty() &&
               std::memcmp(agreement.record(j), theirs.data(), theirs.size()) != 0)) {
            failures[r] = "call " + std::to_string(call) + ": rank " + std::to_string(j) +
                          "'s record differs";
            return;
          }
        }
        // Another agreement between two of this one's exchanges shares the board's sequence.
        if (call % 3 == 0) {
          const Status local = Status::ok();
          const Status agreed = collective::agreeOnStatus(comm, local);
          if (!agreed.isOk()) failures[r] = "status: " + agreed.toString();
        }
      }
      if (comm.sentMessages(kTagAgreement) != before) failures[r] = "agreement messages were sent";
    });
    for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

TEST(RecordBoardTest, RecordsOfAnotherAgreementFailEveryRankAndLeaveThemInStep) {
  for (int p : {2, 3, 6}) {
    for (int other : {0, p - 1}) {
      SCOPED_TRACE(std::to_string(p) + " ranks, rank " + std::to_string(other) + " elsewhere");
      testing::expectAnotherAgreementFailsEveryRank(p, other, true, {1.5f, -2.25f, 3e-7f});
    }
  }
}

// Rank r's leaves of a call: 1 + (r + seed) % 3 of them, so that ranks hold different numbers.
std::vector<std::vector<uint8_t>> leavesOf(int r, DataType type, size_t count, uint64_t seed) {
  std::vector<std::vector<uint8_t>> leaves;
  for (uint64_t l = 0; l < 1 + (r + seed) % 3; ++l) {
    leaves.push_back(testing::randomBuffer(type, count, seed * 131 + r * 17 + l));
  }
  return leaves;
}

// Every rank's allreduce (sum) of `count` values of `type` in `mode`, on a board or over
// messages: one leaf per rank, in place (recv is the send buffer), or several leaves per rank.
enum class Shape { kInPlace, kLeaves };
std::vector<std::vector<uint8_t>> allreduceEverywhere(int p, Mode mode, DataType type, size_t count,
                                                      uint64_t seed, Shape shape, bool board) {
  std::vector<std::vector<uint8_t>> outputs(p);
  const Status spawned = spawn(
      p,
      [&](Communicator& comm) {
        collective::Collectives collectives(comm);
        const int r = comm.rank();
        std::vector<std::vector<uint8_t>> leaves = leavesOf(r, type, count, seed);
        std::vector<const void*> pointers;
        for (const auto& leaf : leaves) pointers.push_back(leaf.data());
        Status s;
        const int dtype = static_cast<int>(type);
        const int sum = static_cast<int>(ReduceOp::kSum);
        if (shape == Shape::kInPlace) {
          outputs[r] = leaves[0];
          s = collectives.allreduce(mode, outputs[r].data(), outputs[r].data(), count, dtype, sum,
                                    "g");
        } else {
          outputs[r].assign(count * dataTypeSize(type), 0);
          s = collectives.allreduceLeaves(mode, pointers.data(), static_cast<int>(pointers.size()),
                                          outputs[r].data(), count, dtype, sum, "g");
        }
        if (!s.isOk()) outputs[r].clear();
      },
      board);
  EXPECT_TRUE(spawned.isOk()) << spawned.toString();
  return outputs;
}

TEST(RecordBoardTest, AllreducesGiveTheReferenceBitsAndTheMessagePathsBits) {
  // Inline calls (the agreement is the whole call) and one past the inline payload (the schedule's
  // messages after the agreement on the board); in place, and with several leaves per rank.
  for (int p : {2, 3, 5}) {
    for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
      for (size_t count : {size_t{1}, size_t{67}, size_t{1000}, size_t{9000}}) {
        for (Shape shape : {Shape::kInPlace, Shape::kLeaves}) {
          SCOPED_TRACE(std::to_string(p) + " ranks, " + dataTypeName(type) + ", " +
                       std::to_string(count) + (shape == Shape::kInPlace ? ", in place" : ""));
          const uint64_t seed = p * 1000 + count;
          // The ordered mode's definition: each rank's leaves folded in order, then the ranks'
          // sums in rank order.
          std::vector<std::vector<uint8_t>> sums;
          for (int r = 0; r < p; ++r) {
            std::vector<std::vector<uint8_t>> leaves = leavesOf(r, type, count, seed);
            if (shape == Shape::kInPlace) leaves.resize(1);
            std::vector<const void*> pointers;
            for (const auto& leaf : leaves) pointers.push_back(leaf.data());
            sums.emplace_back(count * dataTypeSize(type));
            testing::referenceFold(sums.back().data(), pointers, count, type, ReduceOp::kSum, 1);
          }
          std::vector<const void*> pointers;
          for (const auto& sum : sums) pointers.push_back(sum.data());
          std::vector<uint8_t> expected(count * dataTypeSize(type));
          testing::referenceFold(expected.data(), pointers, count, type, ReduceOp::kSum, p);
          const auto ordered =
              allreduceEverywhere(p, Mode::kOrdered, type, count, seed, shape, true);
          for (int r = 0; r < p; ++r) EXPECT_EQ(ordered[r], expected) << "ordered, rank " << r;
          const auto invariant =
              allreduceEverywhere(p, Mode::kInvariant, type, count, seed, shape, true);
          const auto messages =
              allreduceEverywhere(p, Mode::kInvariant, type, count, seed, shape, false);
          for (int r = 0; r < p; ++r) {
            EXPECT_FALSE(invariant[r].empty()) << "rank " << r;
            EXPECT_EQ(invariant[r], messages[r]) << "invariant, rank " << r;
          }
        }
      }
    }
  }
}

TEST(RecordBoardTest, ASilentRankIsNamedWithinTheLimitAndCannotCompleteACallLater) {
  constexpr int p = 3;
  constexpr int silent = 2;
  constexpr double kLimit = 0.3;
  std::vector<Status> status(p), later(p);
  std::vector<double> seconds(p);
  std::atomic<int> warnings{0};
  runOnBoard(p, [&](Communicator& comm) {
    const int r = comm.rank();
    Patience patience;
    patience.warnSeconds = 0.1;
    patience.limitSeconds = kLimit;
    patience.warn = [&](const std::string& text) {
      if (text.find("the record of rank 2") != std::string::npos) ++warnings;
    };
    comm.setPatience(patience);
    ASSERT_TRUE(exchangeInStep(comm).isOk());
    // The silent rank comes back long after the others gave up; its peers' records of this very
    // exchange are on the board.
    if (r == silent) std::this_thread::sleep_for(std::chrono::milliseconds(900));
    const Clock::time_point start = Clock::now();
    CallAgreement call;
    collective::CallDescription d;
    d.count = 1;
    const double payload = 0.1 * (r + 1);
    status[r] = call.agree(comm, d, &payload, sizeof payload);
    seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
    later[r] = exchangeInStep(comm);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kTimeout) << "rank " << r;
    EXPECT_EQ(status[r].message(), status[0].message()) << "rank " << r;
    EXPECT_EQ(later[r].message(), status[0].message()) << "rank " << r;
    EXPECT_LT(seconds[r], kLimit + 0.5) << "rank " << r;
  }
  EXPECT_NE(status[0].message().find("rank 2 stopped answering"), std::string::npos)
      << status[0].message();
  EXPECT_GE(warnings.load(), 2);
}

TEST(RecordBoardTest, ANoticeFailsEveryLaterExchangeAndTheFirstReasonStays) {
  for (int p : {2, 4}) {
    std::vector<Status> first(p), health(p), exchanged(p);
    std::atomic<int> done{0};
    runOnBoard(p, [&](Communicator& comm) {
      const int r = comm.rank();
      ASSERT_TRUE(exchangeInStep(comm).isOk());
      // Every rank has finished that exchange before one gives up (else it fails it: a call that
      // ends after a notice is no success).
      ++done;
      while (done.load() < p) std::this_thread::yield();
      if (r == p - 1) comm.abandon(Status::backend("rank " + std::to_string(r) + " gave up first"));
      // The rank that gave up posts nothing more: every other rank's exchange ends on the notice.
      first[r] = exchangeInStep(comm);
      // Every rank that gives up afterwards keeps the first reason.
      comm.abandon(Status::timeout("rank " + std::to_string(r) + " gave up later"));
      health[r] = comm.health();
      exchanged[r] = exchangeInStep(comm);
    });
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(first[r].code(), StatusCode::kBackend) << "rank " << r;
      EXPECT_EQ(first[r].message(), health[r].message()) << "rank " << r;
      EXPECT_EQ(health[r].code(), StatusCode::kBackend) << "rank " << r;
      EXPECT_EQ(health[r].message(), "rank " + std::to_string(p - 1) + " gave up first");
      EXPECT_EQ(exchanged[r].message(), health[r].message()) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace detcoll
