// The alltoall with counts with ranks as threads (collective/alltoall.h): random uneven counts,
// zeros among them, for 1 to 5 ranks and several element sizes, against a reference that copies
// the blocks; counts that a sender does not send fail every rank with DETCOLL_ERR_MISMATCH
// naming both ranks and both counts; a failure found on one rank before the call fails every rank
// with its message. Every run is bounded in time: a hang aborts, naming the test.

#include "collective/alltoall.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "collective/transport/thread_communicator.h"
#include "tests/support/wide_bits.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::transport::Communicator;
using testing::Buffer;
using testing::runRanks;
using testing::Slab;

bool untouched(const Buffer& b) {
  for (uint8_t x : b) {
    if (x != testing::kSentinel) return false;
  }
  return true;
}

using Counts = std::vector<std::vector<uint64_t>>;  // counts[i][j]: elements rank i sends rank j

// Random counts, about a quarter of them 0.
Counts randomCounts(int p, std::mt19937_64& g) {
  Counts c(p, std::vector<uint64_t>(p));
  for (auto& row : c) {
    for (uint64_t& n : row) n = g() % 4 == 0 ? 0 : 1 + g() % 300;
  }
  return c;
}

std::vector<uint64_t> column(const Counts& c, int j) {
  std::vector<uint64_t> out;
  for (const auto& row : c) out.push_back(row[j]);
  return out;
}

uint64_t sum(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}

// Rank i's send buffer: byte k of its block for rank j is a function of (i, j, k).
Buffer sendBuffer(const Counts& c, int i, size_t es) {
  Buffer b;
  for (size_t j = 0; j < c.size(); ++j) {
    for (size_t k = 0; k < c[i][j] * es; ++k) {
      b.push_back(static_cast<uint8_t>(i * 71 + j * 13 + k * 7 + (k >> 8)));
    }
  }
  return b;
}

// What rank j receives: the blocks for it from every rank, in rank order.
Buffer expected(const Counts& c, int j, size_t es) {
  Buffer out;
  for (size_t i = 0; i < c.size(); ++i) {
    const Buffer send = sendBuffer(c, static_cast<int>(i), es);
    size_t offset = 0;
    for (int k = 0; k < j; ++k) offset += c[i][k] * es;
    out.insert(out.end(), send.begin() + offset, send.begin() + offset + c[i][j] * es);
  }
  return out;
}

class AlltoallTest : public ::testing::TestWithParam<int> {};

TEST_P(AlltoallTest, BlocksArriveInRankOrder) {
  const int p = GetParam();
  std::mt19937_64 g(4242 + p);
  for (size_t es : {1, 2, 4, 8, 12}) {
    for (int trial = 0; trial < 4; ++trial) {
      const Counts c = randomCounts(p, g);
      const size_t shift = trial % 3;  // buffers at odd addresses too
      SCOPED_TRACE("element of " + std::to_string(es) + " bytes, trial " + std::to_string(trial));
      std::vector<Status> status(p);
      std::vector<Buffer> got(p);
      std::vector<char> intact(p, 0);  // not vector<bool>: the ranks write it from threads
      runRanks(p, [&](Communicator& comm) {
        const int r = comm.rank();
        Slab send(sendBuffer(c, r, es), shift);
        Slab recv(sum(column(c, r)) * es, 2 - shift);
        collective::AlltoallOptions o;
        o.send = send.data();
        o.recv = recv.data();
        o.sendCounts = c[r];
        o.recvCounts = column(c, r);
        o.elementBytes = es;
        status[r] = collective::alltoall(comm, o);
        got[r] = recv.contents();
        intact[r] = recv.guardsIntact() && send.guardsIntact();
      });
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(status[r].isOk()) << "rank " << r << ": " << status[r].toString();
        EXPECT_EQ(got[r], expected(c, r, es)) << "rank " << r;
        EXPECT_TRUE(intact[r]) << "rank " << r;
      }
    }
  }
}

// Every count zero: nothing moves, nothing fails.
TEST_P(AlltoallTest, NothingToMove) {
  const int p = GetParam();
  std::vector<Status> status(p);
  runRanks(p, [&](Communicator& comm) {
    collective::AlltoallOptions o;
    o.sendCounts.assign(p, 0);
    o.recvCounts.assign(p, 0);
    o.elementBytes = 4;
    status[comm.rank()] = collective::alltoall(comm, o);
  });
  for (const Status& s : status) EXPECT_TRUE(s.isOk()) << s.toString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, AlltoallTest, ::testing::Values(1, 2, 3, 4, 5),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "np" + std::to_string(info.param);
                         });

