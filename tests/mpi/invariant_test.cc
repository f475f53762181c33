// The invariant mode under mpirun, through the C API: detcoll_allreduce_leaves over a fixed set
// of global leaves spread over the ranks of the current world in several ways.
//
// Every leaf is generated from its GLOBAL index, so every rank can build any leaf. The expected
// result is testing::exactInvariantReference (MPFR, written independently of the library's codec)
// over the whole multiset of leaves: it does not depend on the world size, so equality with it at
// np 1, 2, 3 and 4 is what proves the result independent of world size and spread. Every result
// is also compared with rank 0's. Every test sets the invariant mode first and restores ordered
// at the end (the other tests assume ordered).

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "detcoll.h"
#include "tests/mpi/mpi_test_util.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"

namespace detcoll {
namespace {

using testing::Bytes;
using testing::cOp;
using testing::cType;
using testing::describeElement;
using testing::exactInvariantReference;
using testing::expectOnAllRanks;
using testing::firstDifference;
using testing::hashText;
using testing::kFloatTypes;
using testing::opName;
using testing::randomBuffer;
using testing::referenceFold;
using testing::seedFor;
using testing::typeName;
using testing::worldRank;
using testing::worldSize;

// The number of global leaves of most cases: 12, the example (or one per rank in a world
// larger than 12, since every rank contributes at least one leaf).
int leafCount() {
  return std::max(12, worldSize());
}

// ---------------------------------------------------------------------------------------------
// Leaves and spreads.

// The global leaves 0..n-1 of a case: leaf l is seeded by (label, l), the same on every rank.
std::vector<Bytes> makeLeaves(const std::string& label, DataType type, size_t count, int n) {
  std::vector<Bytes> leaves;
  for (int l = 0; l < n; ++l) leaves.push_back(randomBuffer(type, count, seedFor(label, l)));
  return leaves;
}

std::vector<const void*> pointersTo(const std::vector<Bytes>& leaves) {
  std::vector<const void*> out;
  for (const Bytes& b : leaves) out.push_back(b.data());
  return out;
}

// How the global leaves are dealt to the ranks: rank j takes perRank[j] leaves, the next ones of
// `order` (a permutation of the global indices).
struct Spread {
  std::string name;
  std::vector<int> perRank;
  std::vector<int> order;

