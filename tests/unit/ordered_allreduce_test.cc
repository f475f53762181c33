// The ordered allreduce (collective/allreduce.h) over the thread communicator: every rank's result
// has the bits of the rank-order reference fold, whatever the world size, length, offset, split or
// segment size.

#include "collective/allreduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "collective/ring_allreduce.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::kSentinel;
using testing::makeInputs;
using testing::pointers;
using testing::reference;
using testing::sameBits;
using testing::untouched;

using collective::transport::Communicator;
using testing::firstDifference;

// The ordered allreduce of one buffer per rank.
Status orderedAllreduce(Communicator& comm, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op, size_t segmentBytes = 1 << 20) {
  collective::AllreduceOptions o;
  o.mode = Mode::kOrdered;
  o.leaves = &send;
  o.recv = recv;
  o.count = count;
  o.type = type;
  o.op = op;
  o.segmentBytes = segmentBytes;
  return collective::allreduce(comm, o);
}

// Runs orderedAllreduce on inputs.size() ranks; returns each rank's output buffer (with a trailing
// guard region that must stay untouched) and the spawn status.
struct RunResult {
  std::vector<Buffer> outputs;
  std::vector<Status> statuses;
  Status spawnStatus;
};

constexpr size_t kGuard = 16;

RunResult runOrdered(const std::vector<Buffer>& inputs, size_t count, DataType type, ReduceOp op,
                     bool inPlace, size_t segmentBytes = 1 << 20) {
  const int p = static_cast<int>(inputs.size());
  const size_t bytes = count * dataTypeSize(type);
  RunResult result;
  result.outputs.assign(p, Buffer(bytes + kGuard, kSentinel));
  result.statuses.resize(p);
  result.spawnStatus = collective::transport::spawn(p, [&](Communicator& comm) {
    const int r = comm.rank();
    Buffer& out = result.outputs[r];
    if (inPlace) {
      std::copy(inputs[r].begin(), inputs[r].end(), out.begin());
      result.statuses[r] =
          orderedAllreduce(comm, out.data(), out.data(), count, type, op, segmentBytes);
    } else {
      result.statuses[r] =
          orderedAllreduce(comm, inputs[r].data(), out.data(), count, type, op, segmentBytes);
    }
  });
  return result;
}

void checkRun(const RunResult& run, const Buffer& expected, size_t count, DataType type) {
  ASSERT_TRUE(run.spawnStatus.isOk()) << run.spawnStatus.toString();
  const size_t bytes = count * dataTypeSize(type);
  for (size_t r = 0; r < run.outputs.size(); ++r) {
    ASSERT_TRUE(run.statuses[r].isOk()) << "rank " << r << ": " << run.statuses[r].toString();
    ASSERT_TRUE(sameBits(run.outputs[r].data(), expected.data(), count, type)) << "rank " << r;
    ASSERT_TRUE(std::all_of(run.outputs[r].begin() + bytes, run.outputs[r].end(),
                            [](uint8_t b) { return b == kSentinel; }))
        << "rank " << r << " wrote past the end of recv";
  }
}

// The Gloo-style grid: world size x element count x dtype, each run for every op, in place and
// out of place. The large count runs for float32/float16 and sum/average only, to stay fast.

using GridParam = std::tuple<int, size_t, DataType>;

class OrderedAllreduceGridTest : public ::testing::TestWithParam<GridParam> {};

TEST_P(OrderedAllreduceGridTest, EveryRankGetsTheReferenceBits) {
  const auto [p, count, type] = GetParam();
  const bool large = count > (1u << 16);
  const std::vector<Buffer> inputs = makeInputs(type, p, count, count + p);
  const std::vector<ReduceOp> ops =
      large ? std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kAverage}
            : std::vector<ReduceOp>(std::begin(testing::kAllOps), std::end(testing::kAllOps));
  for (ReduceOp op : ops) {
    const Buffer expected = reference(inputs, count, type, op);
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(reduceOpName(op) + (inPlace ? " in place" : " out of place"));
      checkRun(runOrdered(inputs, count, type, op, inPlace), expected, count, type);
    }
  }
}