// Every rank's status after an alltoall where `edit` changes rank `odd`'s options.
std::vector<Status> runEdited(int p, int odd,
                              const std::function<void(collective::AlltoallOptions&)>& edit) {
  std::mt19937_64 g(99 + p);
  Counts c = randomCounts(p, g);
  for (auto& row : c) {
    for (uint64_t& n : row) n += 1;  // none zero, so that every edit below is a change
  }
  std::vector<Status> status(p);
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    const Buffer send = sendBuffer(c, r, 4);
    Buffer recv(sum(column(c, r)) * 4 + 64, testing::kSentinel);
    collective::AlltoallOptions o;
    o.send = send.data();
    o.recv = recv.data();
    o.sendCounts = c[r];
    o.recvCounts = column(c, r);
    o.elementBytes = 4;
    if (r == odd) edit(o);
    status[r] = collective::alltoall(comm, o);
    // No data moved: the receive buffer is as it was.
    if (!status[r].isOk()) EXPECT_TRUE(untouched(recv)) << "rank " << r;
  });
  return status;
}

void expectSameFailure(const std::vector<Status>& status, StatusCode code,
                       const std::vector<std::string>& needles) {
  for (size_t r = 0; r < status.size(); ++r) {
    EXPECT_EQ(status[r].code(), code) << "rank " << r << ": " << status[r].toString();
    EXPECT_EQ(status[r].message(), status[0].message()) << "rank " << r;
    for (const std::string& needle : needles) {
      EXPECT_NE(status[r].message().find(needle), std::string::npos)
          << "rank " << r << ": '" << needle << "' not in: " << status[r].message();
    }
  }
}

TEST(AlltoallFailureTest, ReceiveCountThatTheSenderDoesNotSendFailsEveryRank) {
  for (int p : {2, 3, 4, 5}) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    const int odd = p - 1;
    uint64_t wanted = 0, sent = 0;
    const std::vector<Status> status = runEdited(p, odd, [&](collective::AlltoallOptions& o) {
      sent = o.recvCounts[0];
      o.recvCounts[0] += 5;  // expects 5 more from rank 0 than rank 0 sends
      wanted = o.recvCounts[0];
    });
    expectSameFailure(
        status, StatusCode::kMismatch,
        {"rank 0 sends " + std::to_string(sent) + " elements to rank " + std::to_string(odd),
         "expects " + std::to_string(wanted)});
  }
}

// A sender's count that its receiver does not expect is the same disagreement, seen from the
// receiver: it is named by the receiver's side.
TEST(AlltoallFailureTest, SendCountThatTheReceiverDoesNotExpectFailsEveryRank) {
  const int p = 3;
  uint64_t sent = 0, expectedCount = 0;
  const std::vector<Status> status = runEdited(p, 1, [&](collective::AlltoallOptions& o) {
    expectedCount = o.sendCounts[2];
    o.sendCounts[2] -= 1;
    sent = o.sendCounts[2];
  });
  expectSameFailure(status, StatusCode::kMismatch,
                    {"rank 1 sends " + std::to_string(sent) + " elements to rank 2",
                     "expects " + std::to_string(expectedCount)});
}

TEST(AlltoallFailureTest, LocalFailureFailsEveryRankWithItsMessage) {
  for (int p : {1, 2, 3, 5}) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    const std::vector<Status> status = runEdited(p, p / 2, [](collective::AlltoallOptions& o) {
      o.local = Status::invalidArgument("sendbuf is null while count is 7");
    });
    expectSameFailure(status, StatusCode::kInvalidArgument,
                      {"rank " + std::to_string(p / 2), "sendbuf is null while count is 7"});
  }
}

TEST(AlltoallFailureTest, CountsNotOnePerRankFailEveryRank) {
  const std::vector<Status> status =
      runEdited(4, 2, [](collective::AlltoallOptions& o) { o.recvCounts.pop_back(); });
  expectSameFailure(status, StatusCode::kInvalidArgument, {"rank 2", "4 send and receive counts"});
}

}  // namespace
}  // namespace detcoll
