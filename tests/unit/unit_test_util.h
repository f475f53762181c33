#pragma once

// Helpers shared by the unit tests: random inputs per rank, the reference fold over them, ranks as
// threads running the checked collectives, agreements left in step after a failure, and leaves
// placed over ranks (bit comparison with a described failure and the data of the serial run tests:
// tests/support/wide_bits.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collective/agreement.h"
#include "collective/call_agreement.h"
#include "collective/collectives.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/reference.h"
#include "tests/support/wide_bits.h"

namespace detcoll::testing {

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
  const Status spawned =
      collective::transport::spawn(p, [&](collective::transport::Communicator& comm) {
        collective::Collectives collectives(comm);
        fn(collectives, comm.rank());
      });
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
}

// Runs fn on p ranks as threads, each with its rank's communicator. A run that outlives 60 s
// aborts, naming the test: a hang fails instead of blocking.
inline void runRanks(int p, const std::function<void(collective::transport::Communicator&)>& fn) {
  std::promise<Status> result;
  std::future<Status> done = result.get_future();
  std::thread ranks([&] { result.set_value(collective::transport::spawn(p, fn)); });
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "%s: still running after 60 s (hung)\n",
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::abort();
  }
  ranks.join();
  const Status s = done.get();
  ASSERT_TRUE(s.isOk()) << s.toString();
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

// An 8-byte exchange that every rank makes after a failure: ok when the ranks are still in step
// (every rank gets every rank's value), else the exchange's failure.
inline Status exchangeInStep(collective::transport::Communicator& comm) {
  collective::Agreement agreement;
  const uint64_t value = 42 + comm.rank();
  Status s = agreement.exchangeRecords(comm, &value, sizeof value, sizeof value, sizeof value);
  for (int j = 0; j < comm.size() && s.isOk(); ++j) {
    uint64_t got = 0;
    std::memcpy(&got, agreement.record(j), sizeof got);
    if (got != 42u + j) s = Status::internal("rank " + std::to_string(j) + "'s value differs");
  }
  return s;
}

// p ranks, on a record board or over messages: rank `other` agrees on a status (1-byte records)
// while the others make a call agreement with `payload` inline. Every rank must fail as a mismatch
// naming different agreements, and an exchange in step afterwards must succeed everywhere.
inline void expectAnotherAgreementFailsEveryRank(int p, int other, bool board,
                                                 const std::vector<float>& payload) {
  std::vector<Status> status(p), after(p);
  const Status spawned = collective::transport::spawn(
      p,
      [&](collective::transport::Communicator& comm) {
        ASSERT_EQ(comm.board() != nullptr, board);
        const int r = comm.rank();
        if (r == other) {
          status[r] = collective::agreeOnStatus(comm, Status::ok());
        } else {
          collective::CallAgreement call;
          collective::CallDescription d;
          d.count = payload.size();
          status[r] = call.agree(comm, d, payload.data(), payload.size() * sizeof(float));
        }
        after[r] = exchangeInStep(comm);
      },
      board);
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kMismatch)
        << "rank " << r << ": " << status[r].toString();
    EXPECT_NE(status[r].message().find("different agreements"), std::string::npos)
        << "rank " << r << ": " << status[r].message();
    EXPECT_TRUE(after[r].isOk()) << "rank " << r << " afterwards: " << after[r].toString();
  }
}

// Which leaves (indices into the list of all leaves) each rank holds, in its order.
using Placement = std::vector<std::vector<int>>;

// Leaves handed out in `order`, rank r taking the next spread[r].
inline Placement place(const std::vector<int>& spread, const std::vector<int>& order) {
  Placement placement;
  size_t next = 0;
  for (int n : spread) {
    placement.emplace_back(order.begin() + next, order.begin() + next + n);
    next += n;
  }
  return placement;
}

// 0, 1, ..., n - 1.
inline std::vector<int> identity(int n) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// The number of leaves of every rank.
inline int totalOf(const Placement& placement) {
  int n = 0;
  for (const auto& leaves : placement) n += static_cast<int>(leaves.size());
  return n;
}

// "placement [0,1] [2]" for two ranks holding leaves 0 and 1, and 2.
inline std::string describe(const Placement& placement) {
  std::string text = "placement";
  for (const auto& leaves : placement) {
    text += " [";
    for (size_t k = 0; k < leaves.size(); ++k) text += (k ? "," : "") + std::to_string(leaves[k]);
    text += "]";
  }
  return text;
}

}  // namespace detcoll::testing
