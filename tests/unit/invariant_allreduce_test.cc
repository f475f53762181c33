// The invariant mode through the checked collectives (Collectives::allreduceLeaves with
// Mode::kInvariant) on ranks as threads: bits equal to the MPFR reference of
// tests/support/exact_reference.h on the inline and the pipelined path; the same bits whatever the
// world size and however the leaves are spread or permuted over ranks (where the ordered mode
// changes); the same bits for a buffer reduced whole or in pieces; non-finite values on various
// ranks; integers and min/max; the accuracy bound of kernels/fixed_point.h against a float32
// ring; the leaf-count limits.

#include "collective/allreduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "collective/call_agreement.h"
#include "collective/collectives.h"
#include "collective/ring_allreduce.h"
#include "kernels/fixed_point.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::CallAgreement;
using collective::Collectives;
using testing::Buffer;
using testing::describe;
using testing::describeElement;
using testing::expectSameFailureEverywhere;
using testing::identity;
using testing::kFloatTypes;
using testing::kSentinel;
using testing::makeInputs;
using testing::place;
using testing::Placement;
using testing::pointers;
using testing::runRanks;
using testing::sameBits;

struct RunOptions {
  size_t segmentBytes = 0;  // 0: the default
  bool inPlace = false;     // recv is each rank's first leaf (a copy of it)
};

// Every rank's output (count elements plus a sentinel tail) and status.
struct Outcome {
  std::vector<Buffer> out;
  std::vector<Status> status;
};

Outcome runPlaced(Mode mode, const std::vector<Buffer>& leaves, const Placement& placement,
                  size_t count, DataType type, ReduceOp op, const RunOptions& options = {}) {
  const int p = static_cast<int>(placement.size());
  const size_t es = dataTypeSize(type);
  Outcome o{std::vector<Buffer>(p, Buffer(count * es + 16, kSentinel)), std::vector<Status>(p)};
  runRanks(p, [&](Collectives& c, int r) {
    if (options.segmentBytes > 0) c.setSegmentBytes(options.segmentBytes);
    std::vector<const void*> mine;
    for (int l : placement[r]) mine.push_back(leaves[l].data());
    if (options.inPlace) {
      std::memcpy(o.out[r].data(), leaves[placement[r][0]].data(), count * es);
      mine[0] = o.out[r].data();
    }
    o.status[r] =
        c.allreduceLeaves(mode, mine.data(), static_cast<int>(mine.size()), o.out[r].data(), count,
                          static_cast<int>(type), static_cast<int>(op), "grad");
  });
  return o;
}

Buffer exactReference(const std::vector<Buffer>& leaves, size_t count, DataType type, ReduceOp op) {
  Buffer out(count * dataTypeSize(type) + 16, kSentinel);
  testing::exactInvariantReference(out.data(), pointers(leaves), count, type, op);
  return out;
}

// Every rank succeeded, holds `expected` and wrote nothing past count elements.
void expectEverywhere(const Outcome& o, const Buffer& expected, size_t count, DataType type) {
  const size_t es = dataTypeSize(type);
  for (size_t r = 0; r < o.out.size(); ++r) {
    ASSERT_TRUE(o.status[r].isOk()) << "rank " << r << ": " << o.status[r].toString();
    EXPECT_TRUE(sameBits(o.out[r].data(), expected.data(), count, type)) << "rank " << r;
    EXPECT_TRUE(std::all_of(o.out[r].begin() + count * es, o.out[r].end(),
                            [](uint8_t b) { return b == kSentinel; }))
        << "rank " << r << " wrote past the end";
  }
}

// The invariant mode, whole and in many pipeline rounds, out of place and in place: `expected`
// on every rank each time.
void expectEveryLayout(const std::vector<Buffer>& leaves, const Placement& placement, size_t count,
                       DataType type, ReduceOp op, const Buffer& expected) {
  for (const RunOptions& options : {RunOptions{}, RunOptions{512, false}, RunOptions{512, true}}) {
    SCOPED_TRACE("segmentBytes=" + std::to_string(options.segmentBytes) +
                 (options.inPlace ? " in place" : ""));
    expectEverywhere(runPlaced(Mode::kInvariant, leaves, placement, count, type, op, options),
                     expected, count, type);
  }
}

// Whether every rank's payload fits inline (the path that reduces locally on every rank).
bool inlinePath(const Placement& placement, size_t count, DataType type) {
  for (const auto& leaves : placement) {
    if (leaves.size() * count * dataTypeSize(type) > CallAgreement::kInlineBytes) return false;
  }
  return true;
}

