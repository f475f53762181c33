// The reduce-scatter with ranks as threads (collective/reduce_scatter.h): for 1 to 5 ranks, every
// dtype, op and mode, blocks balanced, split as Horovod splits a tensor's rows, empty on some
// ranks, many segments long, and buffers at odd addresses. Each rank's block must be, bit for
// bit, its slice of collective::allreduce over the same inputs (ordered for ordered and native,
// invariant for invariant) and of an independent reference: a rank-order fold written below
// (ordered, native) or the MPFR reference of the invariant mode (tests/support/exact_reference.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collective/allreduce.h"
#include "collective/reduce_scatter.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"
#include "tests/support/wide_bits.h"

namespace detcoll {
namespace {

using collective::transport::Communicator;
using testing::Buffer;
using testing::sameBits;
using testing::Slab;

// ---- an ordered reference, written from scratch -------------------------------------------------

template <typename T>
T load(const void* data, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(void* data, size_t i, T v) {
  std::memcpy(static_cast<char*>(data) + i * sizeof(T), &v, sizeof(T));
}

float bf16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even on the 16 bits dropped (no NaN reaches here).
uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t lsb = (bits >> 16) & 1;
  return static_cast<uint16_t>((bits + 0x7fff + lsb) >> 16);
}

// Element i of a float dtype as float (exact for float32, float16 and bfloat16).
float asFloat(const void* data, size_t i, DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return static_cast<float>(load<_Float16>(data, i));
    case DataType::kBFloat16:
      return bf16ToFloat(load<uint16_t>(data, i));
    default:
      return load<float>(data, i);
  }
}

void storeFloat(void* data, size_t i, DataType type, float v) {
  switch (type) {
    case DataType::kFloat16:
      return store<_Float16>(data, i, static_cast<_Float16>(v));
    case DataType::kBFloat16:
      return store<uint16_t>(data, i, floatToBf16(v));
    default:
      return store<float>(data, i, v);
  }
}

// Min and max order -0 below +0; no NaN reaches here.
template <typename T>
T pick(T acc, T x, ReduceOp op) {
  if (acc == x) {
    const bool accNegative = std::signbit(static_cast<double>(acc));
    if (op == ReduceOp::kMin) return accNegative ? acc : x;
    return accNegative ? x : acc;
  }
  return op == ReduceOp::kMin ? std::min(acc, x) : std::max(acc, x);
}

// The left fold in rank order, in the accumulation type, rounded once to the dtype.
void orderedFold(void* out, const std::vector<const void*>& in, size_t count, DataType type,
                 ReduceOp op) {
  const int p = static_cast<int>(in.size());
  const bool picks = op == ReduceOp::kMin || op == ReduceOp::kMax;
  for (size_t i = 0; i < count; ++i) {
    switch (type) {
      case DataType::kFloat64: {
        double acc = load<double>(in[0], i);
        for (int r = 1; r < p; ++r) {
          const double x = load<double>(in[r], i);
          acc = picks ? pick(acc, x, op) : acc + x;
        }
        if (op == ReduceOp::kAverage) acc = acc / static_cast<double>(p);
        store<double>(out, i, acc);
        break;
      }
      case DataType::kInt32:
      case DataType::kInt64: {
        const bool wide = type == DataType::kInt64;
        auto at = [&](int r) {
          return wide ? load<int64_t>(in[r], i) : static_cast<int64_t>(load<int32_t>(in[r], i));
        };
        int64_t acc = at(0);
        for (int r = 1; r < p; ++r) {
          // Sums wrap in two's complement.
          acc =
              picks
                  ? pick(acc, at(r), op)
                  : static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(at(r)));
        }
        if (op == ReduceOp::kAverage) acc /= p;
        if (wide) {
          store<int64_t>(out, i, acc);
        } else {
          store<int32_t>(out, i, static_cast<int32_t>(static_cast<uint32_t>(acc)));
        }
        break;
      }
      default: {
        float acc = asFloat(in[0], i, type);
        for (int r = 1; r < p; ++r) {
          const float x = asFloat(in[r], i, type);
          acc = picks ? pick(acc, x, op) : acc + x;
        }
        if (op == ReduceOp::kAverage) acc = acc / static_cast<float>(p);
        storeFloat(out, i, type, acc);
      }
    }
  }
}

// ---- the cases ----------------------------------------------------------------------------------