  int firstOn(int rank) const {
    return std::accumulate(perRank.begin(), perRank.begin() + rank, 0);
  }
  // Global index of the k-th leaf of `rank`.
  int leafOf(int rank, int k) const { return order[firstOn(rank) + k]; }
  // This rank's leaves, in its order.
  std::vector<const void*> mine(const std::vector<Bytes>& leaves, size_t byteOffset = 0) const {
    const int r = worldRank();
    std::vector<const void*> out;
    for (int k = 0; k < perRank[r]; ++k) out.push_back(leaves[leafOf(r, k)].data() + byteOffset);
    return out;
  }
  std::string text() const {
    std::string t = name + " (";
    for (size_t j = 0; j < perRank.size(); ++j) t += (j ? "+" : "") + std::to_string(perRank[j]);
    return t + ")";
  }
};

Spread makeSpread(const std::string& name, std::vector<int> perRank, bool shuffled) {
  Spread s{name, std::move(perRank), {}};
  const int n = std::accumulate(s.perRank.begin(), s.perRank.end(), 0);
  s.order.resize(n);
  std::iota(s.order.begin(), s.order.end(), 0);
  if (shuffled) {
    // The same permutation on every rank: a fixed seed and a hand-written Fisher-Yates.
    std::mt19937_64 rng(hashText(s.name));
    for (int i = n - 1; i > 0; --i) std::swap(s.order[i], s.order[rng() % (i + 1)]);
  }
  return s;
}

// The spreads of the 12 global leaves over the current world: an even one, uneven ones, and one
// with the leaves dealt in a shuffled order (so rank order and leaf order differ too).
std::vector<Spread> spreadsFor(int p) {
  switch (p) {
    case 1:
      return {makeSpread("all on rank 0", {12}, false),
              makeSpread("all on rank 0 shuffled", {12}, true)};
    case 2:
      return {makeSpread("even", {6, 6}, false), makeSpread("uneven shuffled", {9, 3}, true)};
    case 3:
      return {makeSpread("even", {4, 4, 4}, false), makeSpread("uneven", {5, 4, 3}, false),
              makeSpread("uneven shuffled", {1, 1, 10}, true)};
    case 4:
      return {makeSpread("even", {3, 3, 3, 3}, false), makeSpread("uneven", {6, 3, 2, 1}, false),
              makeSpread("uneven shuffled", {1, 2, 1, 8}, true)};
    default: {
      // Larger worlds: deal the leaves round robin.
      std::vector<int> even(p, leafCount() / p);
      for (int j = 0; j < leafCount() % p; ++j) ++even[j];
      return {makeSpread("round robin", even, false)};
    }
  }
}

// ---------------------------------------------------------------------------------------------
// References and checks.

// exactInvariantReference over all `leaves`, computed in element slices (rank j computes the
// j-th slice; the reference is elementwise) and allgathered, so every rank holds all of it.
Bytes invariantReference(const std::vector<const void*>& leaves, size_t count, DataType type,
                         ReduceOp op) {
  const int p = worldSize();
  const int r = worldRank();
  const size_t es = dataTypeSize(type);
  std::vector<int> counts(p), displs(p);
  for (int j = 0; j < p; ++j) {
    const size_t begin = count * j / p, end = count * (j + 1) / p;
    counts[j] = static_cast<int>((end - begin) * es);
    displs[j] = static_cast<int>(begin * es);
  }
  Bytes all(count * es);
  Bytes slice(counts[r]);
  if (counts[r] > 0) {
    std::vector<const void*> shifted;
    for (const void* l : leaves) shifted.push_back(static_cast<const char*>(l) + displs[r]);
    exactInvariantReference(slice.data(), shifted, counts[r] / es, type, op);
  }
  MPI_Allgatherv(slice.data(), counts[r], MPI_BYTE, all.data(), counts.data(), displs.data(),
                 MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

// Rank 0's bytes, broadcast.
Bytes rootCopy(const void* data, size_t bytes) {
  Bytes out(bytes);
  if (worldRank() == 0 && bytes > 0) std::memcpy(out.data(), data, bytes);
  if (bytes > 0) MPI_Bcast(out.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  return out;
}

// `result` equals `expected` bit for bit, and rank 0's result, on every rank.
bool checkBits(const std::string& label, const void* result, const void* expected, size_t count,
               DataType type, const char* expectedName = "the exact invariant reference") {
  const Bytes root = rootCopy(result, count * dataTypeSize(type));
  std::string detail;
  const long i = firstDifference(result, expected, count, type);
  if (i >= 0) {
    detail = label + ": element " + std::to_string(i) + " of " + std::to_string(count) + " is " +
             describeElement(result, i, type) + ", " + expectedName + " is " +
             describeElement(expected, i, type);
  }
  const long k = firstDifference(result, root.data(), count, type);
  if (k >= 0) {
    detail += (detail.empty() ? label + ": " : "; ") + std::string("element ") + std::to_string(k) +
              " is " + describeElement(result, k, type) + " here and " +
              describeElement(root.data(), k, type) + " on rank 0";
  }
  return expectOnAllRanks(i < 0 && k < 0, detail);
}

bool checkSuccess(const std::string& label, detcoll_status_t status) {
  return expectOnAllRanks(status == DETCOLL_SUCCESS, label + ": status " + std::to_string(status) +
                                                         ": " + detcoll_last_error());
}

// Number of elements whose bits differ.
size_t differingElements(const void* a, const void* b, size_t count, DataType type) {
  const size_t es = dataTypeSize(type);
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    n += std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es,
                     es) != 0;
  }
  return n;
}

// One detcoll_allreduce_leaves of this rank's share of `leaves` under `spread`, out of place.
detcoll_status_t reduceSpread(const Spread& spread, const std::vector<Bytes>& leaves, void* out,
                              size_t count, DataType type, ReduceOp op, const std::string& name) {
  const std::vector<const void*> mine = spread.mine(leaves);
  return detcoll_allreduce_leaves(mine.data(), static_cast<int>(mine.size()), out, count,
                                  cType(type), cOp(op), name.c_str());
}

// Every test runs in invariant mode and leaves the library in ordered mode.
class Invariant : public ::testing::Test {
 protected:
  void SetUp() override {
    const detcoll_status_t status = detcoll_set_mode(DETCOLL_MODE_INVARIANT);
    expectOnAllRanks(status == DETCOLL_SUCCESS && detcoll_get_mode() == DETCOLL_MODE_INVARIANT,
                     std::string("set_mode(invariant): ") + detcoll_last_error());
  }
  void TearDown() override {
    const detcoll_status_t status = detcoll_set_mode(DETCOLL_MODE_ORDERED);
    expectOnAllRanks(status == DETCOLL_SUCCESS && detcoll_get_mode() == DETCOLL_MODE_ORDERED,
                     std::string("set_mode(ordered): ") + detcoll_last_error());
  }
};

// ---------------------------------------------------------------------------------------------
// The headline: 12 leaves of random non-integer data over a wide exponent range, every spread of
// the current world, sum and average, every float dtype, one element, 1023 elements (inline for
// some spreads and dtypes, not for others) and 70001 (pipelined): bit-identical on every rank and
// equal to the exact reference of the whole multiset, which does not depend on the world size.

TEST_F(Invariant, LeavesOverAnySpreadEqualTheExactReferenceOfTheMultiset) {
  const int p = worldSize();
  const std::vector<Spread> spreads = spreadsFor(p);
  for (DataType type : kFloatTypes) {
    for (size_t count : {size_t{1}, size_t{1023}, size_t{70001}}) {
      const std::string base = "headline " + typeName(type) + " count " + std::to_string(count);
      const std::vector<Bytes> leaves = makeLeaves(base, type, count, leafCount());
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        const Bytes expected = invariantReference(pointersTo(leaves), count, type, op);
        for (const Spread& spread : spreads) {
          const std::string label = base + " " + opName(op) + " spread " + spread.text();
          Bytes out(count * dataTypeSize(type), 0xa5);
          checkSuccess(label, reduceSpread(spread, leaves, out.data(), count, type, op, label));
          checkBits(label, out.data(), expected.data(), count, type);
        }
      }
    }
  }
}

// recvbuf may be one of the leaves: in place on every rank gives the same bits.
TEST_F(Invariant, RecvbufAsOneOfTheLeavesGivesTheSameBits) {
  const Spread spread = spreadsFor(worldSize()).back();
  for (DataType type : kFloatTypes) {
    for (size_t count : {size_t{300}, size_t{40001}}) {
      const std::string label = "in place " + typeName(type) + " count " + std::to_string(count);
      std::vector<Bytes> leaves = makeLeaves(label, type, count, leafCount());
      const Bytes expected =
          invariantReference(pointersTo(leaves), count, type, ReduceOp::kAverage);
      // This rank's last leaf is the output.
      const int r = worldRank();
      const int target = spread.leafOf(r, spread.perRank[r] - 1);
      std::vector<const void*> mine = spread.mine(leaves);
      const detcoll_status_t status = detcoll_allreduce_leaves(
          mine.data(), static_cast<int>(mine.size()), leaves[target].data(), count, cType(type),
          DETCOLL_AVERAGE, label.c_str());
      checkSuccess(label, status);
      checkBits(label, leaves[target].data(), expected.data(), count, type);
    }
  }
}

// Several pipeline rounds (a round is P shards of 2^17 int64 encodings): 600001 elements is 5
// rounds at np 1 and 2 at np 4, with a short last one; out of place and in place.
TEST_F(Invariant, SeveralPipelineRoundsEqualTheExactReference) {
  const std::vector<Spread> spreads = spreadsFor(worldSize());
  const size_t count = 600001;
  const struct {
    DataType type;
    ReduceOp op;
  } cases[] = {{DataType::kFloat32, ReduceOp::kSum},
               {DataType::kFloat64, ReduceOp::kAverage},
               {DataType::kBFloat16, ReduceOp::kAverage}};
  for (const auto& c : cases) {
    const std::string base = "rounds " + typeName(c.type) + " " + opName(c.op);
    const std::vector<Bytes> leaves = makeLeaves(base, c.type, count, leafCount());
    const Bytes expected = invariantReference(pointersTo(leaves), count, c.type, c.op);
    for (const Spread& spread : {spreads.front(), spreads.back()}) {
      const std::string label = base + " spread " + spread.text();
      Bytes out(count * dataTypeSize(c.type), 0xa5);
      checkSuccess(label, reduceSpread(spread, leaves, out.data(), count, c.type, c.op, label));
      checkBits(label, out.data(), expected.data(), count, c.type);
    }
    // In place: recvbuf is this rank's first leaf.
    const Spread& spread = spreads.back();
    std::vector<Bytes> work = leaves;
    const int first = spread.leafOf(worldRank(), 0);
    const std::vector<const void*> mine = spread.mine(work);
    const std::string label = base + " in place spread " + spread.text();
    checkSuccess(label, detcoll_allreduce_leaves(mine.data(), static_cast<int>(mine.size()),
                                                 work[first].data(), count, cType(c.type),
                                                 cOp(c.op), label.c_str()));
    checkBits(label, work[first].data(), expected.data(), count, c.type);
  }
}

// detcoll_allreduce in invariant mode is the one-leaf-per-rank case; average divides by the world
// size. Count 0 with null buffers succeeds and writes nothing.
TEST_F(Invariant, PlainAllreduceIsOneLeafPerRank) {
  const int p = worldSize();
  for (DataType type : kFloatTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const size_t count = 20001;
      const std::string label = "plain " + typeName(type) + " " + opName(op);
      const std::vector<Bytes> leaves = makeLeaves(label, type, count, p);
      const Bytes expected = invariantReference(pointersTo(leaves), count, type, op);
      Bytes out(count * dataTypeSize(type), 0xa5);
      checkSuccess(label, detcoll_allreduce(leaves[worldRank()].data(), out.data(), count,
                                            cType(type), cOp(op), label.c_str()));
      checkBits(label, out.data(), expected.data(), count, type);
    }
  }
  const void* nulls[3] = {nullptr, nullptr, nullptr};
  checkSuccess("count 0", detcoll_allreduce_leaves(nulls, 1 + worldRank() % 3, nullptr, 0,
                                                   DETCOLL_FLOAT32, DETCOLL_AVERAGE, "empty"));
}

// ---------------------------------------------------------------------------------------------
// The check can fail: ordered mode on the same leaves folds each rank's leaves first, so its bits
// depend on the spread; the invariant result does not.

TEST_F(Invariant, OrderedModeDependsOnTheSpreadWhereInvariantDoesNot) {
  const int p = worldSize();
  if (p < 2) {
    GTEST_SKIP() << "one rank has only one spread of the leaves (all on rank 0): nothing to "
                    "compare ordered mode's spreads with";
  }
  const std::vector<Spread> spreads = spreadsFor(p);
  const DataType type = DataType::kFloat32;
  for (size_t count : {size_t{4000}, size_t{70001}}) {
    const std::string base = "detection count " + std::to_string(count);
    const std::vector<Bytes> leaves = makeLeaves(base, type, count, leafCount());
    const Bytes expected = invariantReference(pointersTo(leaves), count, type, ReduceOp::kSum);
    std::vector<Bytes> ordered;
    for (const Spread& spread : spreads) {
      const std::string label = base + " spread " + spread.text();
      Bytes inv(count * 4), ord(count * 4);
      checkSuccess(label, reduceSpread(spread, leaves, inv.data(), count, type, ReduceOp::kSum,
                                       "invariant " + label));
      checkBits(label + " invariant", inv.data(), expected.data(), count, type);

      checkSuccess("set ordered", detcoll_set_mode(DETCOLL_MODE_ORDERED));
      checkSuccess(label, reduceSpread(spread, leaves, ord.data(), count, type, ReduceOp::kSum,
                                       "ordered " + label));
      checkSuccess("set invariant", detcoll_set_mode(DETCOLL_MODE_INVARIANT));
      const size_t vsExact = differingElements(ord.data(), expected.data(), count, type);
      expectOnAllRanks(vsExact > 0, label +
                                        ": ordered mode equals the exact reference in every "
                                        "element; the data cannot tell the modes apart");
      if (worldRank() == 0) {
        std::printf("[ detection ] %s: ordered differs from invariant in %zu of %zu elements\n",
                    label.c_str(), vsExact, count);
      }
      ordered.push_back(std::move(ord));
    }
    // Ordered mode's bits move with the spread.
    for (size_t s = 1; s < spreads.size(); ++s) {
      const size_t moved = differingElements(ordered[0].data(), ordered[s].data(), count, type);
      expectOnAllRanks(moved > 0, base + ": ordered mode gives the same bits for spreads " +
                                      spreads[0].text() + " and " + spreads[s].text());
      if (worldRank() == 0) {
        std::printf("[ detection ] %s: ordered %s vs %s: %zu of %zu elements differ\n",
                    base.c_str(), spreads[0].text().c_str(), spreads[s].text().c_str(), moved,
                    count);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Buffer splitting: the leaves reduced whole and as pieces at random offsets (the same cuts on
// every rank, each piece its own call, pieces on both sides of the inline limit) give the same
// bits, out of place and in place (recvbuf = this rank's first leaf).

void checkSplit(DataType type, ReduceOp op, bool inPlace) {
  const size_t count = 60001;
  const size_t es = dataTypeSize(type);
  const std::string label =
      "split " + typeName(type) + " " + opName(op) + (inPlace ? " in place" : " out of place");
  const Spread spread = spreadsFor(worldSize()).back();
  const std::vector<Bytes> leaves = makeLeaves(label, type, count, leafCount());

  Bytes whole(count * es, 0xa5);
  checkSuccess(label + " whole",
               reduceSpread(spread, leaves, whole.data(), count, type, op, label + " whole"));
  const Bytes expected = invariantReference(pointersTo(leaves), count, type, op);
  checkBits(label + " whole", whole.data(), expected.data(), count, type);

  std::mt19937_64 rng(hashText(label));
  std::vector<size_t> cuts = {0, 1, 4, count};
  for (int k = 0; k < 8; ++k) cuts.push_back(5 + rng() % (count - 6));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  std::vector<Bytes> work = leaves;  // in place writes over this rank's first leaf
  Bytes pieces(count * es, 0x5a);
  const int r = worldRank();
  const int first = spread.leafOf(r, 0);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const size_t begin = cuts[k];
    const size_t length = cuts[k + 1] - begin;
    const std::vector<const void*> mine = spread.mine(work, begin * es);
    void* out = inPlace ? work[first].data() + begin * es : pieces.data() + begin * es;
    const detcoll_status_t status =
        detcoll_allreduce_leaves(mine.data(), static_cast<int>(mine.size()), out, length,
                                 cType(type), cOp(op), ("piece " + std::to_string(k)).c_str());
    checkSuccess(label + ": piece at " + std::to_string(begin), status);
  }
  if (inPlace) pieces = work[first];
  std::string cutText;
  for (size_t c : cuts) cutText += " " + std::to_string(c);
  checkBits(label + " (cuts" + cutText + ")", pieces.data(), whole.data(), count, type,
            "reduced whole it");
}

TEST_F(Invariant, PiecesAtRandomOffsetsGiveTheSameBitsAsTheWholeBuffer) {
  for (DataType type : kFloatTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      checkSplit(type, op, false);
    }
    checkSplit(type, ReduceOp::kSum, true);
  }
  checkSplit(DataType::kInt64, ReduceOp::kAverage, false);
}

// ---------------------------------------------------------------------------------------------
// Non-finite and edge values, with the special leaves on different ranks.

struct Palette {
  uint64_t qnan, negNanPayload, snan, pinf, ninf, max, subMin, subMax, normMin, one, huge, sign;
};

Palette paletteOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return {0x7fc00000, 0xffc00001, 0x7fa00000, 0x7f800000, 0xff800000, 0x7f7fffff,
              0x00000001, 0x007fffff, 0x00800000, 0x3f800000, 0x7e800000, 0x80000000};
    case DataType::kFloat64:
      return {0x7ff8000000000000, 0xfff8000000000001, 0x7ff4000000000000, 0x7ff0000000000000,
              0xfff0000000000000, 0x7fefffffffffffff, 0x0000000000000001, 0x000fffffffffffff,
              0x0010000000000000, 0x3ff0000000000000, 0x7fd0000000000000, 0x8000000000000000};
    case DataType::kFloat16:
      return {0x7e00, 0xfe01, 0x7d00, 0x7c00, 0xfc00, 0x7bff,
              0x0001, 0x03ff, 0x0400, 0x3c00, 0x7800, 0x8000};
    case DataType::kBFloat16:
      return {0x7fc0, 0xffc1, 0x7fa0, 0x7f80, 0xff80, 0x7f7f,
              0x0001, 0x007f, 0x0080, 0x3f80, 0x7e80, 0x8000};
    default:
      return {};
  }
}

uint64_t loadBits(const void* data, size_t i, size_t es) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const char*>(data) + i * es, es);  // little endian
  return v;
}
void storeBits(void* data, size_t i, size_t es, uint64_t v) {
  std::memcpy(static_cast<char*>(data) + i * es, &v, es);
}