// Against the reference on both paths ----------------------------------------------------------

class InvariantAllreduceTest : public ::testing::TestWithParam<DataType> {};

TEST_P(InvariantAllreduceTest, MatchesExactReferenceInlineAndPipelined) {
  const DataType type = GetParam();
  const std::vector<std::vector<int>> spreads = {{1}, {2}, {2, 1, 3}, {1, 1, 1, 1}};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{4097}}) {
      for (const auto& spread : spreads) {
        const int n = std::accumulate(spread.begin(), spread.end(), 0);
        const auto leaves = makeInputs(type, n, count, count * 13 + n);
        const Placement placement = place(spread, identity(n));
        const Buffer expected = exactReference(leaves, count, type, op);
        std::vector<RunOptions> variants = {{}};
        if (!inlinePath(placement, count, type)) {
          variants.push_back({256, false});  // many pipeline rounds
          variants.push_back({0, true});
        }
        for (const RunOptions& options : variants) {
          SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) +
                       " count=" + std::to_string(count) + " " + describe(placement) +
                       (inlinePath(placement, count, type) ? " inline" : " pipelined") +
                       " segmentBytes=" + std::to_string(options.segmentBytes) +
                       (options.inPlace ? " in place" : ""));
          expectEverywhere(runPlaced(Mode::kInvariant, leaves, placement, count, type, op, options),
                           expected, count, type);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, InvariantAllreduceTest, ::testing::ValuesIn(kFloatTypes),
                         [](const auto& info) { return dataTypeName(info.param); });

// The invariant allreduce (collective/allreduce.h) of this rank's leaves, called directly.
Status invariantAllreduce(
    collective::transport::Communicator& comm, const void* const* leaves, int nleaves, void* recv,
    size_t count, DataType type, ReduceOp op, int64_t total, size_t segmentBytes,
    collective::InvariantTransport transport = collective::InvariantTransport::kAuto) {
  collective::AllreduceOptions o;
  o.mode = Mode::kInvariant;
  o.leaves = leaves;
  o.nleaves = nleaves;
  o.recv = recv;
  o.count = count;
  o.type = type;
  o.op = op;
  o.totalLeaves = total;
  o.segmentBytes = segmentBytes;
  o.invariantTransport = transport;
  return collective::allreduce(comm, o);
}

TEST(InvariantAllreduceDirectTest, PipelineWithFewerElementsThanRanks) {
  // The invariant allreduce called directly runs the pipeline even where the checked entry
  // point would take the inline path: counts below the world size leave some shards empty.
  for (DataType type : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (size_t count : {size_t{1}, size_t{2}, size_t{7}, size_t{1023}}) {
        for (int p : {3, 5}) {
          SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) +
                       " count=" + std::to_string(count) + " np=" + std::to_string(p));
          const auto leaves = makeInputs(type, 2 * p, count, count + 3 * p);
          const Buffer expected = exactReference(leaves, count, type, op);
          const size_t es = dataTypeSize(type);
          std::vector<Buffer> out(p, Buffer(count * es + 16, kSentinel));
          std::vector<Status> status(p);
          const Status spawned =
              collective::transport::spawn(p, [&](collective::transport::Communicator& comm) {
                const int r = comm.rank();
                const void* mine[2] = {leaves[2 * r].data(), leaves[2 * r + 1].data()};
                status[r] = invariantAllreduce(comm, mine, 2, out[r].data(), count, type, op, 2 * p,
                                               count % 2 ? 64 : 1 << 20);
              });
          ASSERT_TRUE(spawned.isOk()) << spawned.toString();
          expectEverywhere(Outcome{out, status}, expected, count, type);
        }
      }
    }
  }
}

