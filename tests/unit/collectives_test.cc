// collective/collectives.h over the thread communicator: the checked entry points give reference
// bits on both the inline and the large path; broadcast and allgather move the right bytes; many
// calls in a row on one object stay in step. Failures: collectives_error_test.cc.

#include "collective/collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

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

using collective::CallAgreement;
using collective::Collectives;
using collective::transport::Communicator;
using testing::randomBuffer;

// Allreduce ----------------------------------------------------------------------------------

// Counts around the inline limit of the dtype (CallAgreement::kInlineBytes), and a large one.
std::vector<size_t> countsAroundInlineLimit(DataType type) {
  const size_t limit = CallAgreement::kInlineBytes / dataTypeSize(type);
  return {0, 1, 7, limit - 1, limit, limit + 1, 3 * limit + 5};
}

class CollectivesAllreduceTest : public ::testing::TestWithParam<DataType> {};

TEST_P(CollectivesAllreduceTest, InlineAndLargePathsGiveReferenceBits) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  for (int p : {1, 3, 4}) {
    for (size_t count : countsAroundInlineLimit(type)) {
      const auto inputs = makeInputs(type, p, count, count + p);
      for (ReduceOp op : testing::kAllOps) {
        const Buffer expected = reference(inputs, count, type, op);
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE("np=" + std::to_string(p) + " count=" + std::to_string(count) + " " +
                       reduceOpName(op) + (inPlace ? " in place" : ""));
          std::vector<Buffer> out(p, Buffer(count * es + 8, kSentinel));
          std::vector<Status> status(p);
          runRanks(p, [&](Collectives& c, int r) {
            if (inPlace) std::copy(inputs[r].begin(), inputs[r].end(), out[r].begin());
            const void* send = inPlace ? out[r].data() : inputs[r].data();
            status[r] = c.allreduce(Mode::kOrdered, send, out[r].data(), count,
                                    static_cast<int>(type), static_cast<int>(op), "grad");
          });
          for (int r = 0; r < p; ++r) {
            ASSERT_TRUE(status[r].isOk()) << "rank " << r << ": " << status[r].toString();
            ASSERT_TRUE(sameBits(out[r].data(), expected.data(), count, type)) << "rank " << r;
            ASSERT_TRUE(std::all_of(out[r].begin() + count * es, out[r].end(),
                                    [](uint8_t b) { return b == kSentinel; }))
                << "rank " << r << " wrote past the end";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CollectivesAllreduceTest,
                         ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

TEST(CollectivesTest, InlineAndLargePathsAgreeOnSplitBuffers) {
  // A fusion buffer reduced whole (large path, small segments) and tensor by tensor (mostly
  // inline) must give the same bits.
  const int p = 4;
  const DataType type = DataType::kFloat32;
  const std::vector<size_t> sizes = {1, 4095, 4096, 4097, 13, 30000, 2, 777};
  size_t count = 0;
  for (size_t s : sizes) count += s;
  const auto inputs = makeInputs(type, p, count, 4);
  std::vector<Buffer> whole(p, Buffer(count * 4, kSentinel));
  std::vector<Buffer> pieces(p, Buffer(count * 4, kSentinel));
  runRanks(p, [&](Collectives& c, int r) {
    c.setSegmentBytes(1000);
    Status s = c.allreduce(Mode::kOrdered, inputs[r].data(), whole[r].data(), count, 0, 0, "fused");
    if (!s.isOk()) throw std::runtime_error(s.toString());
    size_t offset = 0;
    for (size_t n : sizes) {
      s = c.allreduce(Mode::kOrdered, inputs[r].data() + offset * 4, pieces[r].data() + offset * 4,
                      n, 0, 0, nullptr);
      if (!s.isOk()) throw std::runtime_error(s.toString());
      offset += n;
    }
  });
  const Buffer expected = reference(inputs, count, type, ReduceOp::kSum);
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(sameBits(whole[r].data(), expected.data(), count, type)) << "rank " << r;
    EXPECT_TRUE(sameBits(pieces[r].data(), whole[r].data(), count, type)) << "rank " << r;
  }
}

TEST(CollectivesTest, NativeModeUsesTheRingAndAgreesAcrossRanks) {
  for (int p : {2, 3, 4}) {
    for (size_t count : {size_t{5}, size_t{1001}, size_t{20000}}) {
      SCOPED_TRACE("np=" + std::to_string(p) + " count=" + std::to_string(count));
      const auto f32 = makeInputs(DataType::kFloat32, p, count, 1);
      const auto i32 = makeInputs(DataType::kInt32, p, count, 2);
      const auto f64 = makeInputs(DataType::kFloat64, p, count, 3);
      std::vector<Buffer> outF32(p, Buffer(count * 4)), outI32(p, Buffer(count * 4)),
          outF64(p, Buffer(count * 8));
      runRanks(p, [&](Collectives& c, int r) {
        for (auto [in, out, type] : {std::make_tuple(&f32, &outF32, DataType::kFloat32),
                                     std::make_tuple(&i32, &outI32, DataType::kInt32),
                                     std::make_tuple(&f64, &outF64, DataType::kFloat64)}) {
          const Status s = c.allreduce(Mode::kNative, (*in)[r].data(), (*out)[r].data(), count,
                                       static_cast<int>(type), 0, "native");
          if (!s.isOk()) throw std::runtime_error(s.toString());
        }
      });
      for (int r = 1; r < p; ++r) {
        EXPECT_TRUE(sameBits(outF32[r].data(), outF32[0].data(), count, DataType::kFloat32))
            << "rank " << r;
      }
      // Integers are exact in any order.
      const Buffer i32Expected = reference(i32, count, DataType::kInt32, ReduceOp::kSum);
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(sameBits(outI32[r].data(), i32Expected.data(), count, DataType::kInt32));
      }
      // float32: the default native allreduce is the ring, chunk c folded from rank c.
      for (int c = 0; c < p; ++c) {
        const size_t begin = count / p * c + std::min<size_t>(c, count % p);
        const size_t end = count / p * (c + 1) + std::min<size_t>(c + 1, count % p);
        std::vector<const void*> chunk;
        for (const Buffer& b : f32) chunk.push_back(b.data() + begin * 4);
        Buffer expected((end - begin) * 4);
        testing::rotatedFold(expected.data(), chunk, end - begin, DataType::kFloat32,
                             ReduceOp::kSum, p, c);
        EXPECT_TRUE(sameBits(outF32[0].data() + begin * 4, expected.data(), end - begin,
                             DataType::kFloat32))
            << "chunk " << c;
      }
      // float64: close to the reference.
      const Buffer f64Expected = reference(f64, count, DataType::kFloat64, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        double got, want;
        std::memcpy(&got, outF64[p - 1].data() + 8 * i, 8);
        std::memcpy(&want, f64Expected.data() + 8 * i, 8);
        ASSERT_NEAR(got, want, 1e-9 * (1 << 20)) << "element " << i;
      }
    }
  }
}

// Broadcast and allgather --------------------------------------------------------------------

TEST(CollectivesTest, BroadcastFromEveryRoot) {
  for (int p : {1, 2, 3, 5}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{300001}}) {
      for (int root = 0; root < p; ++root) {
        SCOPED_TRACE("np=" + std::to_string(p) + " count=" + std::to_string(count) +
                     " root=" + std::to_string(root));
        const Buffer data = randomBuffer(DataType::kFloat32, count, root + 10 * p);
        std::vector<Buffer> buffers(p, Buffer(count * 4 + 8, kSentinel));
        std::copy(data.begin(), data.end(), buffers[root].begin());
        std::vector<Status> status(p);
        runRanks(p, [&](Collectives& c, int r) {
          status[r] = c.broadcast(buffers[r].data(), count, 0, root, "weights");
        });
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(status[r].isOk()) << "rank " << r << ": " << status[r].toString();
          ASSERT_TRUE(sameBits(buffers[r].data(), data.data(), count, DataType::kFloat32))
              << "rank " << r;
          ASSERT_TRUE(std::all_of(buffers[r].begin() + count * 4, buffers[r].end(),
                                  [](uint8_t b) { return b == kSentinel; }));
        }
      }
    }
  }
}