std::string gridName(const ::testing::TestParamInfo<GridParam>& info) {
  const auto [p, count, type] = info.param;
  return "np" + std::to_string(p) + "_n" + std::to_string(count) + "_" + dataTypeName(type);
}

INSTANTIATE_TEST_SUITE_P(Small, OrderedAllreduceGridTest,
                         ::testing::Combine(::testing::Range(1, 6),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{7},
                                                              size_t{1023}),
                                            ::testing::ValuesIn(testing::kAllTypes)),
                         gridName);

INSTANTIATE_TEST_SUITE_P(
    Large, OrderedAllreduceGridTest,
    ::testing::Combine(::testing::Range(1, 6), ::testing::Values(size_t{(1u << 20) + 3}),
                       ::testing::Values(DataType::kFloat32, DataType::kFloat16)),
    gridName);

// Small segments: many pipeline rounds, uneven shards, a short last round ---------------------

using SegmentParam = std::tuple<int, size_t, DataType>;

class OrderedAllreduceSegmentTest : public ::testing::TestWithParam<SegmentParam> {};

TEST_P(OrderedAllreduceSegmentTest, ManyRoundsGiveTheReferenceBits) {
  const auto [p, segmentBytes, type] = GetParam();
  int variant = 0;
  for (size_t count : {size_t{1023}, size_t{4097}}) {
    const auto inputs = makeInputs(type, p, count, 31 * count + segmentBytes);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const bool inPlace = (variant++ % 2) == 1;
      SCOPED_TRACE("count=" + std::to_string(count) + " op=" + reduceOpName(op) +
                   (inPlace ? " in place" : " out of place"));
      checkRun(runOrdered(inputs, count, type, op, inPlace, segmentBytes),
               reference(inputs, count, type, op), count, type);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, OrderedAllreduceSegmentTest,
                         ::testing::Combine(::testing::Values(2, 3, 5),
                                            ::testing::Values(size_t{64}, size_t{100},
                                                              size_t{4096}),
                                            ::testing::ValuesIn(testing::kAllTypes)),
                         [](const ::testing::TestParamInfo<SegmentParam>& info) {
                           return "np" + std::to_string(std::get<0>(info.param)) + "_seg" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  dataTypeName(std::get<2>(info.param));
                         });

TEST(OrderedAllreduceTest, SegmentSmallerThanOneElement) {
  const size_t segmentBytes = 1;  // below one element of any dtype: the fewest elements a round
  for (DataType type : {DataType::kFloat64, DataType::kFloat16}) {
    const size_t count = 103;
    const auto inputs = makeInputs(type, 4, count, 8);
    checkRun(runOrdered(inputs, count, type, ReduceOp::kSum, true, segmentBytes),
             reference(inputs, count, type, ReduceOp::kSum), count, type);
  }
}

// Layout independence: whole buffer vs pieces at random offsets ------------------------------

TEST(OrderedAllreduceTest, SplittingTheBufferDoesNotChangeTheBits) {
  std::mt19937_64 rng(2024);
  for (int p : {3, 4}) {
    for (DataType type : testing::kAllTypes) {
      for (size_t segmentBytes : {size_t{1} << 20, size_t{256}}) {
        SCOPED_TRACE("np=" + std::to_string(p) + " " + dataTypeName(type) +
                     " segmentBytes=" + std::to_string(segmentBytes));
        const size_t count = 5003;
        const size_t es = dataTypeSize(type);
        const auto inputs = makeInputs(type, p, count, 17 * p + static_cast<int>(type));
        const RunResult whole =
            runOrdered(inputs, count, type, ReduceOp::kSum, false, segmentBytes);
        checkRun(whole, reference(inputs, count, type, ReduceOp::kSum), count, type);

        // Random cut points, the same on every rank; pieces reduced one after the other.
        std::vector<size_t> cuts = {0, count};
        for (int c = 0; c < 9; ++c) cuts.push_back(rng() % count);
        cuts.push_back(1);
        cuts.push_back(count - 1);
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::vector<Buffer> pieces(p, Buffer(count * es, kSentinel));
        Status spawned = collective::transport::spawn(p, [&](Communicator& comm) {
          const int r = comm.rank();
          for (size_t c = 0; c + 1 < cuts.size(); ++c) {
            const size_t begin = cuts[c];
            const size_t length = cuts[c + 1] - begin;
            const Status s =
                orderedAllreduce(comm, inputs[r].data() + begin * es, pieces[r].data() + begin * es,
                                 length, type, ReduceOp::kSum, segmentBytes);
            if (!s.isOk()) throw std::runtime_error(s.toString());
          }
        });
        ASSERT_TRUE(spawned.isOk()) << spawned.toString();
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(sameBits(pieces[r].data(), whole.outputs[r].data(), count, type))
              << "rank " << r << " reduced in " << cuts.size() - 1 << " pieces";
        }
      }
    }
  }
}