TEST(InvariantAllreduceDirectTest, BothTransportsGiveTheReferenceBits) {
  // With one leaf on every rank the leaves themselves travel (kAuto takes kLeaves); the int64
  // encodings are the other transport. Both compute the same function of the multiset: forced
  // either way, in place or not, over several pipeline rounds, they give the reference bits.
  using collective::InvariantTransport;
  for (DataType type : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (int p : {2, 3, 5}) {
        const size_t count = 3001;
        const auto leaves = makeInputs(type, p, count, 31 * p + static_cast<int>(op));
        const Buffer expected = exactReference(leaves, count, type, op);
        const size_t es = dataTypeSize(type);
        for (auto transport : {InvariantTransport::kAuto, InvariantTransport::kLeaves,
                               InvariantTransport::kEncodings, InvariantTransport::kMpi}) {
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) + " np=" + std::to_string(p) +
                         " transport=" + std::to_string(static_cast<int>(transport)) +
                         (inPlace ? " in place" : ""));
            Outcome o{std::vector<Buffer>(p, Buffer(count * es + 16, kSentinel)),
                      std::vector<Status>(p)};
            const Status spawned =
                collective::transport::spawn(p, [&](collective::transport::Communicator& comm) {
                  const int r = comm.rank();
                  const void* mine[1] = {leaves[r].data()};
                  if (inPlace) {
                    std::memcpy(o.out[r].data(), leaves[r].data(), count * es);
                    mine[0] = o.out[r].data();
                  }
                  o.status[r] = invariantAllreduce(comm, mine, 1, o.out[r].data(), count, type, op,
                                                   p, 1024, transport);
                });
            ASSERT_TRUE(spawned.isOk()) << spawned.toString();
            expectEverywhere(o, expected, count, type);
          }
        }
      }
    }
  }
}

TEST(InvariantAllreduceDirectTest, LeafTransportNeedsOneLeafOnEveryRank) {
  // Forcing the leaf transport with two leaves per rank is refused by every rank, before any
  // message, so nothing hangs.
  const int p = 3;
  const size_t count = 100;
  const auto leaves = makeInputs(DataType::kFloat32, 2 * p, count, 5);
  std::vector<Buffer> out(p, Buffer(count * 4, kSentinel));
  std::vector<Status> status(p);
  const Status spawned =
      collective::transport::spawn(p, [&](collective::transport::Communicator& comm) {
        const int r = comm.rank();
        const void* mine[2] = {leaves[2 * r].data(), leaves[2 * r + 1].data()};
        status[r] = invariantAllreduce(comm, mine, 2, out[r].data(), count, DataType::kFloat32,
                                       ReduceOp::kSum, 2 * p, 1 << 20,
                                       collective::InvariantTransport::kLeaves);
      });
  ASSERT_TRUE(spawned.isOk()) << spawned.toString();
  expectSameFailureEverywhere(status, StatusCode::kInternal, {"one leaf on every rank"});
  for (const Buffer& b : out) EXPECT_TRUE(testing::untouched(b));
}

TEST(InvariantAllreduceLargeTest, LargeCountMatchesExactReference) {
  const size_t count = (size_t{1} << 18) + 3;
  for (auto [type, op] : {std::make_pair(DataType::kFloat32, ReduceOp::kSum),
                          std::make_pair(DataType::kBFloat16, ReduceOp::kAverage)}) {
    SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op));
    const auto leaves = makeInputs(type, 4, count, 1234);
    const Buffer expected = exactReference(leaves, count, type, op);
    expectEverywhere(runPlaced(Mode::kInvariant, leaves, place({1, 2, 1}, identity(4)), count, type,
                               op, {64 << 10, false}),
                     expected, count, type);
  }
}

// World size and spread of leaves ----------------------------------------------------------------

const std::vector<std::vector<int>>& twelveLeafSpreads() {
  static const std::vector<std::vector<int>> spreads = {
      {12}, {6, 6}, {4, 4, 4}, {3, 3, 3, 3}, {5, 4, 3}, std::vector<int>(12, 1)};
  return spreads;
}

TEST(InvariantAllreduceWorldTest, SameBitsForEverySpreadAndPermutationOfTwelveLeaves) {
  std::mt19937 rng(7);
  for (DataType type : kFloatTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (size_t count : {size_t{100}, size_t{5000}}) {
        const auto leaves = makeInputs(type, 12, count, count + static_cast<int>(type));
        const Buffer expected = exactReference(leaves, count, type, op);
        for (const auto& spread : twelveLeafSpreads()) {
          std::vector<int> shuffled = identity(12);
          std::shuffle(shuffled.begin(), shuffled.end(), rng);
          std::vector<int> reversed = identity(12);
          std::reverse(reversed.begin(), reversed.end());
          for (const auto& order : {identity(12), shuffled, reversed}) {
            const Placement placement = place(spread, order);
            SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) +
                         " count=" + std::to_string(count) + " " + describe(placement));
            expectEverywhere(runPlaced(Mode::kInvariant, leaves, placement, count, type, op,
                                       {count > 1000 ? size_t{4096} : 0, false}),
                             expected, count, type);
          }
        }
      }
    }
  }
}

