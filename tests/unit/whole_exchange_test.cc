// The whole exchange (collective/allreduce.h, modes::wholeExchange): every contribution to every
// rank in one round, then every rank folds all P. Forced on and forced off on the same random,
// wide-range data, it gives the rank-order reference's bits in ordered mode and the MPFR
// reference's in invariant mode, on every rank, in place and out of place; the automatic limits
// choose it for a call of one round and the schedule past them, which the messages sent show.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "collective/agreement.h"
#include "collective/allreduce.h"
#include "collective/transport/record_board.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::AllreduceOptions;
using collective::transport::Communicator;
using testing::Buffer;
using testing::kSentinel;

struct Outcome {
  std::vector<Buffer> outputs;
  std::vector<Status> statuses;
  std::vector<uint64_t> messages;  // sent by each rank during the call
};

// One allreduce of each rank's inputs[r] (and, for ordered mode, a second leaf when `twoLeaves`).
// On a record board (`board`), the whole exchange goes through it where a contribution fits.
Outcome runAllreduce(const std::vector<Buffer>& inputs, size_t count, DataType type, ReduceOp op,
                     Mode mode, size_t wholeBytes, bool inPlace, bool twoLeaves = false,
                     bool board = false) {
  const int p = static_cast<int>(inputs.size()) / (twoLeaves ? 2 : 1);
  const size_t bytes = count * dataTypeSize(type);
  Outcome run;
  run.outputs.assign(p, Buffer(bytes + 16, kSentinel));
  run.statuses.resize(p);
  run.messages.resize(p);
  const Status spawned = collective::transport::spawn(
      p,
      [&](Communicator& comm) {
        const int r = comm.rank();
        Buffer& out = run.outputs[r];
        std::vector<const void*> leaves;
        if (twoLeaves) {
          leaves = {inputs[2 * r].data(), inputs[2 * r + 1].data()};
        } else if (inPlace) {
          std::copy(inputs[r].begin(), inputs[r].end(), out.begin());
          leaves = {out.data()};
        } else {
          leaves = {inputs[r].data()};
        }
        AllreduceOptions o;
        o.mode = mode;
        o.leaves = leaves.data();
        o.nleaves = static_cast<int>(leaves.size());
        o.totalLeaves = static_cast<int64_t>(inputs.size());
        o.recv = out.data();
        o.count = count;
        o.type = type;
        o.op = op;
        o.wholeExchangeBytes = wholeBytes;
        const uint64_t before = comm.sentMessages();
        run.statuses[r] = collective::allreduce(comm, o);
        run.messages[r] = comm.sentMessages() - before;
      },
      board);
  EXPECT_TRUE(spawned.isOk()) << spawned.toString();
  return run;
}

void expectBits(const Outcome& run, const Buffer& want, size_t count, DataType type,
                const std::string& what) {
  for (size_t r = 0; r < run.outputs.size(); ++r) {
    ASSERT_TRUE(run.statuses[r].isOk())
        << what << " rank " << r << ": " << run.statuses[r].toString();
    EXPECT_TRUE(testing::sameBits(run.outputs[r].data(), want.data(), count, type))
        << what << " rank " << r;
    const size_t bytes = count * dataTypeSize(type);
    EXPECT_TRUE(std::all_of(run.outputs[r].begin() + bytes, run.outputs[r].end(),
                            [](uint8_t b) { return b == kSentinel; }))
        << what << " rank " << r << " wrote past recv";
  }
}

constexpr size_t kForced = ~size_t{0} - 1;  // every call of one round takes the whole exchange

TEST(WholeExchangeTest, OrderedOnAndOffGiveTheReferenceBits) {
  for (int p : {2, 3, 5}) {
    for (DataType type : testing::kAllTypes) {
      for (size_t count : {size_t{1}, size_t{37}, size_t{5000}}) {
        const auto inputs = testing::makeInputs(type, p, count, p * 1000 + count);
        for (ReduceOp op : testing::kAllOps) {
          const Buffer want = testing::reference(inputs, count, type, op);
          for (size_t whole : {size_t{0}, kForced}) {
            for (bool inPlace : {false, true}) {
              const std::string what = "np " + std::to_string(p) + " " + dataTypeName(type) +
                                       " n " + std::to_string(count) + " " + reduceOpName(op) +
                                       (whole ? " whole" : " schedule") +
                                       (inPlace ? " in place" : "");
              expectBits(runAllreduce(inputs, count, type, op, Mode::kOrdered, whole, inPlace),
                         want, count, type, what);
            }
          }
        }
      }
    }
  }
}

TEST(WholeExchangeTest, OrderedRanksWithTwoLeavesFoldThemFirst) {
  const int p = 3;
  const size_t count = 999;
  const auto inputs = testing::makeInputs(DataType::kFloat32, 2 * p, count, 77);
  // The rank-order fold of each rank's leaves folded in order: ((l0 + l1) + (l2 + l3)) + ...
  std::vector<Buffer> contributions;
  for (int r = 0; r < p; ++r) {
    contributions.push_back(testing::reference({inputs[2 * r], inputs[2 * r + 1]}, count,
                                               DataType::kFloat32, ReduceOp::kSum));
  }
  const Buffer want = testing::reference(contributions, count, DataType::kFloat32, ReduceOp::kSum);
  for (size_t whole : {size_t{0}, kForced}) {
    expectBits(runAllreduce(inputs, count, DataType::kFloat32, ReduceOp::kSum, Mode::kOrdered,
                            whole, false, true),
               want, count, DataType::kFloat32, whole ? "whole" : "schedule");
  }
}