// What a scenario's result must be, independently of the reference.
enum class Expect { kAny, kNaN, kPosInf, kNegInf, kPosZero };

constexpr int kScenarios = 21;

// Writes scenario `s` into element i of the leaves. a: a leaf on rank 0, b: a leaf on the last
// rank, c: a leaf on a middle rank. Returns what the result must be.
Expect applyScenario(int s, std::vector<Bytes>& leaves, size_t i, DataType type, ReduceOp op, int a,
                     int b, int c, std::mt19937_64& rng) {
  const size_t es = dataTypeSize(type);
  const Palette v = paletteOf(type);
  const int n = static_cast<int>(leaves.size());
  auto set = [&](int l, uint64_t bits) { storeBits(leaves[l].data(), i, es, bits); };
  auto setAll = [&](uint64_t bits) {
    for (int l = 0; l < n; ++l) set(l, bits);
  };
  const bool sum = op == ReduceOp::kSum;
  switch (s) {
    case 0:  // NaN in one leaf on rank 0
      set(a, v.qnan);
      return Expect::kNaN;
    case 1:  // a negative NaN with payload on the last rank
      set(b, v.negNanPayload);
      return Expect::kNaN;
    case 2:  // a signalling NaN in the middle
      set(c, v.snan);
      return Expect::kNaN;
    case 3:  // +inf on rank 0, -inf on the last rank
      set(a, v.pinf);
      set(b, v.ninf);
      return Expect::kNaN;
    case 4:  // +inf only
      set(a, v.pinf);
      return Expect::kPosInf;
    case 5:  // -inf twice, on two ranks
      set(b, v.ninf);
      set(c, v.ninf);
      return Expect::kNegInf;
    case 6:  // +inf and NaN
      set(a, v.pinf);
      set(b, v.qnan);
      return Expect::kNaN;
    case 7:  // zeros of both signs
      setAll(0);
      set(a, v.sign);
      set(b, v.sign);
      set(c, v.sign);
      return Expect::kPosZero;
    case 8:  // -0 in every leaf
      setAll(v.sign);
      return Expect::kPosZero;
    case 9:  // the largest finite value in every leaf: the sum overflows, the average is exact
      setAll(v.max);
      return sum ? Expect::kPosInf : Expect::kAny;
    case 10:
      setAll(v.max | v.sign);
      return sum ? Expect::kNegInf : Expect::kAny;
    case 11:  // two largest values on different ranks among ordinary ones
      set(a, v.max);
      set(b, v.max);
      return sum ? Expect::kPosInf : Expect::kAny;
    case 12:  // largest values that cancel, among ordinary ones far below their grid
      set(a, v.max);
      set(b, v.max | v.sign);
      return Expect::kAny;
    case 13:  // random subnormals of either sign
      for (int l = 0; l < n; ++l) set(l, (1 + rng() % v.subMax) | (rng() % 2 ? v.sign : 0));
      return Expect::kAny;
    case 14:  // the smallest subnormal everywhere
      setAll(v.subMin);
      return Expect::kAny;
    case 15:  // the largest subnormal everywhere: the sum crosses into the normals
      setAll(v.subMax);
      return Expect::kAny;
    case 16:  // one huge leaf among tiny ones
      for (int l = 0; l < n; ++l) set(l, v.subMin + rng() % 1000);
      set(c, v.huge);
      return Expect::kAny;
    case 17:  // one huge leaf among ones
      setAll(v.one);
      set(b, v.huge | v.sign);
      return Expect::kAny;
    case 18:  // x and -x on different ranks, zeros elsewhere
    {
      const uint64_t x = loadBits(leaves[a].data(), i, es) & ~v.sign;
      setAll(0);
      set(a, x);
      set(b, x | v.sign);
      return Expect::kPosZero;
    }
    case 19:  // the smallest normal minus the smallest subnormal
      setAll(0);
      set(a, v.normMin);
      set(b, v.subMin | v.sign);
      return Expect::kAny;
    case 20:  // the smallest subnormal against large ordinary values (below the grid)
      set(c, v.subMin | v.sign);
      return Expect::kAny;
  }
  return Expect::kAny;
}