TEST(CollectivesTest, Allgather) {
  for (int p : {1, 3, 4}) {
    for (DataType type : {DataType::kFloat16, DataType::kFloat64, DataType::kInt32}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE("np=" + std::to_string(p) + " " + dataTypeName(type) +
                       " count=" + std::to_string(count) + (inPlace ? " in place" : ""));
          const size_t bytes = count * dataTypeSize(type);
          const auto inputs = makeInputs(type, p, count, 3 + p);
          std::vector<Buffer> out(p, Buffer(p * bytes + 8, kSentinel));
          std::vector<Status> status(p);
          runRanks(p, [&](Collectives& c, int r) {
            const void* send = inputs[r].data();
            if (inPlace) {
              std::copy(inputs[r].begin(), inputs[r].end(), out[r].begin() + r * bytes);
              send = out[r].data() + r * bytes;
            }
            status[r] = c.allgather(send, out[r].data(), count, static_cast<int>(type), "gather");
          });
          for (int r = 0; r < p; ++r) {
            ASSERT_TRUE(status[r].isOk()) << "rank " << r << ": " << status[r].toString();
            for (int j = 0; j < p; ++j) {
              ASSERT_TRUE(sameBits(out[r].data() + j * bytes, inputs[j].data(), count, type))
                  << "rank " << r << ", block of rank " << j;
            }
            ASSERT_TRUE(std::all_of(out[r].begin() + p * bytes, out[r].end(),
                                    [](uint8_t b) { return b == kSentinel; }));
          }
        }
      }
    }
  }
}

