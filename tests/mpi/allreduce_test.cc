// The ordered allreduce under mpirun, through the C API, against an independent reference.
//
// Every check gathers each rank's input to rank 0 with raw MPI, computes
// testing::referenceFold there (rank order, divisor = world size), broadcasts the reference bits
// and compares on every rank; it also compares every rank's result with rank 0's. A failing rank
// prints the first differing element on stderr; the verdict is shared, so every rank (and rank 0's
// printer) reports the failure.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "detcoll.h"
#include "tests/mpi/mpi_test_util.h"
#include "tests/support/reference.h"

namespace detcoll {
namespace {

using testing::describeElement;
using testing::firstDifference;
using testing::randomBuffer;
using testing::referenceFold;

using testing::Bytes;
using testing::cOp;
using testing::cType;
using testing::expectOnAllRanks;
using testing::hashText;
using testing::opName;
using testing::seedFor;
using testing::typeName;
using testing::worldRank;
using testing::worldSize;

// Rank 0's bytes, broadcast. Every rank must pass the same size.
Bytes rootCopy(const void* data, size_t bytes) {
  Bytes out(bytes);
  if (worldRank() == 0 && bytes > 0) std::memcpy(out.data(), data, bytes);
  if (bytes > 0) MPI_Bcast(out.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  return out;
}

// The reference of the ordered allreduce of every rank's `input`, computed on rank 0 from the
// gathered inputs and broadcast. start != 0 gives the rotated fold (start, start+1, ...).
Bytes referenceOf(const void* input, size_t count, DataType type, ReduceOp op, int start = 0) {
  const int p = worldSize();
  const size_t bytes = count * dataTypeSize(type);
  Bytes result(bytes);
  if (bytes == 0) return result;
  Bytes all(worldRank() == 0 ? bytes * p : 0);
  MPI_Gather(input, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
             MPI_BYTE, 0, MPI_COMM_WORLD);
  if (worldRank() == 0) {
    std::vector<const void*> inputs(p);
    for (int j = 0; j < p; ++j) inputs[j] = all.data() + j * bytes;
    if (start == 0) {
      referenceFold(result.data(), inputs, count, type, op, p);
    } else {
      testing::rotatedFold(result.data(), inputs, count, type, op, p, start);
    }
  }
  MPI_Bcast(result.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  return result;
}

// Compares `result` (this rank's output for `input`) with the reference and with rank 0's result.
void checkOrdered(const std::string& label, const void* input, const void* result, size_t count,
                  DataType type, ReduceOp op) {
  const Bytes reference = referenceOf(input, count, type, op);
  const Bytes root = rootCopy(result, count * dataTypeSize(type));
  std::string detail;
  const long i = firstDifference(result, reference.data(), count, type);
  if (i >= 0) {
    detail = label + ": element " + std::to_string(i) + " of " + std::to_string(count) + " is " +
             describeElement(result, i, type) + ", the rank-order fold is " +
             describeElement(reference.data(), i, type);
  }
  const long k = firstDifference(result, root.data(), count, type);
  if (k >= 0) {
    detail += (detail.empty() ? label + ": " : "; ") + std::string("element ") + std::to_string(k) +
              " is " + describeElement(result, k, type) + " here and " +
              describeElement(root.data(), k, type) + " on rank 0";
  }
  expectOnAllRanks(i < 0 && k < 0, detail);
}

// Elements whose payload is exactly the inline limit (16 KiB): the first count that is not
// inlined is one more.
size_t inlineElements(DataType type) {
  return (size_t{16} << 10) / dataTypeSize(type);
}

// One allreduce of random data, in place or out of place, checked against the reference.
void runOrderedCase(DataType type, ReduceOp op, size_t count, bool inPlace) {
  const std::string label = typeName(type) + " " + opName(op) + " count " + std::to_string(count) +
                            (inPlace ? " in place" : " out of place");
  const int rank = worldRank();
  const Bytes input = randomBuffer(type, count, seedFor(label, rank));
  Bytes output(input.size());
  detcoll_status_t status;
  if (inPlace) {
    output = input;
    status =
        detcoll_allreduce(output.data(), output.data(), count, cType(type), cOp(op), label.c_str());
  } else {
    std::fill(output.begin(), output.end(), 0xa5);
    Bytes send = input;
    status =
        detcoll_allreduce(send.data(), output.data(), count, cType(type), cOp(op), label.c_str());
    expectOnAllRanks(send == input, label + ": sendbuf was modified");
  }
  expectOnAllRanks(status == DETCOLL_SUCCESS,
                   label + ": status " + std::to_string(status) + ": " + detcoll_last_error());
  checkOrdered(label, input.data(), output.data(), count, type, op);
}

// ---------------------------------------------------------------------------------------------
// Every dtype x op x small count x in place / out of place, including both sides of the inline
// limit of each dtype.

struct Case {
  DataType type;
  ReduceOp op;
  bool inPlace;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << typeName(c.type) << " " << opName(c.op) << (c.inPlace ? " in place" : " out of place");
}

class OrderedAllreduce : public ::testing::TestWithParam<Case> {};

TEST_P(OrderedAllreduce, MatchesRankOrderFoldAtSmallAndThresholdCounts) {
  ASSERT_TRUE(expectOnAllRanks(detcoll_get_mode() == DETCOLL_MODE_ORDERED, "mode is not ordered"));
  const Case c = GetParam();
  const size_t edge = inlineElements(c.type);
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, edge - 1, edge, edge + 1}) {
    runOrderedCase(c.type, c.op, count, c.inPlace);
  }
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (DataType t : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (bool inPlace : {false, true}) cases.push_back({t, op, inPlace});
    }
  }
  return cases;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return typeName(info.param.type) + "_" + opName(info.param.op) +
         (info.param.inPlace ? "_inplace" : "_outofplace");
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, OrderedAllreduce, ::testing::ValuesIn(allCases()),
                         caseName);

// 2^20 + 3 elements: several pipeline rounds (a 1 MiB segment per shard) with a short last
// round, for every dtype and op, in place and out of place.
class OrderedAllreduceLarge : public ::testing::TestWithParam<DataType> {};

TEST_P(OrderedAllreduceLarge, MatchesRankOrderFoldAtOneMebiPlusThree) {
  const size_t count = (size_t{1} << 20) + 3;
  const DataType type = GetParam();
  for (ReduceOp op : testing::kAllOps) {
    runOrderedCase(type, op, count, false);
    runOrderedCase(type, op, count, true);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, OrderedAllreduceLarge, ::testing::ValuesIn(testing::kAllTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return typeName(info.param);
                         });

TEST(OrderedAllreduceEdges, ZeroCountWithNullBuffersSucceeds) {
  const detcoll_status_t status =
      detcoll_allreduce(nullptr, nullptr, 0, DETCOLL_FLOAT32, DETCOLL_SUM, "zero");
  expectOnAllRanks(status == DETCOLL_SUCCESS,
                   std::string("status ") + std::to_string(status) + ": " + detcoll_last_error());
}

TEST(OrderedAllreduceEdges, NullNameIsAccepted) {
  const Bytes input = randomBuffer(DataType::kFloat32, 5000, seedFor("null name", worldRank()));
  Bytes output(input.size());
  const detcoll_status_t status =
      detcoll_allreduce(input.data(), output.data(), 5000, DETCOLL_FLOAT32, DETCOLL_SUM, nullptr);
  expectOnAllRanks(status == DETCOLL_SUCCESS, detcoll_last_error());
  checkOrdered("null name", input.data(), output.data(), 5000, DataType::kFloat32, ReduceOp::kSum);
}

// ---------------------------------------------------------------------------------------------
// Layout independence: the buffer reduced whole and as pieces at random offsets and lengths
// (each piece its own call; pieces on both sides of the inline limit) gives the same bits.

void checkSplitEquality(DataType type, ReduceOp op, bool inPlace) {
  const size_t count = 60001;
  const std::string label =
      "split " + typeName(type) + " " + opName(op) + (inPlace ? " in place" : " out of place");
  const size_t es = dataTypeSize(type);
  const Bytes input = randomBuffer(type, count, seedFor(label, worldRank()));

  Bytes whole(input.size());
  Bytes send = input;
  detcoll_status_t status = detcoll_allreduce(send.data(), inPlace ? send.data() : whole.data(),
                                              count, cType(type), cOp(op), "whole");
  if (inPlace) whole = send;
  expectOnAllRanks(status == DETCOLL_SUCCESS, label + ": whole: " + detcoll_last_error());
  checkOrdered(label + " whole", input.data(), whole.data(), count, type, op);

  // Cut points: the same on every rank (the counts must agree), random, plus tiny pieces.
  std::mt19937_64 rng(hashText(label));
  std::vector<size_t> cuts = {0, 1, 4, count};
  std::uniform_int_distribution<size_t> at(5, count - 1);
  for (int k = 0; k < 7; ++k) cuts.push_back(at(rng));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  Bytes pieces(input.size(), 0x5a);
  send = input;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const size_t begin = cuts[k];
    const size_t length = cuts[k + 1] - begin;
    void* out = inPlace ? send.data() + begin * es : pieces.data() + begin * es;
    status = detcoll_allreduce(send.data() + begin * es, out, length, cType(type), cOp(op),
                               ("piece " + std::to_string(k)).c_str());
    expectOnAllRanks(status == DETCOLL_SUCCESS,
                     label + ": piece at " + std::to_string(begin) + ": " + detcoll_last_error());
  }
  if (inPlace) pieces = send;
  const long i = firstDifference(whole.data(), pieces.data(), count, type);
  std::string cutText;
  for (size_t c : cuts) cutText += " " + std::to_string(c);
  expectOnAllRanks(i < 0, label + ": element " + std::to_string(i) + " reduced whole is " +
                              (i < 0 ? "" : describeElement(whole.data(), i, type)) +
                              ", reduced in pieces (cuts" + cutText + ") is " +
                              (i < 0 ? "" : describeElement(pieces.data(), i, type)));
}

TEST(OrderedAllreduceSplit, PiecesAtRandomOffsetsGiveTheSameBitsAsTheWholeBuffer) {
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      checkSplitEquality(type, op, false);
      checkSplitEquality(type, op, true);
    }
  }
  checkSplitEquality(DataType::kInt32, ReduceOp::kSum, false);
  checkSplitEquality(DataType::kFloat32, ReduceOp::kMax, true);
}