TEST(InvariantAllreduceWorldTest, OrderedModeChangesWithTheSpreadOnTheSameData) {
  // The check above can fail: with the same leaves in the same order, the ordered mode (each rank
  // folds its leaves, then the ranks are folded in order) gives other bits when the spread
  // changes, while every rank of one run still agrees.
  const DataType type = DataType::kFloat32;
  const size_t count = 5000;
  const auto leaves = makeInputs(type, 12, count, 77);
  std::vector<Buffer> results;
  for (const auto& spread : twelveLeafSpreads()) {
    const Placement placement = place(spread, identity(12));
    const Outcome o =
        runPlaced(Mode::kOrdered, leaves, placement, count, type, ReduceOp::kSum, {4096, false});
    for (size_t r = 0; r < o.out.size(); ++r) {
      ASSERT_TRUE(o.status[r].isOk()) << o.status[r].toString();
      ASSERT_TRUE(sameBits(o.out[r].data(), o.out[0].data(), count, type))
          << describe(placement) << " rank " << r;
    }
    results.push_back(o.out[0]);
  }
  // {12} and twelve ranks of one leaf are the same left fold; every other spread regroups it.
  EXPECT_TRUE(sameBits(results.back().data(), results[0].data(), count, type));
  for (size_t s = 1; s + 1 < results.size(); ++s) {
    const long i = testing::firstDifference(results[s].data(), results[0].data(), count, type);
    EXPECT_GE(i, 0) << describe(place(twelveLeafSpreads()[s], identity(12)))
                    << ": ordered bits equal those of {12} on every element";
  }
  // A permutation of the leaves changes the ordered bits too.
  std::vector<int> reversed = identity(12);
  std::reverse(reversed.begin(), reversed.end());
  const Outcome permuted = runPlaced(Mode::kOrdered, leaves, place({12}, reversed), count, type,
                                     ReduceOp::kSum, {4096, false});
  ASSERT_TRUE(permuted.status[0].isOk());
  EXPECT_GE(testing::firstDifference(permuted.out[0].data(), results[0].data(), count, type), 0);
}

// Splitting --------------------------------------------------------------------------------------

TEST(InvariantAllreduceSplitTest, WholeAndPiecesAtRandomOffsetsGiveTheSameBits) {
  const size_t count = 20000;
  const Placement placement = place({2, 1, 3}, identity(6));
  std::mt19937 rng(3);
  for (DataType type : kFloatTypes) {
    const size_t es = dataTypeSize(type);
    const auto leaves = makeInputs(type, 6, count, 11 + static_cast<int>(type));
    // Random cut points, a few of them close together (pieces of 0 to a few elements).
    std::vector<size_t> cuts = {0, count};
    std::uniform_int_distribution<size_t> at(0, count);
    for (int k = 0; k < 12; ++k) cuts.push_back(at(rng));
    cuts.push_back(cuts[2]);
    cuts.push_back(cuts[3] + 1 < count ? cuts[3] + 1 : cuts[3]);
    std::sort(cuts.begin(), cuts.end());
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op));
      const Outcome whole =
          runPlaced(Mode::kInvariant, leaves, placement, count, type, op, {1000, false});
      std::vector<Buffer> pieces(placement.size(), Buffer(count * es, kSentinel));
      std::vector<Status> status(placement.size());
      runRanks(static_cast<int>(placement.size()), [&](Collectives& c, int r) {
        for (size_t k = 0; k + 1 < cuts.size(); ++k) {
          std::vector<const void*> mine;
          for (int l : placement[r]) mine.push_back(leaves[l].data() + cuts[k] * es);
          const Status s =
              c.allreduceLeaves(Mode::kInvariant, mine.data(), static_cast<int>(mine.size()),
                                pieces[r].data() + cuts[k] * es, cuts[k + 1] - cuts[k],
                                static_cast<int>(type), static_cast<int>(op), "piece");
          if (!s.isOk() && status[r].isOk()) status[r] = s;
        }
      });
      const Buffer expected = exactReference(leaves, count, type, op);
      expectEverywhere(whole, expected, count, type);
      for (size_t r = 0; r < placement.size(); ++r) {
        ASSERT_TRUE(status[r].isOk()) << status[r].toString();
        EXPECT_TRUE(sameBits(pieces[r].data(), whole.out[r].data(), count, type)) << "rank " << r;
      }
    }
  }
}