TEST(WholeExchangeTest, InvariantOnAndOffGiveTheExactReferenceBits) {
  for (int p : {2, 3, 4, 9}) {  // 9 leaves: past the one-pass kernels
    for (DataType type :
         {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
      const size_t count = 3001;
      const auto inputs = testing::makeInputs(type, p, count, p * 31);
      for (ReduceOp op : testing::kAllOps) {
        Buffer want(count * dataTypeSize(type) + 1);
        testing::exactInvariantReference(want.data(), testing::pointers(inputs), count, type, op);
        for (size_t whole : {size_t{0}, kForced}) {
          for (bool inPlace : {false, true}) {
            const std::string what = "np " + std::to_string(p) + " " + dataTypeName(type) + " " +
                                     reduceOpName(op) + (whole ? " whole" : " schedule") +
                                     (inPlace ? " in place" : "");
            expectBits(runAllreduce(inputs, count, type, op, Mode::kInvariant, whole, inPlace),
                       want, count, type, what);
          }
        }
      }
    }
  }
}

// On a record board the whole contributions go through it, no message sent, up to the board's
// capacity, and as messages past it: the reference's bits either way, ordered (rank order) and
// invariant (exact), in place, out of place and with two leaves a rank.
TEST(WholeExchangeTest, OnARecordBoardTheContributionsGoThroughItUpToItsCapacity) {
  using collective::transport::RecordBoard;
  for (int p : {2, 3, 5}) {
    const size_t capacity = RecordBoard::capacity(p);
    for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
      const size_t es = dataTypeSize(type);
      for (size_t count :
           {RecordBoard::kAgreementCapacity / es + 3, capacity / es, capacity / es + 1}) {
        const bool fits = count * es <= capacity;
        const auto inputs = testing::makeInputs(type, 2 * p, count, p * 7 + count);
        const std::vector<Buffer> one(inputs.begin(), inputs.begin() + p);
        const Buffer ordered = testing::reference(one, count, type, ReduceOp::kAverage);
        Buffer exact(count * es + 1);
        testing::exactInvariantReference(exact.data(), testing::pointers(one), count, type,
                                         ReduceOp::kAverage);
        for (bool inPlace : {false, true}) {
          const std::string what = "np " + std::to_string(p) + " " + dataTypeName(type) + " n " +
                                   std::to_string(count) + (inPlace ? " in place" : "");
          for (Mode mode : {Mode::kOrdered, Mode::kInvariant}) {
            const Outcome run = runAllreduce(one, count, type, ReduceOp::kAverage, mode, kForced,
                                             inPlace, false, true);
            expectBits(run, mode == Mode::kOrdered ? ordered : exact, count, type,
                       what + " " + modeName(mode));
            for (int r = 0; r < p; ++r) {
              EXPECT_EQ(run.messages[r], fits ? 0u : static_cast<uint64_t>(p - 1))
                  << what << " " << modeName(mode) << " rank " << r;
            }
          }
        }
        // Two leaves a rank: each rank's leaves folded first, then the ranks' in rank order.
        std::vector<Buffer> contributions;
        for (int r = 0; r < p; ++r) {
          contributions.push_back(
              testing::reference({inputs[2 * r], inputs[2 * r + 1]}, count, type, ReduceOp::kSum));
        }
        expectBits(runAllreduce(inputs, count, type, ReduceOp::kSum, Mode::kOrdered, kForced, false,
                                true, true),
                   testing::reference(contributions, count, type, ReduceOp::kSum), count, type,
                   "np " + std::to_string(p) + " two leaves a rank");
      }
    }
  }
}