// ---------------------------------------------------------------------------------------------
// Special values: NaN (quiet, signalling, negative, with payload), infinities, signed zeros,
// subnormals, the largest finite values (whose sums overflow), integer extremes (whose sums
// wrap). The fold's documented semantics (canonical NaN, -0 < +0, overflow to infinity) must
// hold end to end, bit for bit with the reference.

std::vector<uint64_t> specialBits(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return {0x7fc00000, 0xffc00001, 0x7fa00000, 0x7f800000, 0xff800000, 0x00000000, 0x80000000,
              0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000, 0x3f800001};
    case DataType::kFloat64:
      return {0x7ff8000000000000, 0xfff8000000000001, 0x7ff4000000000000, 0x7ff0000000000000,
              0xfff0000000000000, 0x0000000000000000, 0x8000000000000000, 0x0000000000000001,
              0x800fffffffffffff, 0x7fefffffffffffff, 0xffefffffffffffff, 0x3ff0000000000000,
              0xbff0000000000000, 0x3ff0000000000001};
    case DataType::kFloat16:
      return {0x7e00, 0xfe01, 0x7d00, 0x7c00, 0xfc00, 0x0000, 0x8000,
              0x0001, 0x83ff, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01};
    case DataType::kBFloat16:
      return {0x7fc0, 0xffc1, 0x7fa0, 0x7f80, 0xff80, 0x0000, 0x8000,
              0x0001, 0x807f, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81};
    case DataType::kInt32:
      return {0x80000000, 0x7fffffff, 0xffffffff, 0x00000000, 0x00000001, 0x80000001};
    case DataType::kInt64:
      return {0x8000000000000000, 0x7fffffffffffffff, 0xffffffffffffffff, 0x0, 0x1,
              0x8000000000000001};
  }
  return {};
}