TEST(CollectivesTest, CountZeroWithNullBuffersSucceeds) {
  const int p = 3;
  std::vector<Status> ordered(p), native(p), bcast(p), gather(p);
  runRanks(p, [&](Collectives& c, int r) {
    ordered[r] = c.allreduce(Mode::kOrdered, nullptr, nullptr, 0, 2, 1, "empty");
    native[r] = c.allreduce(Mode::kNative, nullptr, nullptr, 0, 5, 3, "empty");
    bcast[r] = c.broadcast(nullptr, 0, 0, 2, "empty");
    gather[r] = c.allgather(nullptr, nullptr, 0, 1, "empty");
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(ordered[r].isOk()) << ordered[r].toString();
    EXPECT_TRUE(native[r].isOk()) << native[r].toString();
    EXPECT_TRUE(bcast[r].isOk()) << bcast[r].toString();
    EXPECT_TRUE(gather[r].isOk()) << gather[r].toString();
  }
}

TEST(CollectivesTest, MixedSequenceOfCallsOnOneObject) {
  // Many calls of every kind, sizes and paths on the same Collectives objects, some failing: no
  // message of one call may be taken by another, and every result must be right.
  const int p = 4;
  struct Step {
    int kind;  // 0 ordered allreduce, 1 native allreduce, 2 broadcast, 3 allgather, 4 failing
    DataType type;
    ReduceOp op;
    size_t count;
    int root;
  };
  std::mt19937_64 rng(31337);
  std::vector<Step> steps;
  for (int i = 0; i < 60; ++i) {
    const size_t sizes[] = {0, 1, 5, 1000, 4097, 9000, 70000};
    steps.push_back({static_cast<int>(rng() % 5), testing::kAllTypes[rng() % 6],
                     testing::kAllOps[rng() % 4], sizes[rng() % 7], static_cast<int>(rng() % p)});
  }
  std::vector<std::vector<Buffer>> inputs, outputs(steps.size(), std::vector<Buffer>(p));
  for (size_t i = 0; i < steps.size(); ++i) {
    // A failing step passes count + 1: its inputs hold that many, as the checks read them.
    inputs.push_back(makeInputs(steps[i].type, p, steps[i].count + (steps[i].kind == 4), 900 + i));
  }
  std::vector<std::vector<Status>> status(steps.size(), std::vector<Status>(p));
  runRanks(p, [&](Collectives& c, int r) {
    c.setSegmentBytes(2048);
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      const size_t bytes = s.count * dataTypeSize(s.type);
      const int dtype = static_cast<int>(s.type);
      Buffer& out = outputs[i][r];
      switch (s.kind) {
        case 0:
        case 1:
          out.assign(bytes, kSentinel);
          status[i][r] =
              c.allreduce(s.kind == 0 ? Mode::kOrdered : Mode::kNative, inputs[i][r].data(),
                          out.data(), s.count, dtype, static_cast<int>(s.op), "t");
          break;
        case 2:
          out = inputs[i][r];
          status[i][r] = c.broadcast(out.data(), s.count, dtype, s.root, "t");
          break;
        case 3:
          out.assign(p * bytes, kSentinel);
          status[i][r] = c.allgather(inputs[i][r].data(), out.data(), s.count, dtype, "t");
          break;
        default:
          out.assign(bytes + dataTypeSize(s.type), kSentinel);
          status[i][r] = c.allreduce(Mode::kOrdered, r == s.root ? nullptr : inputs[i][r].data(),
                                     out.data(), s.count + 1, dtype, static_cast<int>(s.op), "t");
          break;
      }
    }
  });
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const size_t bytes = s.count * dataTypeSize(s.type);
    SCOPED_TRACE("step " + std::to_string(i) + " kind " + std::to_string(s.kind) + " " +
                 dataTypeName(s.type) + " " + reduceOpName(s.op) + " count " +
                 std::to_string(s.count));
    if (s.kind == 4) {
      expectSameFailureEverywhere(status[i], StatusCode::kInvalidArgument, {"sendbuf is null"});
      for (int r = 0; r < p; ++r) EXPECT_TRUE(untouched(outputs[i][r]));
      continue;
    }
    for (int r = 0; r < p; ++r) ASSERT_TRUE(status[i][r].isOk()) << status[i][r].toString();
    if (s.kind == 0) {
      const Buffer expected = reference(inputs[i], s.count, s.type, s.op);
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(sameBits(outputs[i][r].data(), expected.data(), s.count, s.type));
      }
    } else if (s.kind == 1) {
      for (int r = 1; r < p; ++r) {
        EXPECT_TRUE(sameBits(outputs[i][r].data(), outputs[i][0].data(), s.count, s.type));
      }
    } else if (s.kind == 2) {
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(sameBits(outputs[i][r].data(), inputs[i][s.root].data(), s.count, s.type));
      }
    } else {
      for (int r = 0; r < p; ++r) {
        for (int j = 0; j < p; ++j) {
          EXPECT_TRUE(
              sameBits(outputs[i][r].data() + j * bytes, inputs[i][j].data(), s.count, s.type));
        }
      }
    }
  }
}

}  // namespace
}  // namespace detcoll