std::string hexBits(uint64_t bits) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(bits));
  return text;
}

uint64_t canonicalNaN(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 0x7fc00000;
    case DataType::kFloat64:
      return 0x7ff8000000000000;
    case DataType::kFloat16:
      return 0x7e00;
    default:
      return 0x7fc0;
  }
}

TEST_F(Invariant, NonFiniteAndEdgeValuesOnDifferentRanks) {
  const Spread spread = spreadsFor(worldSize()).back();
  const int p = worldSize();
  const int a = spread.leafOf(0, 0);
  const int b = spread.leafOf(p - 1, spread.perRank[p - 1] - 1);
  const int c = spread.leafOf(p / 2, 0);
  for (DataType type : kFloatTypes) {
    const size_t es = dataTypeSize(type);
    const Palette v = paletteOf(type);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      // Inline (every scenario once, then ordinary elements), then pipelined (every scenario
      // every 97 elements).
      for (size_t count : {size_t{32}, size_t{20011}}) {
        const std::string label = "edges " + typeName(type) + " " + opName(op) + " count " +
                                  std::to_string(count) + " spread " + spread.text();
        std::vector<Bytes> leaves = makeLeaves(label, type, count, leafCount());
        std::mt19937_64 rng(hashText(label));
        std::vector<Expect> expect(count, Expect::kAny);
        for (size_t i = 0; i < count; ++i) {
          const int s = static_cast<int>(i % 97);
          if (s < kScenarios) expect[i] = applyScenario(s, leaves, i, type, op, a, b, c, rng);
        }
        const Bytes expected = invariantReference(pointersTo(leaves), count, type, op);
        Bytes out(count * es, 0xa5);
        checkSuccess(label, reduceSpread(spread, leaves, out.data(), count, type, op, label));
        checkBits(label, out.data(), expected.data(), count, type);

        // The documented values, independently of the reference.
        std::string wrong;
        for (size_t i = 0; i < count && wrong.empty(); ++i) {
          const uint64_t got = loadBits(out.data(), i, es);
          uint64_t want = 0;
          switch (expect[i]) {
            case Expect::kAny:
              continue;
            case Expect::kNaN:
              want = canonicalNaN(type);
              break;
            case Expect::kPosInf:
              want = v.pinf;
              break;
            case Expect::kNegInf:
              want = v.ninf;
              break;
            case Expect::kPosZero:
              want = 0;
              break;
          }
          if (got != want) {
            wrong = label + ": scenario " + std::to_string(i % 97) + " at element " +
                    std::to_string(i) + " gives " + describeElement(out.data(), i, type) +
                    ", want the bits " + hexBits(want);
          }
        }
        expectOnAllRanks(wrong.empty(), wrong);
      }
    }
  }
}