// Non-finite values, integers, min and max ------------------------------------------------------

// Writes raw bits into element i of a leaf.
void putBits(Buffer& leaf, size_t i, DataType type, uint64_t bits) {
  std::memcpy(leaf.data() + i * dataTypeSize(type), &bits, dataTypeSize(type));
}

struct Specials {
  uint64_t nan, otherNaN, inf, ninf;
};

Specials specialsOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return {0x7fc00000u, 0xffc00123u, 0x7f800000u, 0xff800000u};
    case DataType::kFloat64:
      return {0x7ff8000000000000ull, 0x7ff0000000000001ull, 0x7ff0000000000000ull,
              0xfff0000000000000ull};
    case DataType::kFloat16:
      return {0x7e00u, 0xfe01u, 0x7c00u, 0xfc00u};
    default:
      return {0x7fc0u, 0x7f81u, 0x7f80u, 0xff80u};
  }
}

void nonFiniteLeavesCase(const Placement& placement) {
  for (DataType type : kFloatTypes) {
    const Specials s = specialsOf(type);
    for (size_t count : {size_t{40}, size_t{5000}}) {
      auto leaves = makeInputs(type, 6, count, 99);
      std::vector<uint64_t> expected(count, 0);  // 0: whatever the reference says (finite)
      const size_t step = count < 100 ? 5 : 10;  // every pattern on both paths
      for (size_t i = 0; i < count; i += step) {
        const size_t j = (i / step) % 8;
        switch (j) {
          case 0:  // NaN on rank 2 only
            putBits(leaves[4], i, type, s.nan);
            expected[i] = s.nan;
            break;
          case 1:  // +inf on rank 0
            putBits(leaves[1], i, type, s.inf);
            expected[i] = s.inf;
            break;
          case 2:  // -inf on rank 1
            putBits(leaves[2], i, type, s.ninf);
            expected[i] = s.ninf;
            break;
          case 3:  // +inf on rank 0, -inf on rank 2: NaN
            putBits(leaves[0], i, type, s.inf);
            putBits(leaves[5], i, type, s.ninf);
            expected[i] = s.nan;
            break;
          case 4:  // +inf on every rank
            putBits(leaves[0], i, type, s.inf);
            putBits(leaves[2], i, type, s.inf);
            putBits(leaves[3], i, type, s.inf);
            expected[i] = s.inf;
            break;
          case 5:  // -inf and a non-canonical NaN on the same rank
            putBits(leaves[3], i, type, s.ninf);
            putBits(leaves[4], i, type, s.otherNaN);
            expected[i] = s.nan;
            break;
          case 6:  // both infinities on one rank
            putBits(leaves[3], i, type, s.inf);
            putBits(leaves[5], i, type, s.ninf);
            expected[i] = s.nan;
            break;
          default:  // -inf twice on rank 0 and a NaN on rank 1
            putBits(leaves[0], i, type, s.ninf);
            putBits(leaves[1], i, type, s.ninf);
            putBits(leaves[2], i, type, s.otherNaN);
            expected[i] = s.nan;
        }
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) +
                     " count=" + std::to_string(count));
        const Buffer reference = exactReference(leaves, count, type, op);
        for (size_t i = 0; i < count; i += step) {
          Buffer want(dataTypeSize(type));
          std::memcpy(want.data(), &expected[i], want.size());
          ASSERT_TRUE(sameBits(reference.data() + i * want.size(), want.data(), 1, type))
              << "reference at element " << i;
        }
        expectEveryLayout(leaves, placement, count, type, op, reference);
      }
    }
  }
}

TEST(InvariantAllreduceSpecialTest, NonFiniteLeavesOnVariousRanks) {
  // Six leaves on three ranks ({2, 1, 3}: the encoded transport); element step * k gets pattern
  // k % 8, with the special values on leaves of different ranks (leaves 0-1: rank 0, leaf 2:
  // rank 1, leaves 3-5: rank 2). The same leaves one per rank on six ranks take the leaf
  // transport, where the owner of a shard meets the non-finite leaves of every rank.
  for (const Placement& placement :
       {place({2, 1, 3}, identity(6)), place({1, 1, 1, 1, 1, 1}, identity(6))}) {
    SCOPED_TRACE(describe(placement));
    nonFiniteLeavesCase(placement);
  }
}

