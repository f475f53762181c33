// collective/agreement.h over the thread communicator at 1 to 17 ranks: the dissemination
// allgather gives every rank every record and every text byte for byte, in ceil(log2 P) messages
// per rank; a record too short or too long, a rank in another agreement, or a rank sending
// something else on the agreement's tag fails every rank cleanly, and the ranks stay in step.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "collective/agreement.h"
#include "collective/call_agreement.h"
#include "collective/collectives.h"
#include "collective/tags.h"
#include "collective/transport/thread_communicator.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::Agreement;
using collective::CallAgreement;
using collective::kTagAgreement;
using collective::transport::Communicator;
using collective::transport::spawn;
using testing::exchangeInStep;

constexpr int kMostRanks = 17;
constexpr size_t kCapacity = CallAgreement::kRecordBytes;  // a header and 16 KiB of payload

int rounds(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

// Rank r's record of exchange `call` in a world of p ranks: 0 to kCapacity bytes, the ends of the
// range often.
std::vector<char> recordOf(int p, int r, int call) {
  std::mt19937_64 gen(static_cast<uint64_t>(p) * 1000003 + r * 7919 + call * 31 + 5);
  size_t bytes = gen() % (kCapacity + 1);
  if (gen() % 5 == 0) bytes = gen() % 2 == 0 ? 0 : kCapacity;
  std::vector<char> record(bytes);
  for (char& c : record) c = static_cast<char>(gen());
  return record;
}

void run(int p, const std::function<void(Communicator&)>& fn) {
  const Status spawned = spawn(p, fn);
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
}

// The messages rank r sends in one exchange of a world of p ranks whose rank j sends bytesOf(j)
// bytes: per round of the dissemination (ceil(log2 P) rounds), one packet of the entries it
// forwards (a 16-byte header, then 8 bytes and the bytes per entry), in pieces of at most
// Agreement::kPieceBytes.
uint64_t messagesOf(int p, int r, const std::function<size_t(int)>& bytesOf) {
  uint64_t messages = 0;
  for (int distance = 1; distance < p; distance *= 2) {
    size_t packet = 16;
    for (int i = 0; i < std::min(distance, p - distance); ++i) packet += 8 + bytesOf((r + i) % p);
    messages += (packet + Agreement::kPieceBytes - 1) / Agreement::kPieceBytes;
  }
  return messages;
}

TEST(AgreementTest, EveryRankGetsEveryRecordInLog2PMessages) {
  for (int p = 1; p <= kMostRanks; ++p) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    std::vector<std::string> failures(p);
    run(p, [&](Communicator& comm) {
      const int r = comm.rank();
      Agreement agreement;  // one object over several exchanges, as the call agreement uses it
      for (int call = 0; call < 4; ++call) {
        const std::vector<char> mine = recordOf(p, r, call);
        const uint64_t before = comm.sentMessages(kTagAgreement);
        const Status s = agreement.exchangeRecords(comm, mine.data(), mine.size(), kCapacity, 0);
        const uint64_t sent = comm.sentMessages(kTagAgreement) - before;
        std::string& failure = failures[r];
        if (!s.isOk()) failure += "call " + std::to_string(call) + ": " + s.toString() + "; ";
        // One packet per round; in pieces where records of KiB make it long.
        const uint64_t expected =
            messagesOf(p, r, [&](int j) { return recordOf(p, j, call).size(); });
        if (sent != expected || sent < static_cast<uint64_t>(rounds(p))) {
          failure += "call " + std::to_string(call) + " sent " + std::to_string(sent) +
                     " messages, not " + std::to_string(expected) + "; ";
        }
        for (int j = 0; j < p && s.isOk(); ++j) {
          const std::vector<char> expected = recordOf(p, j, call);
          if (agreement.recordBytes(j) != expected.size() ||
              (!expected.empty() &&
               std::memcmp(agreement.record(j), expected.data(), expected.size()) != 0)) {
            failure += "call " + std::to_string(call) + ": rank " + std::to_string(j) +
                       "'s record differs; ";
          }
        }
      }
    });
    for (int r = 0; r < p; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

TEST(AgreementTest, EveryRankGetsEveryText) {
  auto textsOf = [](int p, int r) {
    std::mt19937_64 gen(static_cast<uint64_t>(p) * 131 + r);
    std::vector<std::string> texts(gen() % 4);
    for (std::string& text : texts) {
      text.resize(gen() % 7 == 0 ? 20000 : gen() % 300);
      for (char& c : text) c = static_cast<char>(gen());
    }
    return texts;
  };
  for (int p = 1; p <= kMostRanks; ++p) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    std::vector<Status> status(p);
    std::vector<std::vector<std::vector<std::string>>> all(p);
    std::vector<uint64_t> sent(p);
    run(p, [&](Communicator& comm) {
      const int r = comm.rank();
      Agreement agreement;
      const uint64_t before = comm.sentMessages(kTagAgreement);
      status[r] = agreement.exchangeTexts(comm, textsOf(p, r), &all[r]);
      sent[r] = comm.sentMessages(kTagAgreement) - before;
    });
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(status[r].isOk()) << "rank " << r << ": " << status[r].toString();
      // The sizes (one small packet per round), then the texts (in pieces where long).
      const uint64_t texts = messagesOf(p, r, [&](int j) {
        size_t blob = 0;
        for (const std::string& text : textsOf(p, j)) blob += 8 + text.size();
        return blob;
      });
      EXPECT_EQ(sent[r], static_cast<uint64_t>(rounds(p)) + texts) << "rank " << r;
      ASSERT_EQ(all[r].size(), static_cast<size_t>(p));
      for (int j = 0; j < p; ++j) EXPECT_EQ(all[r][j], textsOf(p, j)) << r << " from " << j;
    }
  }
}

// Every rank gets `code`, and a message that contains `needle`; then an exchange in step succeeds
// everywhere.
void expectEveryRankFails(const std::vector<Status>& status, const std::vector<Status>& after,
                          StatusCode code, const std::string& needle) {
  for (size_t r = 0; r < status.size(); ++r) {
    EXPECT_EQ(status[r].code(), code) << "rank " << r << ": " << status[r].toString();
    EXPECT_NE(status[r].message().find(needle), std::string::npos)
        << "rank " << r << ": '" << needle << "' not in: " << status[r].message();
    EXPECT_TRUE(after[r].isOk()) << "rank " << r << " afterwards: " << after[r].toString();
  }
}

TEST(AgreementTest, AShortRecordFailsEveryRankWithTheSameMessage) {
  for (int p = 2; p <= kMostRanks; ++p) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    const int shortRank = p / 2;
    std::vector<Status> status(p), after(p);
    run(p, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<char> mine(r == shortRank ? 8 : 32 + r, static_cast<char>(r));
      Agreement agreement;
      status[r] = agreement.exchangeRecords(comm, mine.data(), mine.size(), kCapacity, 32);
      after[r] = exchangeInStep(comm);
    });
    const std::string expected = "rank " + std::to_string(shortRank) +
                                 " sent a record of 8 bytes where this agreement's take at least "
                                 "32: the ranks are in different agreements";
    expectEveryRankFails(status, after, StatusCode::kMismatch, expected);
    for (int r = 0; r < p; ++r) EXPECT_EQ(status[r].message(), expected) << "rank " << r;
  }
}