// Many leaves (1001 in all, dealt unevenly), average. Half the elements cancel to a few grid
// steps, so the exact quotient needs every bit below the rounding point (the sticky bit) to round
// right; a quarter have every leaf of one sign near the largest, so the exact sum needs far more
// than 53 bits; the rest are random.
TEST_F(Invariant, ManyLeavesAverageOfCancellingValues) {
  const int p = worldSize();
  const int total = 1001;
  std::vector<int> perRank(p);
  // Rank j takes a share proportional to j + 1.
  for (int j = 0; j < p; ++j) {
    perRank[j] = total * (j + 1) * (j + 2) / (p * (p + 1)) - total * j * (j + 1) / (p * (p + 1));
  }
  for (DataType type : kFloatTypes) {
    const size_t count = 1500;
    const size_t es = dataTypeSize(type);
    const std::string base = "many leaves " + typeName(type);
    std::vector<Bytes> leaves = makeLeaves(base, type, count, total);
    // Element i: leaf 0 holds B, leaf 1 holds -B, every other leaf a small multiple (-3..3) of
    // B's grid step 2^(e - 45), or the random value for every fourth element.
    const Palette v = paletteOf(type);
    const int mantissa = type == DataType::kFloat64   ? 52
                         : type == DataType::kFloat32 ? 23
                         : type == DataType::kFloat16 ? 10
                                                      : 7;
    const uint64_t exponentMask = v.pinf;
    std::mt19937_64 rng(hashText(base));
    for (size_t i = 0; i < count; ++i) {
      if (i % 4 == 3) continue;
      if (i % 4 == 2) {
        // Every leaf of one sign and leaf 0's binade: the exact sum is far beyond 2^51 grid
        // steps (about 1000 * 2^45).
        const uint64_t head = loadBits(leaves[0].data(), i, es) & (v.sign | exponentMask);
        const uint64_t fractionMask = (uint64_t{1} << mantissa) - 1;
        for (int l = 1; l < total; ++l)
          storeBits(leaves[l].data(), i, es, head | (rng() & fractionMask));
        continue;
      }
      const uint64_t big = loadBits(leaves[0].data(), i, es) & ~v.sign;
      const int e = static_cast<int>((big & exponentMask) >> mantissa);  // biased
      storeBits(leaves[1].data(), i, es, big | v.sign);
      for (int l = 2; l < total; ++l) {
        const int j = static_cast<int>(rng() % 7) - 3;
        uint64_t bits = 0;
        // j * 2^(e - 45) for |j| in 1..3, written as a normal number when it is one.
        const int step = e - 45;  // biased exponent of the grid step
        if (j != 0 && step > 2) {
          const int aj = j < 0 ? -j : j;
          const int lead = aj >= 2 ? 1 : 0;
          const uint64_t frac = aj == 3 ? uint64_t{1} << (mantissa - 1) : 0;
          bits = (static_cast<uint64_t>(step + lead) << mantissa) | frac | (j < 0 ? v.sign : 0);
        }
        storeBits(leaves[l].data(), i, es, bits);
      }
    }
    std::vector<int> order(total);
    std::iota(order.begin(), order.end(), 0);
    Spread spread{"many", perRank, order};
    const Bytes expected = invariantReference(pointersTo(leaves), count, type, ReduceOp::kAverage);
    const std::string label = base + " average spread " + std::to_string(p) + " ranks";
    Bytes out(count * es, 0xa5);
    checkSuccess(label,
                 reduceSpread(spread, leaves, out.data(), count, type, ReduceOp::kAverage, label));
    checkBits(label, out.data(), expected.data(), count, type);
  }
}