TEST(OrderedAllreduceSpecialValues, MatchTheReferenceBitForBit) {
  for (DataType type : testing::kAllTypes) {
    const size_t es = dataTypeSize(type);
    const std::vector<uint64_t> palette = specialBits(type);
    for (ReduceOp op : testing::kAllOps) {
      // Inline, then pipelined (more than 16 KiB for every dtype).
      for (size_t count : {size_t{600}, size_t{9001}}) {
        const std::string label =
            "specials " + typeName(type) + " " + opName(op) + " count " + std::to_string(count);
        Bytes input = randomBuffer(type, count, seedFor(label, worldRank()));
        std::mt19937_64 rng(seedFor(label + " palette", worldRank()));
        for (size_t i = 0; i < count; ++i) {
          if (rng() % 2 == 0) continue;  // half the elements stay ordinary
          const uint64_t bits = palette[rng() % palette.size()];
          std::memcpy(input.data() + i * es, &bits, es);  // little endian: the low bytes
        }
        Bytes output(input.size(), 0xa5);
        const detcoll_status_t status = detcoll_allreduce(input.data(), output.data(), count,
                                                          cType(type), cOp(op), label.c_str());
        expectOnAllRanks(status == DETCOLL_SUCCESS, label + ": " + detcoll_last_error());
        checkOrdered(label, input.data(), output.data(), count, type, op);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Detection: the data used here is able to expose reordering. A fold started at rank 1 (the
// order a ring gives some chunks) differs from the rank-order fold, and the library's result
// equals the rank-order one, not the rotated one.

TEST(OrderedAllreduceDetection, RotatedFoldDiffersFromTheOrderedResult) {
  const int p = worldSize();
  if (p < 3) GTEST_SKIP() << "with " << p << " rank(s) every fold order gives the same bits";
  for (size_t count : {size_t{4000}, size_t{100000}}) {  // inline and pipelined
    const std::string label = "detection count " + std::to_string(count);
    const Bytes input = randomBuffer(DataType::kFloat32, count, seedFor(label, worldRank()));
    Bytes output(input.size());
    const detcoll_status_t status = detcoll_allreduce(input.data(), output.data(), count,
                                                      DETCOLL_FLOAT32, DETCOLL_SUM, "detection");
    expectOnAllRanks(status == DETCOLL_SUCCESS, detcoll_last_error());
    checkOrdered(label, input.data(), output.data(), count, DataType::kFloat32, ReduceOp::kSum);

    const Bytes rotated = referenceOf(input.data(), count, DataType::kFloat32, ReduceOp::kSum, 1);
    size_t differing = 0;
    const float* a = reinterpret_cast<const float*>(output.data());
    const float* b = reinterpret_cast<const float*>(rotated.data());
    for (size_t i = 0; i < count; ++i) differing += std::memcmp(a + i, b + i, 4) != 0;
    expectOnAllRanks(differing > 0, label +
                                        ": the rotated fold agrees with the result in every "
                                        "element; the data cannot detect reordering");
    if (worldRank() == 0) {
      std::printf("[ detection ] %s: %zu of %zu elements differ from the fold started at rank 1\n",
                  label.c_str(), differing, count);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// allreduce_leaves

TEST(AllreduceLeaves, OneLeafEqualsAllreduce) {
  for (size_t count : {size_t{1000}, size_t{70001}}) {
    const std::string label = "leaves count " + std::to_string(count);
    const Bytes input = randomBuffer(DataType::kFloat32, count, seedFor(label, worldRank()));
    Bytes viaAllreduce(input.size()), viaLeaves(input.size());
    detcoll_status_t status = detcoll_allreduce(input.data(), viaAllreduce.data(), count,
                                                DETCOLL_FLOAT32, DETCOLL_SUM, "plain");
    expectOnAllRanks(status == DETCOLL_SUCCESS, detcoll_last_error());
    const void* leaves[1] = {input.data()};
    status = detcoll_allreduce_leaves(leaves, 1, viaLeaves.data(), count, DETCOLL_FLOAT32,
                                      DETCOLL_SUM, "leaves");
    expectOnAllRanks(status == DETCOLL_SUCCESS, detcoll_last_error());
    const long i =
        firstDifference(viaAllreduce.data(), viaLeaves.data(), count, DataType::kFloat32);
    expectOnAllRanks(i < 0, label + ": element " + std::to_string(i) + " differs");
    checkOrdered(label, input.data(), viaLeaves.data(), count, DataType::kFloat32, ReduceOp::kSum);
  }
}

TEST(AllreduceLeaves, TooManyLeavesOnOneRankFailEverywhere) {
  const int p = worldSize();
  const size_t count = 100;
  const Bytes a = randomBuffer(DataType::kFloat32, count, seedFor("two leaves a", worldRank()));
  const Bytes b = randomBuffer(DataType::kFloat32, count, seedFor("two leaves b", worldRank()));
  const void* leaves[2] = {a.data(), b.data()};
  const int nleaves = worldRank() == p - 1 ? 65536 : 1;  // out of range: never dereferenced
  Bytes output(a.size(), 0x3c);
  const detcoll_status_t status = detcoll_allreduce_leaves(
      leaves, nleaves, output.data(), count, DETCOLL_FLOAT32, DETCOLL_SUM, "two leaves");
  const std::string message = detcoll_last_error();
  expectOnAllRanks(status == DETCOLL_ERR_INVALID_ARGUMENT,
                   "status " + std::to_string(status) + " (" + message + ")");
  expectOnAllRanks(message.find("nleaves") != std::string::npos, "message: " + message);
  expectOnAllRanks(std::all_of(output.begin(), output.end(), [](uint8_t v) { return v == 0x3c; }),
                   "recvbuf was written by a failed call");
  // Same message on every rank.
  const uint64_t h = hashText(message);
  uint64_t rootHash = h;
  MPI_Bcast(&rootHash, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  expectOnAllRanks(h == rootHash, "message differs from rank 0's: " + message);
  // Still usable.
  runOrderedCase(DataType::kFloat32, ReduceOp::kSum, 5000, false);
}

}  // namespace
}  // namespace detcoll