TEST(OrderedAllreduceTest, ConsecutiveCallsOfChangingSizes) {
  // One communicator, many calls: messages of one call must never be matched by another, and the
  // per-thread scratch must follow the size of each call.
  const int p = 4;
  const DataType type = DataType::kFloat32;
  const std::vector<size_t> counts = {5000, 3, 300000, 0, 7, 70000, 1};
  std::vector<std::vector<Buffer>> inputs;
  for (size_t i = 0; i < counts.size(); ++i)
    inputs.push_back(makeInputs(type, p, counts[i], 500 + i));
  std::vector<std::vector<Buffer>> outputs(counts.size(), std::vector<Buffer>(p));
  Status spawned = collective::transport::spawn(p, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t i = 0; i < counts.size(); ++i) {
      const size_t segmentBytes = i % 2 ? 512 : (1 << 20);
      Buffer& out = outputs[i][r];
      out.assign(counts[i] * 4, kSentinel);
      const Status s = orderedAllreduce(comm, inputs[i][r].data(), out.data(), counts[i], type,
                                        ReduceOp::kSum, segmentBytes);
      if (!s.isOk()) throw std::runtime_error(s.toString());
    }
  });
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
  for (size_t i = 0; i < counts.size(); ++i) {
    const Buffer expected = reference(inputs[i], counts[i], type, ReduceOp::kSum);
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(sameBits(outputs[i][r].data(), expected.data(), counts[i], type))
          << "call " << i << " rank " << r;
    }
  }
}

// Detection: the test data tells the ordered fold from a ring -------------------------------