constexpr int kRanks[] = {1, 2, 3, 4, 5};
constexpr Mode kModes[] = {Mode::kOrdered, Mode::kInvariant, Mode::kNative};

struct Layout {
  std::string name;
  std::vector<size_t> blocks;
  size_t segmentBytes = 1 << 20;
  size_t sendShift = 0;  // bytes past a 64-byte boundary
  size_t recvShift = 0;
  bool wide = false;  // inputs over the whole exponent range (wideLeaves), else randomBuffer
};

// Horovod's split of `rows` rows of `rowLength` elements: the first rows % p ranks take one more.
std::vector<size_t> horovodSplit(int p, size_t rows, size_t rowLength) {
  std::vector<size_t> blocks;
  for (int j = 0; j < p; ++j) {
    blocks.push_back((rows / p + (static_cast<size_t>(j) < rows % p ? 1 : 0)) * rowLength);
  }
  return blocks;
}

std::vector<Layout> layouts(int p, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<Layout> out;
  out.push_back({"balanced", std::vector<size_t>(p, 96)});
  out.push_back({"horovod rows", horovodSplit(p, 3 * p + 2, 7)});
  // Empty blocks on even ranks (every rank at p 1: nothing at all), odd sizes elsewhere.
  std::vector<size_t> empty;
  for (int j = 0; j < p; ++j) empty.push_back(j % 2 == 0 ? 0 : 1 + g() % 50);
  out.push_back({"empty blocks", empty});
  if (p > 1) {
    std::vector<size_t> one(p, 0);
    one[p - 1] = 77;
    out.push_back({"one block", one});
  }
  // Many segments: a segment of 48 bytes (rounded up to whole vectors of 16 bytes) and blocks of
  // hundreds of elements, uneven.
  std::vector<size_t> large;
  for (int j = 0; j < p; ++j) large.push_back(150 + g() % 400);
  Layout many{"many segments", large, 48};
  many.wide = true;
  out.push_back(many);
  // Buffers off their alignment, with many segments too.
  Layout odd{"unaligned", horovodSplit(p, 5 * p + 3, 13), 64, 1, 2};
  out.push_back(odd);
  Layout oddWide = odd;
  oddWide.name = "unaligned, wide, send 3 recv 0";
  oddWide.sendShift = 3;
  oddWide.recvShift = 0;
  oddWide.wide = true;
  out.push_back(oddWide);
  return out;
}

struct RankResult {
  Status reduceScatter;
  Status allreduce;
  Buffer block;
  Buffer all;
  bool guardsIntact = true;
  bool inputUntouched = true;
};

std::vector<RankResult> run(const std::vector<Buffer>& inputs, const Layout& layout, DataType type,
                            ReduceOp op, Mode mode) {
  const int p = static_cast<int>(inputs.size());
  const size_t es = dataTypeSize(type);
  size_t count = 0;
  for (size_t b : layout.blocks) count += b;
  std::vector<RankResult> results(p);
  const Status spawned = collective::transport::spawn(p, [&](Communicator& comm) {
    const int r = comm.rank();
    RankResult& res = results[r];
    Slab send(inputs[r], layout.sendShift);
    Slab recv(layout.blocks[r] * es, layout.recvShift);
    collective::ReduceScatterOptions o;
    o.mode = mode;
    o.send = send.data();
    o.recv = recv.data();
    o.blocks = layout.blocks;
    o.type = type;
    o.op = op;
    o.segmentBytes = layout.segmentBytes;
    res.reduceScatter = collective::reduceScatter(comm, o);
    res.block = recv.contents();
    res.guardsIntact = recv.guardsIntact() && send.guardsIntact();
    res.inputUntouched = send.contents() == inputs[r];
    // The allreduce of the same inputs: ordered stands for native, whose allreduce is MPI's.
    Buffer all(count * es);
    const void* leaf = send.data();
    collective::AllreduceOptions a;
    a.mode = mode == Mode::kNative ? Mode::kOrdered : mode;
    a.leaves = &leaf;
    a.recv = all.data();
    a.count = count;
    a.type = type;
    a.op = op;
    a.segmentBytes = layout.segmentBytes;
    res.allreduce = collective::allreduce(comm, a);
    res.all = all;
  });
  EXPECT_TRUE(spawned.isOk()) << spawned.toString();
  return results;
}