TEST(InvariantAllreduceSpecialTest, IntegersMinAndMaxMatchTheReference) {
  const Placement placement = place({1, 3, 2}, identity(6));
  for (DataType type : testing::kAllTypes) {
    for (size_t count : {size_t{7}, size_t{3000}}) {
      auto leaves = makeInputs(type, 6, count, 5);
      if (type == DataType::kInt32 || type == DataType::kInt64) {
        // Wrapping sums and negative averages on a few elements.
        const bool i32 = type == DataType::kInt32;
        const uint64_t max = i32 ? uint64_t{INT32_MAX} : uint64_t{INT64_MAX};
        for (int l = 0; l < 6; ++l) putBits(leaves[l], 0, type, max);
        putBits(leaves[5], 1, type, i32 ? uint64_t{0x80000000u} : uint64_t{1} << 63);
        putBits(leaves[0], 1, type, i32 ? uint64_t{0xffffffffu} : ~uint64_t{0});
      } else {
        // Signed zeros and a NaN for min and max.
        const Specials s = specialsOf(type);
        const uint64_t signBit = uint64_t{1} << (8 * dataTypeSize(type) - 1);
        for (int l = 0; l < 6; ++l) putBits(leaves[l], 2, type, l % 2 ? signBit : 0);
        putBits(leaves[3], 3, type, s.otherNaN);
      }
      const std::vector<ReduceOp> ops =
          isFloatingPoint(type)
              ? std::vector<ReduceOp>{ReduceOp::kMin, ReduceOp::kMax}
              : std::vector<ReduceOp>(std::begin(testing::kAllOps), std::end(testing::kAllOps));
      for (ReduceOp op : ops) {
        SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op) +
                     " count=" + std::to_string(count));
        const Buffer reference = exactReference(leaves, count, type, op);
        if (!isFloatingPoint(type) && op == ReduceOp::kSum) {
          // Element 0: six times INT_MAX, which wraps to -6 in either width.
          const uint64_t max = type == DataType::kInt32 ? uint64_t{INT32_MAX} : uint64_t{INT64_MAX};
          uint64_t want = 6 * max;
          if (type == DataType::kInt32) want &= 0xffffffffu;
          uint64_t got = 0;
          std::memcpy(&got, reference.data(), dataTypeSize(type));
          EXPECT_EQ(got, want) << "reference wrapping sum";
        }
        expectEveryLayout(leaves, placement, count, type, op, reference);
      }
    }
  }
}

// Accuracy ---------------------------------------------------------------------------------------