// ---------------------------------------------------------------------------------------------
// Integers: the exact sum (wrapping) and the exact average (truncated toward zero), against a
// computation in the test and the reference, with extremes for the sums.

TEST_F(Invariant, IntegerSumAndAverageAreExact) {
  const std::vector<Spread> spreads = spreadsFor(worldSize());
  for (DataType type : {DataType::kInt32, DataType::kInt64}) {
    const size_t es = dataTypeSize(type);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const size_t count = 30011;
      const std::string base = "integers " + typeName(type) + " " + opName(op);
      std::vector<Bytes> leaves = makeLeaves(base, type, count, leafCount());
      // Extremes in the first elements: int32 always (the exact sum fits int64), int64 for sums
      // (which wrap).
      if (type == DataType::kInt32 || op == ReduceOp::kSum) {
        const uint64_t hi = type == DataType::kInt32 ? 0x7fffffffull : 0x7fffffffffffffffull;
        const uint64_t lo = type == DataType::kInt32 ? 0x80000000ull : 0x8000000000000000ull;
        for (int l = 0; l < leafCount(); ++l) {
          storeBits(leaves[l].data(), 0, es, hi);
          storeBits(leaves[l].data(), 1, es, lo);
          storeBits(leaves[l].data(), 2, es, l % 2 ? hi : lo);
          storeBits(leaves[l].data(), 3, es, l < 3 ? hi : 1);
        }
      }
      // Computed here.
      Bytes local(count * es);
      for (size_t i = 0; i < count; ++i) {
        if (type == DataType::kInt32) {
          int64_t s = 0;
          for (int l = 0; l < leafCount(); ++l) {
            int32_t x;
            std::memcpy(&x, leaves[l].data() + i * 4, 4);
            s += x;
          }
          const int64_t r = op == ReduceOp::kSum ? s : s / leafCount();
          storeBits(local.data(), i, 4, static_cast<uint32_t>(static_cast<uint64_t>(r)));
        } else {
          uint64_t s = 0;
          for (int l = 0; l < leafCount(); ++l) s += loadBits(leaves[l].data(), i, 8);
          const uint64_t r = op == ReduceOp::kSum
                                 ? s
                                 : static_cast<uint64_t>(static_cast<int64_t>(s) / leafCount());
          storeBits(local.data(), i, 8, r);
        }
      }
      const Bytes expected = invariantReference(pointersTo(leaves), count, type, op);
      checkBits(base + ": the reference itself", expected.data(), local.data(), count, type,
                "the test's own exact computation");
      for (const Spread& spread : spreads) {
        const std::string label = base + " spread " + spread.text();
        Bytes out(count * es, 0xa5);
        checkSuccess(label, reduceSpread(spread, leaves, out.data(), count, type, op, label));
        checkBits(label, out.data(), local.data(), count, type, "the exact result");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Min and max over leaves: the elementwise min/max over all leaves, whatever the spread, with
// NaN, infinities and signed zeros on different ranks.

TEST_F(Invariant, MinAndMaxEqualTheElementwiseExtremeOfAllLeaves) {
  const std::vector<Spread> spreads = spreadsFor(worldSize());
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    const Palette v = paletteOf(type);
    for (size_t count : {size_t{1023}, size_t{70001}}) {
      const std::string base = "minmax " + typeName(type) + " count " + std::to_string(count);
      std::vector<Bytes> leaves = makeLeaves(base, type, count, leafCount());
      if (isFloatingPoint(type)) {
        // Every 31st element: a NaN in one leaf; +0 and -0 in all leaves; infinities of both
        // signs, in leaves that land on different ranks under the spreads.
        for (size_t i = 0; i < count; i += 31) {
          const uint64_t zeros[2] = {0, v.sign};
          for (int l = 0; l < leafCount(); ++l) {
            if (i + 1 < count) storeBits(leaves[l].data(), i + 1, es, zeros[(l + i) % 2]);
          }
          storeBits(leaves[i % leafCount()].data(), i, es, v.qnan);
          if (i + 2 < count) {
            storeBits(leaves[(i + 3) % leafCount()].data(), i + 2, es, v.pinf);
            storeBits(leaves[(i + 7) % leafCount()].data(), i + 2, es, v.ninf);
          }
        }
      }
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
        Bytes expected(count * es);
        referenceFold(expected.data(), pointersTo(leaves), count, type, op, 1);
        for (const Spread& spread : spreads) {
          const std::string label = base + " " + opName(op) + " spread " + spread.text();
          Bytes out(count * es, 0xa5);
          checkSuccess(label, reduceSpread(spread, leaves, out.data(), count, type, op, label));
          checkBits(label, out.data(), expected.data(), count, type,
                    "the elementwise extreme of all leaves");
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input on one or every rank: every rank fails with DETCOLL_ERR_INVALID_ARGUMENT and the same
// message, recvbuf untouched, no hang; the library stays usable.

void expectFailureEverywhere(const std::string& label, detcoll_status_t status,
                             detcoll_status_t want, const Bytes& out, uint8_t fill,
                             const std::string& needle) {
  const std::string message = detcoll_last_error();
  expectOnAllRanks(status == want, label + ": status " + std::to_string(status) + ", want " +
                                       std::to_string(want) + " (" + message + ")");
  expectOnAllRanks(message.find(needle) != std::string::npos,
                   label + ": message does not mention '" + needle + "': " + message);
  expectOnAllRanks(std::all_of(out.begin(), out.end(), [&](uint8_t x) { return x == fill; }),
                   label + ": recvbuf was written by a failed call");
  const uint64_t h = hashText(message);
  uint64_t rootHash = h;
  MPI_Bcast(&rootHash, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  expectOnAllRanks(h == rootHash, label + ": message differs from rank 0's: " + message);
}

void expectInvalidEverywhere(const std::string& label, detcoll_status_t status, const Bytes& out,
                             uint8_t fill, const std::string& needle) {
  expectFailureEverywhere(label, status, DETCOLL_ERR_INVALID_ARGUMENT, out, fill, needle);
}

// A small invariant reduction checked against the reference: the library is still usable.
void expectUsable(const std::string& label) {
  const Spread spread = spreadsFor(worldSize()).back();
  const size_t count = 5000;
  const std::vector<Bytes> leaves = makeLeaves(label, DataType::kFloat32, count, leafCount());
  const Bytes expected =
      invariantReference(pointersTo(leaves), count, DataType::kFloat32, ReduceOp::kSum);
  Bytes out(count * 4, 0xa5);
  checkSuccess(label, reduceSpread(spread, leaves, out.data(), count, DataType::kFloat32,
                                   ReduceOp::kSum, label));
  checkBits(label, out.data(), expected.data(), count, DataType::kFloat32);
}

TEST_F(Invariant, ZeroLeavesOnOneRankFailEverywhere) {
  const int p = worldSize();
  const size_t count = 64;
  const std::vector<Bytes> leaves = makeLeaves("zero leaves", DataType::kFloat32, count, 2);
  const std::vector<const void*> ptrs = pointersTo(leaves);
  for (int bad : {0, -1}) {
    const std::string label = "nleaves " + std::to_string(bad) + " on the last rank";
    const int n = worldRank() == p - 1 ? bad : 2;
    Bytes out(count * 4, 0x3c);
    const detcoll_status_t status = detcoll_allreduce_leaves(ptrs.data(), n, out.data(), count,
                                                             DETCOLL_FLOAT32, DETCOLL_SUM, "bad");
    expectInvalidEverywhere(label, status, out, 0x3c, "nleaves");
  }
  {
    // A null leaf on rank 0.
    std::vector<const void*> withNull = ptrs;
    if (worldRank() == 0) withNull[1] = nullptr;
    Bytes out(count * 4, 0x3c);
    const detcoll_status_t status = detcoll_allreduce_leaves(
        withNull.data(), 2, out.data(), count, DETCOLL_FLOAT32, DETCOLL_AVERAGE, "null leaf");
    expectInvalidEverywhere("a null leaf on rank 0", status, out, 0x3c, "leaves[1]");
  }
  expectUsable("usable after nleaves 0");
}

TEST_F(Invariant, MoreThan65536LeavesInTotalFailEverywhere) {
  const int p = worldSize();
  const size_t count = 3;
  const std::vector<Bytes> small = makeLeaves("many leaves", DataType::kFloat32, count, 7);
  {
    // 65536 on one rank: over the per-rank limit, whatever the world size.
    std::vector<const void*> ptrs(65536, small[0].data());
    Bytes out(count * 4, 0x3c);
    const int n = worldRank() == 0 ? 65536 : 1;
    const detcoll_status_t status = detcoll_allreduce_leaves(ptrs.data(), n, out.data(), count,
                                                             DETCOLL_FLOAT32, DETCOLL_SUM, "many");
    expectInvalidEverywhere("65536 leaves on rank 0", status, out, 0x3c, "nleaves");
  }
  if (p >= 2) {
    // 65535 on every rank: each within the per-rank limit, the total beyond the exact range.
    std::vector<const void*> ptrs(65535, small[0].data());
    Bytes out(count * 4, 0x3c);
    const detcoll_status_t status = detcoll_allreduce_leaves(
        ptrs.data(), 65535, out.data(), count, DETCOLL_FLOAT32, DETCOLL_SUM, "too many");
    expectInvalidEverywhere("65535 leaves on each of " + std::to_string(p) + " ranks", status, out,
                            0x3c, "65536");

    // Exactly 65536 in total is in range: the exact sum of 7 distinct leaves repeated.
    std::vector<const void*> all(65536);
    for (int l = 0; l < 65536; ++l) all[l] = small[l % 7].data();
    std::vector<int> perRank(p, 65536 / p);
    for (int j = 0; j < 65536 % p; ++j) ++perRank[j];
    const int first = std::accumulate(perRank.begin(), perRank.begin() + worldRank(), 0);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const std::string label = "65536 leaves in total " + opName(op);
      const Bytes expected = invariantReference(all, count, DataType::kFloat32, op);
      Bytes ok(count * 4, 0x3c);
      const detcoll_status_t st =
          detcoll_allreduce_leaves(all.data() + first, perRank[worldRank()], ok.data(), count,
                                   DETCOLL_FLOAT32, cOp(op), label.c_str());
      checkSuccess(label, st);
      checkBits(label, ok.data(), expected.data(), count, DataType::kFloat32);
    }
  }
  expectUsable("usable after too many leaves");
}

// Ranks in different modes (one ordered, the others invariant): DETCOLL_ERR_MISMATCH on every
// rank, naming the mode, recvbuf untouched; usable once the modes agree again.
TEST_F(Invariant, RanksInDifferentModesFailEverywhere) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "one rank cannot disagree with itself about the mode";
  // Inline (both descriptions carry the data) and not.
  for (size_t count : {size_t{1000}, size_t{10000}}) {
    const std::string label =
        "rank 0 ordered, the others invariant, count " + std::to_string(count);
    const std::vector<Bytes> leaves = makeLeaves(label, DataType::kFloat32, count, 2);
    const std::vector<const void*> ptrs = pointersTo(leaves);
    // Only rank 0 switches; the verdict on that call is then shared by every rank.
    const detcoll_status_t set =
        worldRank() == 0 ? detcoll_set_mode(DETCOLL_MODE_ORDERED) : DETCOLL_SUCCESS;
    checkSuccess("set ordered on rank 0", set);
    Bytes out(count * 4, 0x3c);
    const detcoll_status_t status = detcoll_allreduce_leaves(
        ptrs.data(), 2, out.data(), count, DETCOLL_FLOAT32, DETCOLL_SUM, "modes differ");
    expectFailureEverywhere(label, status, DETCOLL_ERR_MISMATCH, out, 0x3c, "determinism mode");
    checkSuccess("set invariant", detcoll_set_mode(DETCOLL_MODE_INVARIANT));
  }
  checkSuccess("set invariant", detcoll_set_mode(DETCOLL_MODE_INVARIANT));
  expectUsable("usable after a mode mismatch");
}

}  // namespace
}  // namespace detcoll