class ReduceScatterTest : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(ReduceScatterTest, BlocksAreTheAllreduceSlicesAndTheReference) {
  const auto [p, type] = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 1000 * p + static_cast<int>(type);
  for (const Layout& layout : layouts(p, seed)) {
    size_t count = 0;
    for (size_t b : layout.blocks) count += b;
    ++seed;
    std::vector<Buffer> inputs;
    if (layout.wide) {
      inputs = testing::wideLeaves(type, p, count, seed, false);
    } else {
      for (int r = 0; r < p; ++r)
        inputs.push_back(testing::randomBuffer(type, count, seed * 31 + r));
    }
    std::vector<const void*> in;
    for (const Buffer& b : inputs) in.push_back(b.data());
    for (ReduceOp op : testing::kAllOps) {
      Buffer ordered(count * es + 1), invariant(count * es + 1);
      orderedFold(ordered.data(), in, count, type, op);
      testing::exactInvariantReference(invariant.data(), in, count, type, op);
      for (Mode mode : kModes) {
        SCOPED_TRACE(layout.name + ", " + reduceOpName(op) + " " + modeName(mode) + ", " +
                     std::to_string(p) + " ranks");
        const std::vector<RankResult> results = run(inputs, layout, type, op, mode);
        const Buffer& want = mode == Mode::kInvariant ? invariant : ordered;
        size_t offset = 0;
        for (int r = 0; r < p; ++r) {
          const RankResult& res = results[r];
          const size_t n = layout.blocks[r];
          SCOPED_TRACE("rank " + std::to_string(r) + ", block of " + std::to_string(n) + " at " +
                       std::to_string(offset));
          ASSERT_TRUE(res.reduceScatter.isOk()) << res.reduceScatter.toString();
          ASSERT_TRUE(res.allreduce.isOk()) << res.allreduce.toString();
          EXPECT_TRUE(res.guardsIntact);
          EXPECT_TRUE(res.inputUntouched);
          EXPECT_TRUE(sameBits(res.block.data(), res.all.data() + offset * es, n, type))
              << "against the allreduce";
          EXPECT_TRUE(sameBits(res.block.data(), want.data() + offset * es, n, type))
              << "against the reference";
          offset += n;
        }
        if (HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndTypes, ReduceScatterTest,
                         ::testing::Combine(::testing::ValuesIn(kRanks),
                                            ::testing::ValuesIn(testing::kAllTypes)),
                         [](const ::testing::TestParamInfo<ReduceScatterTest::ParamType>& info) {
                           return "np" + std::to_string(std::get<0>(info.param)) + "_" +
                                  dataTypeName(std::get<1>(info.param));
                         });

// Integer-valued leaves whose sums are exact in the dtype: every order gives the exact sum, so the
// invariant mode must agree with the ordered one (a check that needs no exact arithmetic).
TEST(ReduceScatterTest, InvariantEqualsOrderedOnExactIntegers) {
  for (DataType type : testing::kFloatTypes) {
    for (int p : kRanks) {
      const std::vector<size_t> blocks = horovodSplit(p, 4 * p + 1, 9);
      size_t count = 0;
      for (size_t b : blocks) count += b;
      // |v| <= 64: a sum of 5 of them needs 9 bits, exact in every float dtype (bfloat16: 8).
      const std::vector<Buffer> inputs = testing::integerLeaves(type, p, count, 77 + p, 32);
      Layout layout{"integers", blocks, 64};
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
        SCOPED_TRACE(std::string(dataTypeName(type)) + " " + reduceOpName(op) + " at " +
                     std::to_string(p));
        const auto ordered = run(inputs, layout, type, op, Mode::kOrdered);
        const auto invariant = run(inputs, layout, type, op, Mode::kInvariant);
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(invariant[r].reduceScatter.isOk());
          EXPECT_TRUE(sameBits(invariant[r].block.data(), ordered[r].block.data(), blocks[r], type))
              << "rank " << r;
        }
      }
    }
  }
}

// Blocks that are not one per rank are the caller's error, reported, not run.
TEST(ReduceScatterTest, WrongNumberOfBlocksFails) {
  const Status spawned = collective::transport::spawn(3, [&](Communicator& comm) {
    float send[4] = {1, 2, 3, 4};
    float recv[4] = {};
    collective::ReduceScatterOptions o;
    o.send = send;
    o.recv = recv;
    o.blocks = {2, 2};
    const Status s = collective::reduceScatter(comm, o);
    EXPECT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("2 blocks over 3 ranks"), std::string::npos) << s.toString();
  });
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
}

}  // namespace
}  // namespace detcoll