// Stores v, rounded somehow (test data only), into element i.
void storeDouble(Buffer& b, size_t i, DataType type, double v) {
  uint8_t* p = b.data() + i * dataTypeSize(type);
  switch (type) {
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      return;
    case DataType::kFloat16: {
      const _Float16 h = static_cast<_Float16>(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    default: {
      const float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(p, &h, 2);
    }
  }
}

struct Precision {
  int bits;       // significand bits
  int minNormal;  // smallest normal exponent
};

Precision precisionOf(DataType type) {
  switch (type) {
    case DataType::kFloat64:
      return {53, -1022};
    case DataType::kFloat16:
      return {11, -14};
    case DataType::kBFloat16:
      return {8, -126};
    default:
      return {24, -126};
  }
}

// Unit in the last place of x in the dtype.
long double ulpOf(double x, DataType type) {
  const Precision p = precisionOf(type);
  const int e = x == 0 ? p.minNormal : std::max(std::ilogb(x), p.minNormal);
  return std::ldexp(1.0L, e - (p.bits - 1));
}

// Data with heavy cancellation: n - 1 random leaves and one that nearly cancels their sum.
std::vector<Buffer> cancellingLeaves(DataType type, int n, size_t count, uint64_t seed) {
  auto leaves = makeInputs(type, n, count, seed);
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (int l = 0; l + 1 < n; ++l) s += testing::elementAsDouble(leaves[l].data(), i, type);
    storeDouble(leaves[n - 1], i, type, -s);
  }
  return leaves;
}

// The exact sum (or average) of every element, rounded once to float64 by the MPFR reference;
// for float64 leaves its own rounding error is at most half a float64 ulp, which the bounds add.
std::vector<double> exactValues(const std::vector<Buffer>& leaves, size_t count, DataType type,
                                ReduceOp op) {
  std::vector<Buffer> wide;
  for (const Buffer& leaf : leaves) {
    Buffer w(count * 8);
    for (size_t i = 0; i < count; ++i)
      storeDouble(w, i, DataType::kFloat64, testing::elementAsDouble(leaf.data(), i, type));
    wide.push_back(w);
  }
  Buffer out(count * 8);
  testing::exactSumRounded(out.data(), pointers(wide), count, DataType::kFloat64, op);
  std::vector<double> values(count);
  std::memcpy(values.data(), out.data(), count * 8);
  return values;
}

TEST(InvariantAllreduceAccuracyTest, WithinTheStatedBoundOnCancellingData) {
  // kernels/fixed_point.h: |result - exact| <= 0.5 ulp(result) + nleaves * 2^(e_max - 46), e_max
  // the exponent of the element's largest leaf (for average: the bound of the sum, divided by the
  // number of leaves). Checked per element; exact is the MPFR exact sum rounded to float64, so its
  // own half float64 ulp is added.
  const int n = 12;
  const size_t count = 3000;
  for (DataType type : kFloatTypes) {
    const Precision prec = precisionOf(type);
    const auto leaves = cancellingLeaves(type, n, count, 21);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      SCOPED_TRACE(dataTypeName(type) + " " + reduceOpName(op));
      const Outcome o = runPlaced(Mode::kInvariant, leaves, place({5, 4, 3}, identity(n)), count,
                                  type, op, {2048, false});
      ASSERT_TRUE(o.status[0].isOk()) << o.status[0].toString();
      const std::vector<double> exact = exactValues(leaves, count, type, op);
      const long double divisor = op == ReduceOp::kAverage ? n : 1;
      size_t worst = 0;
      long double worstRatio = 0;
      for (size_t i = 0; i < count; ++i) {
        int eMax = prec.minNormal;
        for (const Buffer& leaf : leaves) {
          const double v = testing::elementAsDouble(leaf.data(), i, type);
          if (v != 0) eMax = std::max(eMax, std::ilogb(v));
        }
        const double got = testing::elementAsDouble(o.out[0].data(), i, type);
        const long double error = std::fabs(static_cast<long double>(got) - exact[i]);
        const long double bound = 0.5L * ulpOf(got, type) +
                                  n * std::ldexp(1.0L, eMax - 46) / divisor +
                                  0.5L * ulpOf(exact[i], DataType::kFloat64);
        if (error / bound > worstRatio) {
          worstRatio = error / bound;
          worst = i;
        }
        ASSERT_LE(error, bound) << "element " << i << ": got "
                                << describeElement(o.out[0].data(), i, type) << ", exact "
                                << exact[i] << ", e_max " << eMax;
      }
      std::printf("  %s %s: worst error / bound %.3Lg at element %zu\n", dataTypeName(type).c_str(),
                  reduceOpName(op).c_str(), worstRatio, worst);
    }
  }
}