TEST(AgreementTest, ARankInAnotherAgreementFailsEveryRank) {
  // One rank agrees on a status (1-byte records) while the others make a call agreement.
  for (int p = 2; p <= kMostRanks; ++p) {
    for (int other : {0, p - 1, p / 2}) {
      SCOPED_TRACE(std::to_string(p) + " ranks, rank " + std::to_string(other) + " elsewhere");
      testing::expectAnotherAgreementFailsEveryRank(p, other, false, {1, 2});
    }
  }
}

TEST(AgreementTest, OtherMessagesOnTheTagFailEveryOtherRankCleanly) {
  // One rank sends, round by round, bytes of another kind on the agreement's tag: nothing, a few
  // bytes, the right magic with a wrong count, lengths past the packet or past the capacity.
  std::vector<std::vector<uint8_t>> garbage = {
      {},
      {1, 2, 3},
      {0xE5, 0x1E, 0xA6, 0xDC, 7, 0, 0, 0},
      {0xE5, 0x1E, 0xA6, 0xDC, 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 1},
      {0xE5, 0x1E, 0xA6, 0xDC, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
      {0xE5, 0x1E, 0xA6, 0xDC, 0xFF, 0xFF, 0xFF, 0xFF},
  };
  std::mt19937_64 gen(7);
  for (int i = 0; i < 10; ++i) {
    std::vector<uint8_t> random(gen() % 600);
    for (uint8_t& b : random) b = static_cast<uint8_t>(gen());
    garbage.push_back(random);
  }
  for (int p = 2; p <= kMostRanks; ++p) {
    for (size_t g = 0; g < garbage.size(); ++g) {
      SCOPED_TRACE(std::to_string(p) + " ranks, message " + std::to_string(g));
      const int odd = (p + static_cast<int>(g)) % p;
      std::vector<Status> status(p), after(p);
      run(p, [&](Communicator& comm) {
        const int r = comm.rank();
        if (r == odd) {
          // The same pattern of messages as an exchange, so that the others are not left waiting.
          std::vector<char> sink(1 << 20);
          for (int k = 0; k < rounds(p); ++k) {
            auto recv = comm.irecv(sink.data(), sink.size(), (r + (1 << k)) % p, kTagAgreement);
            auto send = comm.isend(garbage[g].data(), garbage[g].size(), (r - (1 << k) + p) % p,
                                   kTagAgreement);
            (void)recv->wait();
            (void)send->wait();
          }
          status[r] = Status::mismatch("rank " + std::to_string(odd) + " (the odd one)");
        } else {
          Agreement agreement;
          const std::vector<char> mine(40, static_cast<char>(r));
          status[r] = agreement.exchangeRecords(comm, mine.data(), mine.size(), kCapacity, 32);
        }
        after[r] = exchangeInStep(comm);
      });
      expectEveryRankFails(status, after, StatusCode::kMismatch, "rank ");
      for (int r = 0; r < p; ++r) {
        if (r == odd) continue;
        EXPECT_NE(status[r].message().find("different agreements"), std::string::npos)
            << "rank " << r << ": " << status[r].message();
      }
    }
  }
}

TEST(AgreementTest, ASmallAllreduceSendsLog2PMessages) {
  for (int p = 1; p <= kMostRanks; ++p) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    std::vector<uint64_t> agreementSends(p), allSends(p);
    std::vector<Status> status(p);
    run(p, [&](Communicator& comm) {
      collective::Collectives c(comm);
      const float in[2] = {1.5f, 2.5f};
      float out[2] = {0, 0};
      const uint64_t agreementBefore = comm.sentMessages(kTagAgreement);
      const uint64_t allBefore = comm.sentMessages();
      status[comm.rank()] = c.allreduce(Mode::kOrdered, in, out, 2, 0, 0, "x");
      agreementSends[comm.rank()] = comm.sentMessages(kTagAgreement) - agreementBefore;
      allSends[comm.rank()] = comm.sentMessages() - allBefore;
    });
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(status[r].isOk()) << status[r].toString();
      EXPECT_EQ(agreementSends[r], static_cast<uint64_t>(rounds(p))) << "rank " << r;
      EXPECT_EQ(allSends[r], static_cast<uint64_t>(rounds(p))) << "the leaves travel inline";
    }
  }
}

}  // namespace
}  // namespace detcoll
