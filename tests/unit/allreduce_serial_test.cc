// tests/support/serial_allreduce.h: the allreduce schedule (collective/allreduce.h) with the GPU's
// kernel bodies on the serial executor over a CommExchange, with ranks as threads on the thread
// communicator. Every rank's result has the bits of an independent reference computed on one
// thread (the rank-order fold for ordered, the local invariant reduction of every leaf for
// invariant) and the bits of the CPU path (collective::allreduce, the CPU's kernels) on the same
// inputs: every dtype and op, world sizes 1 to 5, lengths around
// the world size, small segments (many rounds, uneven shards) and large ones, one leaf per rank or
// several, in place and out of place, aligned and one element off. The invariant bits do not change
// when the leaves move between ranks or the world size changes. Native: exact on integer-valued
// data.

#include "tests/support/serial_allreduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "collective/allreduce.h"
#include "collective/barrier.h"
#include "collective/comm_exchange.h"
#include "collective/transport/thread_communicator.h"
#include "common/dtype.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "tests/support/reference.h"
#include "tests/support/wide_bits.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::transport::Communicator;
using testing::Buffer;
using testing::describe;
using testing::identity;
using testing::isFloatType;
using testing::place;
using testing::Placement;
using testing::pointersOf;
using testing::sameBits;
using testing::Slab;
using testing::totalOf;
using testing::wideLeaves;

// ---- references on one thread -------------------------------------------------------------------

// A rank's contribution in ordered and native mode: its leaf, or its leaves folded in order
// (summed for average).
Buffer contributionOf(const std::vector<Buffer>& leaves, const std::vector<int>& mine, size_t count,
                      DataType type, ReduceOp op) {
  if (mine.size() == 1) return leaves[mine[0]];
  std::vector<const void*> in;
  for (int l : mine) in.push_back(leaves[l].data());
  Buffer out(count * dataTypeSize(type));
  kernels::foldRankOrder(out.data(), in.data(), static_cast<int>(in.size()), count, type,
                         op == ReduceOp::kAverage ? ReduceOp::kSum : op, 1);
  return out;
}

// Ordered: the rank-order fold of the contributions; average divides by the number of leaves.
Buffer orderedReference(const std::vector<Buffer>& leaves, const Placement& placement, size_t count,
                        DataType type, ReduceOp op) {
  std::vector<Buffer> contributions;
  for (const auto& mine : placement) {
    contributions.push_back(contributionOf(leaves, mine, count, type, op));
  }
  Buffer out(count * dataTypeSize(type));
  kernels::foldRankOrder(out.data(), pointersOf(contributions).data(),
                         static_cast<int>(placement.size()), count, type, op, totalOf(placement));
  return out;
}

// Invariant: the local invariant reduction of every leaf of every rank.
Buffer invariantReference(const std::vector<Buffer>& leaves, const Placement& placement,
                          size_t count, DataType type, ReduceOp op) {
  std::vector<const void*> all;
  for (const auto& mine : placement) {
    for (int l : mine) all.push_back(leaves[l].data());
  }
  Buffer out(count * dataTypeSize(type));
  kernels::invariantReduceLocal(out.data(), all.data(), static_cast<int>(all.size()), count, type,
                                op);
  return out;
}

// ---- runs on ranks as threads -------------------------------------------------------------------

struct Options {
  size_t segmentBytes = 1 << 20;
  bool inPlace = false;  // recv is the rank's first leaf
  bool shifted = false;  // every buffer one element off a 16-byte boundary
  bool cpuPath = true;   // also run the CPU path on the same inputs
};

std::string describe(Mode mode, DataType type, ReduceOp op, size_t count,
                     const Placement& placement, const Options& o) {
  return modeName(mode) + " " + dataTypeName(type) + " " + reduceOpName(op) +
         " np=" + std::to_string(placement.size()) + " count=" + std::to_string(count) +
         " segmentBytes=" + std::to_string(o.segmentBytes) + " " + describe(placement) +
         (o.inPlace ? " in place" : " out of place") + (o.shifted ? " shifted" : " aligned");
}