TEST(InvariantAllreduceAccuracyTest, TighterThanAFloat32Ring) {
  // Twelve ranks of one float32 leaf each, heavy cancellation: the invariant result against the
  // exact sum, and the float32 ring allreduce of collective/ring_allreduce.h on the same data.
  const DataType type = DataType::kFloat32;
  const int p = 12;
  const size_t count = 4096;
  const auto leaves = cancellingLeaves(type, p, count, 8);
  std::vector<Buffer> invariant(p, Buffer(count * 4)), ring(p, Buffer(count * 4));
  std::vector<Status> status(p), ringStatus(p);
  runRanks(p, [&](Collectives& c, int r) {
    const void* mine[1] = {leaves[r].data()};
    status[r] = c.allreduceLeaves(Mode::kInvariant, mine, 1, invariant[r].data(), count,
                                  static_cast<int>(type), 0, "grad");
    ringStatus[r] = collective::ringAllreduce(
        c.communicator(), {leaves[r].data(), ring[r].data(), count, type, ReduceOp::kSum});
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(status[r].isOk()) << status[r].toString();
    ASSERT_TRUE(ringStatus[r].isOk()) << ringStatus[r].toString();
  }
  const std::vector<double> exact = exactValues(leaves, count, type, ReduceOp::kSum);
  long double invariantSum = 0, ringSum = 0, invariantMax = 0, ringMax = 0;
  size_t invariantExact = 0, ringExact = 0;
  for (size_t i = 0; i < count; ++i) {
    const long double a = std::fabs(testing::elementAsDouble(invariant[0].data(), i, type) -
                                    static_cast<long double>(exact[i]));
    const long double b = std::fabs(testing::elementAsDouble(ring[0].data(), i, type) -
                                    static_cast<long double>(exact[i]));
    invariantSum += a;
    ringSum += b;
    invariantMax = std::max(invariantMax, a);
    ringMax = std::max(ringMax, b);
    invariantExact +=
        testing::elementAsDouble(invariant[0].data(), i, type) == static_cast<float>(exact[i]);
    ringExact += testing::elementAsDouble(ring[0].data(), i, type) == static_cast<float>(exact[i]);
  }
  std::printf(
      "  mean |error|: invariant %.3Lg, float32 ring %.3Lg; max: %.3Lg vs %.3Lg; "
      "correctly rounded: %zu vs %zu of %zu\n",
      invariantSum / count, ringSum / count, invariantMax, ringMax, invariantExact, ringExact,
      count);
  EXPECT_LT(invariantSum * 100, ringSum) << "mean error not 100 times smaller than the ring's";
  EXPECT_LT(invariantMax * 100, ringMax) << "max error not 100 times smaller than the ring's";
}

// Leaf-count limits ----------------------------------------------------------------------------

// Runs p ranks where rank r passes nleaves[r] leaves (all pointing at one buffer of `count`
// float32 values) and returns every rank's status and output.
Outcome runCounts(const std::vector<int>& nleaves, size_t count, ReduceOp op = ReduceOp::kSum) {
  const int p = static_cast<int>(nleaves.size());
  const auto values = makeInputs(DataType::kFloat32, p, std::max<size_t>(count, 1), 4);
  Outcome o{std::vector<Buffer>(p, Buffer(std::max<size_t>(count, 1) * 4, kSentinel)),
            std::vector<Status>(p)};
  runRanks(p, [&](Collectives& c, int r) {
    std::vector<const void*> mine(std::max(nleaves[r], 1), values[r].data());
    o.status[r] = c.allreduceLeaves(Mode::kInvariant, mine.data(), nleaves[r], o.out[r].data(),
                                    count, 0, static_cast<int>(op), "many");
  });
  return o;
}

TEST(InvariantAllreduceLimitTest, MoreThanTwoToTheSixteenLeavesInTotalFailsOnEveryRank) {
  for (size_t count : {size_t{1}, size_t{5000}}) {
    SCOPED_TRACE("count=" + std::to_string(count));
    const Outcome o = runCounts({30000, 30000, 5537}, count);
    expectSameFailureEverywhere(o.status, StatusCode::kInvalidArgument, {"65537", "65536"});
    for (const Buffer& b : o.out) EXPECT_TRUE(testing::untouched(b));
  }
}

TEST(InvariantAllreduceLimitTest, MoreThanTwoToTheSixteenLeavesFailsEvenWithCountZero) {
  // The limit is an argument check: it should not depend on the count.
  const Outcome o = runCounts({30000, 30000, 5537}, 0);
  expectSameFailureEverywhere(o.status, StatusCode::kInvalidArgument, {"65537"});
}

TEST(InvariantAllreduceLimitTest, ExactlyTwoToTheSixteenLeavesAreSummedExactly) {
  const std::vector<int> nleaves = {30000, 30000, 5536};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    const Outcome o = runCounts(nleaves, 3, op);
    const auto values = makeInputs(DataType::kFloat32, 3, 3, 4);
    std::vector<Buffer> all;
    for (int r = 0; r < 3; ++r) all.insert(all.end(), nleaves[r], values[r]);
    const Buffer expected = exactReference(all, 3, DataType::kFloat32, op);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(o.status[r].isOk()) << o.status[r].toString();
      EXPECT_TRUE(sameBits(o.out[r].data(), expected.data(), 3, DataType::kFloat32))
          << reduceOpName(op) << " rank " << r;
    }
  }
}

TEST(InvariantAllreduceLimitTest, NleavesZeroOrTwoToTheSixteenOnOneRankFailsOnEveryRank) {
  for (int bad : {0, 65536, -1}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{5000}}) {
      SCOPED_TRACE("nleaves=" + std::to_string(bad) + " count=" + std::to_string(count));
      const Outcome o = runCounts({2, bad, 1}, count);
      expectSameFailureEverywhere(o.status, StatusCode::kInvalidArgument, {"nleaves"});
      for (const Buffer& b : o.out) EXPECT_TRUE(testing::untouched(b));
    }
  }
}

}  // namespace
}  // namespace detcoll