TEST(OrderedAllreduceTest, TestDataDetectsReordering) {
  for (int p : {3, 4}) {
    SCOPED_TRACE("np=" + std::to_string(p));
    const DataType type = DataType::kFloat32;
    const size_t count = 1001;
    const auto inputs = makeInputs(type, p, count, 99 + p);
    const auto in = pointers(inputs);
    const Buffer ordered = reference(inputs, count, type, ReduceOp::kSum);
    Buffer rotated(count * 4);
    testing::rotatedFold(rotated.data(), in, count, type, ReduceOp::kSum, p, 1);
    EXPECT_GE(firstDifference(ordered.data(), rotated.data(), count, type), 0)
        << "referenceFold and rotatedFold(start=1) agree on every element: the data cannot "
           "detect reordering";

    std::vector<Buffer> ring(p, Buffer(count * 4));
    std::vector<Buffer> mine(p, Buffer(count * 4));
    Status spawned = collective::transport::spawn(p, [&](Communicator& comm) {
      const int r = comm.rank();
      Status s = collective::ringAllreduce(
          comm, {inputs[r].data(), ring[r].data(), count, type, ReduceOp::kSum});
      if (!s.isOk()) throw std::runtime_error(s.toString());
      s = orderedAllreduce(comm, inputs[r].data(), mine[r].data(), count, type, ReduceOp::kSum);
      if (!s.isOk()) throw std::runtime_error(s.toString());
    });
    ASSERT_TRUE(spawned.isOk()) << spawned.toString();
    for (int r = 0; r < p; ++r) {
      EXPECT_TRUE(sameBits(mine[r].data(), ordered.data(), count, type)) << "rank " << r;
      EXPECT_GE(firstDifference(ring[r].data(), ordered.data(), count, type), 0)
          << "rank " << r << ": the ring result equals the ordered one";
      EXPECT_TRUE(sameBits(ring[r].data(), ring[0].data(), count, type))
          << "ring results differ between rank 0 and rank " << r;
    }
    // The ring sums chunk c starting at rank c (ring_allreduce.h): chunk c of its result is
    // rotatedFold(start=c) of that chunk.
    for (int c = 0; c < p; ++c) {
      const size_t begin = count / p * c + std::min<size_t>(c, count % p);
      const size_t end = count / p * (c + 1) + std::min<size_t>(c + 1, count % p);
      std::vector<const void*> chunk;
      for (const Buffer& b : inputs) chunk.push_back(b.data() + begin * 4);
      Buffer expected((end - begin) * 4);
      testing::rotatedFold(expected.data(), chunk, end - begin, type, ReduceOp::kSum, p, c);
      EXPECT_TRUE(sameBits(ring[0].data() + begin * 4, expected.data(), end - begin, type))
          << "chunk " << c;
    }
  }
}

// float16 and bfloat16 accumulate in float and round once, so random data hardly ever shows the
// fold order for them. Cancelling data does: per element, one rank holds +2^e, the next 2^(e-24)
// (a tie when added to 2^e in float) and the next -2^e; the other ranks hold zeros. The rank-order
// fold and every rotation of it then disagree on every element where the big value comes first.
std::vector<Buffer> cancellingInputs(DataType type, int p, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Buffer> inputs(p, Buffer(count * 2, 0));
  const int lowest = type == DataType::kFloat16 ? 11 : 8;
  const int highest = type == DataType::kFloat16 ? 15 : 20;
  auto bits = [&](int exponent, bool negative) -> uint16_t {
    if (type == DataType::kFloat16) {
      return static_cast<uint16_t>((negative ? 0x8000 : 0) | ((exponent + 15) << 10));
    }
    return static_cast<uint16_t>((negative ? 0x8000 : 0) | ((exponent + 127) << 7));
  };
  for (size_t i = 0; i < count; ++i) {
    const int e = lowest + static_cast<int>(rng() % (highest - lowest + 1));
    const bool negative = rng() & 1;
    const int first = static_cast<int>(rng() % p);
    const uint16_t values[3] = {bits(e, negative), bits(e - 24, rng() & 1), bits(e, !negative)};
    for (int k = 0; k < 3 && k < p; ++k) {
      std::memcpy(inputs[(first + k) % p].data() + 2 * i, &values[k], 2);
    }
  }
  return inputs;
}

TEST(OrderedAllreduceTest, HalfTypesFoldInRankOrderWithCancellingData) {
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    for (int p : {3, 4, 5}) {
      SCOPED_TRACE(dataTypeName(type) + " np=" + std::to_string(p));
      const size_t count = 4097;
      const auto inputs = cancellingInputs(type, p, count, 7 * p);
      const Buffer expected = reference(inputs, count, type, ReduceOp::kSum);
      for (int start = 1; start < p; ++start) {
        Buffer rotated(count * 2);
        testing::rotatedFold(rotated.data(), pointers(inputs), count, type, ReduceOp::kSum, p,
                             start);
        ASSERT_GE(firstDifference(rotated.data(), expected.data(), count, type), 0)
            << "the data does not detect a fold started at rank " << start;
      }
      checkRun(runOrdered(inputs, count, type, ReduceOp::kSum, false), expected, count, type);
      checkRun(runOrdered(inputs, count, type, ReduceOp::kSum, true, 64), expected, count, type);
    }
  }
}

}  // namespace
}  // namespace detcoll