struct RankOutcome {
  Status serial;
  Status cpu;
  Buffer serialOut;
  Buffer cpuOut;
  std::string damage;  // what was written that must not have been, "" if nothing
};

// One rank's leaves and recv buffer, copied from the test's leaves.
struct RankBuffers {
  std::vector<Slab> leaves;
  Slab recv;
  std::vector<const void*> pointers;

  RankBuffers(const std::vector<Buffer>& all, const std::vector<int>& mine, size_t count,
              DataType type, const Options& o)
      : recv(count * dataTypeSize(type), o.shifted ? dataTypeSize(type) : 0) {
    for (int l : mine) leaves.emplace_back(all[l], o.shifted ? dataTypeSize(type) : 0);
    for (const Slab& s : leaves) pointers.push_back(s.data());
    if (o.inPlace) {
      const Buffer& first = all[mine[0]];
      if (!first.empty()) std::memcpy(recv.data(), first.data(), first.size());
      pointers[0] = recv.data();
    }
  }

  // "" if every leaf (but an aliased one) holds its input and every guard is intact.
  std::string damage(const std::vector<Buffer>& all, const std::vector<int>& mine, const Options& o,
                     const char* path) const {
    std::string text;
    if (!recv.guardsIntact()) text += std::string(path) + " wrote outside recv; ";
    for (size_t k = 0; k < leaves.size(); ++k) {
      if (!leaves[k].guardsIntact()) text += std::string(path) + " wrote outside a leaf; ";
      if ((k > 0 || !o.inPlace) && leaves[k].contents() != all[mine[k]]) {
        text += std::string(path) + " changed leaf " + std::to_string(mine[k]) + "; ";
      }
    }
    return text;
  }
};

// Runs the serial run and then (after a barrier) the CPU path of `mode` on every rank.
std::vector<RankOutcome> runBoth(Mode mode, const std::vector<Buffer>& leaves,
                                 const Placement& placement, size_t count, DataType type,
                                 ReduceOp op, const Options& o) {
  const int p = static_cast<int>(placement.size());
  const int64_t total = totalOf(placement);
  std::vector<RankOutcome> outcome(p);
  const Status spawned = collective::transport::spawn(p, [&](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<int>& mine = placement[r];
    const int n = static_cast<int>(mine.size());
    RankOutcome& out = outcome[r];
    auto options = [&](RankBuffers& b) {
      collective::AllreduceOptions a;
      a.mode = mode;
      a.leaves = b.pointers.data();
      a.nleaves = n;
      a.recv = b.recv.data();
      a.count = count;
      a.type = type;
      a.op = op;
      a.totalLeaves = total;
      a.segmentBytes = o.segmentBytes;
      return a;
    };
    {
      RankBuffers b(leaves, mine, count, type, o);
      collective::CommExchange exchange(comm);
      out.serial = testing::serialAllreduce(exchange, options(b));
      out.serialOut = b.recv.contents();
      out.damage += b.damage(leaves, mine, o, "serial");
    }
    if (!o.cpuPath) return;
    const Status barrier = collective::barrier(comm);
    if (!barrier.isOk()) {
      out.cpu = barrier;
      return;
    }
    RankBuffers b(leaves, mine, count, type, o);
    out.cpu = collective::allreduce(comm, options(b));
    out.cpuOut = b.recv.contents();
    out.damage += b.damage(leaves, mine, o, "CPU path");
  });
  EXPECT_TRUE(spawned.isOk()) << spawned.toString();
  return outcome;
}

// Every rank: both paths succeeded, wrote nothing they must not, and hold `expected`.
void expectEverywhere(const std::vector<RankOutcome>& outcome, const Buffer& expected, size_t count,
                      DataType type, const Options& o) {
  for (size_t r = 0; r < outcome.size(); ++r) {
    const RankOutcome& x = outcome[r];
    ASSERT_TRUE(x.serial.isOk()) << "rank " << r << " serial: " << x.serial.toString();
    ASSERT_TRUE(x.damage.empty()) << "rank " << r << ": " << x.damage;
    ASSERT_TRUE(sameBits(x.serialOut.data(), expected.data(), count, type))
        << "rank " << r << ": serial vs reference";
    if (!o.cpuPath) continue;
    ASSERT_TRUE(x.cpu.isOk()) << "rank " << r << " CPU path: " << x.cpu.toString();
    ASSERT_TRUE(sameBits(x.serialOut.data(), x.cpuOut.data(), count, type))
        << "rank " << r << ": serial vs CPU path";
  }
}