// Many calls in a row on one board, of sizes within its capacity (through the board) and past it
// (as messages), ordered and invariant, with status agreements between: each call reads only its
// own records (both parities of the slots; the records of two exchanges before are never read
// again) and gives the reference's bits.
TEST(WholeExchangeTest, ManyCallsInARowOnOneBoardEachGiveTheReferenceBits) {
  using collective::transport::RecordBoard;
  for (int p : {2, 3}) {
    const size_t capacity = RecordBoard::capacity(p);
    struct Call {
      Mode mode;
      size_t count;  // float32 elements
      std::vector<Buffer> inputs;
      Buffer want;
    };
    std::vector<Call> calls;
    std::mt19937_64 gen(static_cast<uint64_t>(p) * 97);
    for (int c = 0; c < 24; ++c) {
      const size_t sizes[] = {1 + gen() % 500, capacity / 4 - gen() % 1000, capacity / 8,
                              capacity / 4 + 1 + gen() % 100};
      Call call;
      call.mode = c % 3 == 2 ? Mode::kInvariant : Mode::kOrdered;
      call.count = sizes[gen() % 4];
      call.inputs = testing::makeInputs(DataType::kFloat32, p, call.count, 1000 * p + c);
      if (call.mode == Mode::kOrdered) {
        call.want =
            testing::reference(call.inputs, call.count, DataType::kFloat32, ReduceOp::kAverage);
      } else {
        call.want.resize(call.count * 4 + 1);
        testing::exactInvariantReference(call.want.data(), testing::pointers(call.inputs),
                                         call.count, DataType::kFloat32, ReduceOp::kAverage);
      }
      calls.push_back(std::move(call));
    }
    std::vector<std::vector<std::string>> failures(p);
    const Status spawned = collective::transport::spawn(
        p,
        [&](Communicator& comm) {
          const int r = comm.rank();
          for (size_t c = 0; c < calls.size(); ++c) {
            const Call& call = calls[c];
            Buffer out = call.inputs[r];  // in place
            const void* leaf = out.data();
            AllreduceOptions o;
            o.mode = call.mode;
            o.leaves = &leaf;
            o.recv = out.data();
            o.count = call.count;
            o.type = DataType::kFloat32;
            o.op = ReduceOp::kAverage;
            o.wholeExchangeBytes = kForced;
            const Status s = collective::allreduce(comm, o);
            if (!s.isOk() ||
                !testing::sameBits(out.data(), call.want.data(), call.count, DataType::kFloat32)) {
              failures[r].push_back("call " + std::to_string(c) + " (" +
                                    std::to_string(call.count) + " floats): " + s.toString());
            }
            if (c % 5 == 4) {
              const Status agreed = collective::agreeOnStatus(comm, Status::ok());
              if (!agreed.isOk()) failures[r].push_back("agreement: " + agreed.toString());
            }
          }
        },
        true);
    ASSERT_TRUE(spawned.isOk()) << spawned.toString();
    for (int r = 0; r < p; ++r) {
      EXPECT_TRUE(failures[r].empty())
          << "np " << p << " rank " << r << ": " << failures[r].front();
    }
  }
}

// Ranks that post contributions of different sizes on the board (no agreed call does) all fail
// with one text, and stay in step.
TEST(WholeExchangeTest, DifferentSizesOnTheBoardFailEveryRankWithOneText) {
  const int p = 3;
  std::vector<Status> status(p), after(p);
  const Status spawned = collective::transport::spawn(
      p,
      [&](Communicator& comm) {
        const int r = comm.rank();
        const size_t count = r == 1 ? 5000 : 6000;
        Buffer in = testing::randomBuffer(DataType::kFloat32, count, r);
        const void* leaf = in.data();
        AllreduceOptions o;
        o.mode = Mode::kOrdered;
        o.leaves = &leaf;
        o.recv = in.data();
        o.count = count;
        o.type = DataType::kFloat32;
        o.op = ReduceOp::kSum;
        o.wholeExchangeBytes = kForced;
        status[r] = collective::allreduce(comm, o);
        after[r] = testing::exchangeInStep(comm);
      },
      true);
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kMismatch) << status[r].toString();
    EXPECT_EQ(status[r].message(),
              "rank 1 posted 20000 bytes to the allreduce's exchange, rank 0 24000")
        << "rank " << r;
    EXPECT_TRUE(after[r].isOk()) << "rank " << r << ": " << after[r].toString();
  }
}

TEST(WholeExchangeTest, TheAutomaticLimitsChooseByTheBytesEachRankReceives) {
  // One message to each other rank for the whole exchange; the schedule's one round sends two
  // (its reduce-scatter piece and its allgather piece).
  const int p = 3;
  struct Case {
    Mode mode;
    DataType type;
    size_t count;
    uint64_t messages;
  };
  const Case cases[] = {
      {Mode::kOrdered, DataType::kFloat32, 1000, p - 1},                     // 2 x 4000 B received
      {Mode::kOrdered, DataType::kFloat32, (1 << 19) / 4 + 1, 2 * (p - 1)},  // past 1 MiB
      {Mode::kInvariant, DataType::kFloat32, 1000, p - 1},
      {Mode::kInvariant, DataType::kFloat32, (1 << 17) / 4 + 1, 2 * (p - 1)},  // past 256 KiB
      {Mode::kOrdered, DataType::kFloat64, (1 << 19) / 8 + 1, p - 1},  // past 1 MiB, within 2
      {Mode::kInvariant, DataType::kBFloat16, (1 << 14) / 2 + 1, 2 * (p - 1)},  // past 32 KiB
      {Mode::kOrdered, DataType::kFloat16, 100, 2 * (p - 1)},  // float16: the schedule always
  };
  for (const Case& c : cases) {
    const auto inputs = testing::makeInputs(c.type, p, c.count, c.count);
    const Outcome run = runAllreduce(inputs, c.count, c.type, ReduceOp::kSum, c.mode,
                                     collective::kWholeExchangeAuto, false);
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(run.statuses[r].isOk()) << run.statuses[r].toString();
      EXPECT_EQ(run.messages[r], c.messages) << modeName(c.mode) << " " << dataTypeName(c.type)
                                             << " count " << c.count << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace detcoll