Buffer referenceOf(Mode mode, const std::vector<Buffer>& leaves, const Placement& placement,
                   size_t count, DataType type, ReduceOp op) {
  return mode == Mode::kOrdered ? orderedReference(leaves, placement, count, type, op)
                                : invariantReference(leaves, placement, count, type, op);
}

// ---- the grid: ordered and invariant, every dtype, op, world size, length, segment --------------

using GridParam = std::tuple<Mode, DataType>;

class SerialAllreduceGridTest : public ::testing::TestWithParam<GridParam> {};

TEST_P(SerialAllreduceGridTest, EveryRankGetsTheReferenceAndCpuPathBits) {
  const auto [mode, type] = GetParam();
  uint64_t variant = 0;
  for (int p = 1; p <= 5; ++p) {
    std::vector<size_t> counts = {0, 1, 2, size_t(p - 1), size_t(p), size_t(p + 1), 1000};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    std::vector<std::vector<int>> spreads = {std::vector<int>(p, 1)};
    if (p > 1) {
      std::vector<int> growing(p);
      std::iota(growing.begin(), growing.end(), 1);  // rank r holds r + 1 leaves
      spreads.push_back(growing);
    }
    for (const auto& spread : spreads) {
      const Placement placement =
          place(spread, identity(std::accumulate(spread.begin(), spread.end(), 0)));
      for (size_t count : counts) {
        for (size_t segmentBytes : {size_t{64}, size_t{1000}, size_t{4096}, size_t{1} << 20}) {
          if (count < 1000 && (segmentBytes == 1000 || segmentBytes == 4096)) continue;
          ++variant;
          const bool specials = isFloatType(type) && variant % 3 == 1;
          const auto leaves =
              wideLeaves(type, totalOf(placement), count, variant * 1009 + p, specials);
          for (ReduceOp op : testing::kAllOps) {
            Options o;
            o.segmentBytes = segmentBytes;
            o.inPlace = (variant + static_cast<int>(op)) % 2 == 1;
            o.shifted = (variant + static_cast<int>(op)) % 3 == 2;
            SCOPED_TRACE(describe(mode, type, op, count, placement, o) +
                         (specials ? " with inf/NaN" : ""));
            const Buffer expected = referenceOf(mode, leaves, placement, count, type, op);
            expectEverywhere(runBoth(mode, leaves, placement, count, type, op, o), expected, count,
                             type, o);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

std::string gridName(const ::testing::TestParamInfo<GridParam>& info) {
  return modeName(std::get<0>(info.param)) + "_" + dataTypeName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(OrderedAndInvariant, SerialAllreduceGridTest,
                         ::testing::Combine(::testing::Values(Mode::kOrdered, Mode::kInvariant),
                                            ::testing::ValuesIn(testing::kAllTypes)),
                         gridName);

// A long buffer: many rounds of a mid-size segment, or few of a large one.
TEST_P(SerialAllreduceGridTest, LongBufferGetsTheReferenceAndCpuPathBits) {
  const auto [mode, type] = GetParam();
  const size_t count = 100003;
  uint64_t variant = 0;
  for (int p : {3, 5}) {
    const size_t segmentBytes = p == 3 ? 4096 : size_t{1} << 20;
    std::vector<int> spread(p, 1);
    if (p == 5) std::iota(spread.begin(), spread.end(), 1);
    const Placement placement =
        place(spread, identity(std::accumulate(spread.begin(), spread.end(), 0)));
    const auto leaves =
        wideLeaves(type, totalOf(placement), count, 4242 + p, isFloatType(type) && p == 5);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      Options o;
      o.segmentBytes = segmentBytes;
      o.inPlace = ++variant % 2 == 0;
      o.shifted = variant % 3 == 0;
      SCOPED_TRACE(describe(mode, type, op, count, placement, o));
      const Buffer expected = referenceOf(mode, leaves, placement, count, type, op);
      expectEverywhere(runBoth(mode, leaves, placement, count, type, op, o), expected, count, type,
                       o);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// ---- invariant: the bits of the multiset of leaves, wherever the leaves are ---------------------

class SerialAllreduceInvariantTest : public ::testing::TestWithParam<DataType> {};

TEST_P(SerialAllreduceInvariantTest, SameBitsWhateverTheWorldSizeAndSpread) {
  const DataType type = GetParam();
  // Five leaves on 1 to 5 ranks, spread and ordered in several ways (the last placement is one
  // leaf per rank: the pipeline that reduces the leaves themselves).
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> layouts = {
      {{5}, {0, 1, 2, 3, 4}},
      {{5}, {4, 2, 0, 3, 1}},
      {{2, 3}, {0, 1, 2, 3, 4}},
      {{4, 1}, {3, 0, 4, 1, 2}},
      {{1, 1, 3}, {2, 4, 0, 1, 3}},
      {{2, 2, 1}, {1, 3, 0, 4, 2}},
      {{1, 2, 1, 1}, {4, 3, 2, 1, 0}},
      {{1, 1, 1, 1, 1}, {0, 1, 2, 3, 4}},
      {{1, 1, 1, 1, 1}, {3, 1, 4, 0, 2}}};
  const size_t segments[] = {64, 1000, size_t{1} << 20};
  uint64_t variant = 0;
  for (size_t count : {size_t{33}, size_t{1000}}) {
    for (bool specials : {false, true}) {
      if (specials && !isFloatType(type)) continue;
      const auto leaves = wideLeaves(type, 5, count, count * 7 + specials, specials);
      for (ReduceOp op : testing::kAllOps) {
        const Buffer expected =
            invariantReference(leaves, Placement{std::vector<int>{0, 1, 2, 3, 4}}, count, type, op);
        Buffer first;
        for (const auto& [spread, order] : layouts) {
          const Placement placement = place(spread, order);
          Options o;
          o.segmentBytes = segments[variant % 3];
          o.inPlace = variant % 2 == 1;
          o.shifted = variant % 5 == 3;
          o.cpuPath = variant % 2 == 0;
          ++variant;
          SCOPED_TRACE(describe(Mode::kInvariant, type, op, count, placement, o) +
                       (specials ? " with inf/NaN" : ""));
          const auto outcome = runBoth(Mode::kInvariant, leaves, placement, count, type, op, o);
          expectEverywhere(outcome, expected, count, type, o);
          if (::testing::Test::HasFatalFailure()) return;
          if (first.empty()) first = outcome[0].serialOut;
          for (size_t r = 0; r < outcome.size(); ++r) {
            ASSERT_TRUE(sameBits(outcome[r].serialOut.data(), first.data(), count, type))
                << "rank " << r << " vs the first placement's rank 0";
          }
        }
      }
    }
  }
}

TEST(SerialAllreduceDataTest, TheDataSeesTheFoldOrder) {
  // The five leaves above are sensitive to the order of a float32 or float64 fold: where the
  // invariant results agree across placements, the ordered ones do not. (float16 and bfloat16
  // fold five leaves in float, nearly always exactly, and integers are exact in any order.)
  for (DataType type : {DataType::kFloat32, DataType::kFloat64}) {
    const size_t count = 1000;
    const auto leaves = wideLeaves(type, 5, count, count * 7, false);
    const Buffer a = orderedReference(leaves, place({1, 1, 1, 1, 1}, {0, 1, 2, 3, 4}), count, type,
                                      ReduceOp::kSum);
    const Buffer b = orderedReference(leaves, place({1, 1, 1, 1, 1}, {3, 1, 4, 0, 2}), count, type,
                                      ReduceOp::kSum);
    EXPECT_FALSE(sameBits(a.data(), b.data(), count, type))
        << dataTypeName(type) << ": the test data does not tell one fold order from another";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SerialAllreduceInvariantTest,
                         ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

// ---- native: nothing promised but the arithmetic on exact data ----------------------------------

class SerialAllreduceNativeTest : public ::testing::TestWithParam<DataType> {};

TEST_P(SerialAllreduceNativeTest, ExactOnIntegerValuedDataAndAverageDivides) {
  const DataType type = GetParam();
  const size_t es = dataTypeSize(type);
  uint64_t seed = 99 + 1000 * static_cast<uint64_t>(type);
  for (int p = 1; p <= 5; ++p) {
    std::vector<int> growing(p);
    std::iota(growing.begin(), growing.end(), 1);
    for (const auto& spread : {std::vector<int>(p, 1), growing}) {
      const Placement placement =
          place(spread, identity(std::accumulate(spread.begin(), spread.end(), 0)));
      const int total = totalOf(placement);
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
        // Small integers (exact in every dtype, and so are their sums here).
        const std::vector<Buffer> leaves = testing::integerLeaves(type, total, count, ++seed, 16);
        for (ReduceOp op : testing::kAllOps) {
          Options o;
          o.segmentBytes = 64;
          o.inPlace = (count + p + static_cast<int>(op)) % 2 == 0;
          SCOPED_TRACE(describe(Mode::kNative, type, op, count, placement, o));
          // The exact result, as a double per element.
          std::vector<double> exact(count);
          for (size_t i = 0; i < count; ++i) {
            double sum = 0, lo = 1e300, hi = -1e300;
            for (const Buffer& leaf : leaves) {
              const double v = testing::elementAsDouble(leaf.data(), i, type);
              sum += v;
              lo = std::min(lo, v);
              hi = std::max(hi, v);
            }
            exact[i] = op == ReduceOp::kMin ? lo : op == ReduceOp::kMax ? hi : sum;
          }
          const auto outcome = runBoth(Mode::kNative, leaves, placement, count, type, op, o);
          for (size_t r = 0; r < outcome.size(); ++r) {
            const RankOutcome& x = outcome[r];
            ASSERT_TRUE(x.serial.isOk()) << "rank " << r << ": " << x.serial.toString();
            ASSERT_TRUE(x.cpu.isOk()) << "rank " << r << ": " << x.cpu.toString();
            ASSERT_TRUE(x.damage.empty()) << "rank " << r << ": " << x.damage;
            ASSERT_TRUE(sameBits(x.serialOut.data(), x.cpuOut.data(), count, type))
                << "rank " << r << ": serial vs CPU path";
            if (op != ReduceOp::kAverage) {
              for (size_t i = 0; i < count; ++i) {
                ASSERT_EQ(testing::elementAsDouble(x.serialOut.data(), i, type), exact[i])
                    << "rank " << r << " element " << i;
              }
            }
          }
          if (op == ReduceOp::kAverage) {
            // The exact sum in the dtype, divided by the number of leaves as the fold divides.
            std::vector<Buffer> sumOnly = {Buffer(count * es)};
            std::vector<const void*> in;
            for (const Buffer& leaf : leaves) in.push_back(leaf.data());
            kernels::foldRankOrder(sumOnly[0].data(), in.data(), total, count, type, ReduceOp::kSum,
                                   1);
            for (size_t i = 0; i < count; ++i) {
              ASSERT_EQ(testing::elementAsDouble(sumOnly[0].data(), i, type), exact[i])
                  << "the sum of the test data is not exact, element " << i;
            }
            Buffer expected(count * es);
            kernels::foldRankOrder(expected.data(), pointersOf(sumOnly).data(), 1, count, type,
                                   ReduceOp::kAverage, total);
            for (size_t r = 0; r < outcome.size(); ++r) {
              ASSERT_TRUE(sameBits(outcome[r].serialOut.data(), expected.data(), count, type))
                  << "rank " << r << ": serial average vs the exact sum divided by " << total;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SerialAllreduceNativeTest,
                         ::testing::ValuesIn(testing::kAllTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

}  // namespace
}  // namespace detcoll
