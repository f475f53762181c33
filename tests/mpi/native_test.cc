// The native mode (MPI_Allreduce underneath) under mpirun, through the C API, and mode switching.
//
// Native promises no order, so floating-point sums and averages are checked against the
// rank-order fold (testing::referenceFold, computed on rank 0 from the gathered inputs) within
// the error bound of any summation order; integer results and min/max, which no order changes,
// must match it bit for bit. Every rank's result must equal rank 0's.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "detcoll.h"
#include "tests/mpi/mpi_test_util.h"
#include "tests/support/reference.h"

namespace detcoll {
namespace {

using testing::describeElement;
using testing::randomBuffer;

using testing::Bytes;
using testing::expectOnAllRanks;
using testing::seedFor;
using testing::worldRank;
using testing::worldSize;

// Unit roundoff of the dtype (and of the per-step rounding MPI's sum may do in it).
double unitRoundoff(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return std::ldexp(1.0, -24);
    case DataType::kFloat64:
      return std::ldexp(1.0, -53);
    case DataType::kFloat16:
      return std::ldexp(1.0, -11);
    case DataType::kBFloat16:
      return std::ldexp(1.0, -8);
    default:
      return 0;
  }
}

// One native allreduce of random data; the result checked on rank 0 for every rank.
void checkNative(DataType type, ReduceOp op, size_t count, bool inPlace) {
  const std::string label = "native " + dataTypeName(type) + " " + reduceOpName(op) + " count " +
                            std::to_string(count) + (inPlace ? " in place" : " out of place");
  const int p = worldSize();
  const int rank = worldRank();
  const size_t bytes = count * dataTypeSize(type);
  const Bytes input = randomBuffer(type, count, seedFor(label, rank));
  Bytes output(bytes, 0xa5);
  if (inPlace) output = input;
  const detcoll_status_t status = detcoll_allreduce(
      inPlace ? output.data() : input.data(), output.data(), count,
      static_cast<detcoll_dtype_t>(type), static_cast<detcoll_op_t>(op), "native");
  expectOnAllRanks(status == DETCOLL_SUCCESS, label + ": " + detcoll_last_error());

  Bytes inputs(rank == 0 ? bytes * p : 0), outputs(rank == 0 ? bytes * p : 0);
  MPI_Gather(input.data(), static_cast<int>(bytes), MPI_BYTE, inputs.data(),
             static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Gather(output.data(), static_cast<int>(bytes), MPI_BYTE, outputs.data(),
             static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  std::string detail;
  if (rank == 0) {
    std::vector<const void*> in(p);
    for (int j = 0; j < p; ++j) in[j] = inputs.data() + j * bytes;
    Bytes reference(bytes);
    testing::referenceFold(reference.data(), in, count, type, op, p);
    const bool exact = !isFloatingPoint(type) || op == ReduceOp::kMin || op == ReduceOp::kMax;
    const double u = unitRoundoff(type);
    for (size_t i = 0; i < count && detail.empty(); ++i) {
      for (int j = 1; j < p && detail.empty(); ++j) {
        if (std::memcmp(outputs.data() + j * bytes + i * dataTypeSize(type),
                        outputs.data() + i * dataTypeSize(type), dataTypeSize(type)) != 0) {
          detail = label + ": element " + std::to_string(i) + " is " +
                   describeElement(outputs.data() + j * bytes, i, type) + " on rank " +
                   std::to_string(j) + " and " + describeElement(outputs.data(), i, type) +
                   " on rank 0";
        }
      }
      if (!detail.empty()) break;
      bool ok;
      if (exact) {
        ok = testing::firstDifference(outputs.data() + i * dataTypeSize(type),
                                      reference.data() + i * dataTypeSize(type), 1, type) < 0;
      } else {
        // Any order of p - 1 additions, each rounded to at worst the dtype, and the reference's,
        // are within (p - 1) u sum_j |x_j| of the exact sum; one more rounding each at the end.
        double sumAbs = 0;
        for (int j = 0; j < p; ++j) sumAbs += std::fabs(testing::elementAsDouble(in[j], i, type));
        const double want = testing::elementAsDouble(reference.data(), i, type);
        double bound = 2 * u * (p * sumAbs + 2 * std::fabs(want));
        if (op == ReduceOp::kAverage) bound /= p;
        ok = std::fabs(testing::elementAsDouble(outputs.data(), i, type) - want) <= bound;
      }
      if (!ok) {
        detail = label + ": element " + std::to_string(i) + " is " +
                 describeElement(outputs.data(), i, type) + ", the rank-order fold is " +
                 describeElement(reference.data(), i, type);
      }
    }
  }
  expectOnAllRanks(detail.empty(), detail);
}

class NativeMode : public ::testing::Test {
 protected:
  void SetUp() override {
    const detcoll_status_t status = detcoll_set_mode(DETCOLL_MODE_NATIVE);
    ASSERT_TRUE(
        expectOnAllRanks(status == DETCOLL_SUCCESS && detcoll_get_mode() == DETCOLL_MODE_NATIVE,
                         std::string("set_mode(native): ") + detcoll_last_error()));
  }
  void TearDown() override {
    EXPECT_EQ(detcoll_set_mode(DETCOLL_MODE_ORDERED), DETCOLL_SUCCESS) << detcoll_last_error();
    EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_ORDERED);
  }
};

TEST_F(NativeMode, Float64SumIsCloseToTheReferenceAndEqualOnAllRanks) {
  for (size_t count : {size_t{1}, size_t{7}, size_t{100003}}) {
    checkNative(DataType::kFloat64, ReduceOp::kSum, count, false);
    checkNative(DataType::kFloat64, ReduceOp::kSum, count, true);
  }
}

TEST_F(NativeMode, Int32SumIsExact) {
  for (size_t count : {size_t{1}, size_t{5000}, size_t{100003}}) {
    checkNative(DataType::kInt32, ReduceOp::kSum, count, false);
    checkNative(DataType::kInt32, ReduceOp::kSum, count, true);
  }
}

TEST_F(NativeMode, EveryDtypeAndOp) {
  for (DataType type : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      checkNative(type, op, 0, false);
      checkNative(type, op, 7, true);
      checkNative(type, op, 20011, false);
    }
  }
}

TEST(Mode, OrderedAfterNativeGivesTheRankOrderFoldAgain) {
  ASSERT_TRUE(expectOnAllRanks(detcoll_get_mode() == DETCOLL_MODE_ORDERED, "mode is not ordered"));
  // Switch back and forth; the ordered call after a native one must be exact again.
  ASSERT_TRUE(expectOnAllRanks(detcoll_set_mode(DETCOLL_MODE_NATIVE) == DETCOLL_SUCCESS,
                               detcoll_last_error()));
  checkNative(DataType::kFloat32, ReduceOp::kSum, 3000, false);
  ASSERT_TRUE(expectOnAllRanks(detcoll_set_mode(DETCOLL_MODE_ORDERED) == DETCOLL_SUCCESS,
                               detcoll_last_error()));
  const size_t count = 30000;
  const int p = worldSize();
  const Bytes input =
      randomBuffer(DataType::kFloat32, count, seedFor("back to ordered", worldRank()));
  Bytes output(input.size());
  const detcoll_status_t status =
      detcoll_allreduce(input.data(), output.data(), count, DETCOLL_FLOAT32, DETCOLL_SUM, "again");
  expectOnAllRanks(status == DETCOLL_SUCCESS, detcoll_last_error());
  Bytes all(worldRank() == 0 ? input.size() * p : 0), reference(input.size());
  MPI_Gather(input.data(), static_cast<int>(input.size()), MPI_BYTE, all.data(),
             static_cast<int>(input.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (worldRank() == 0) {
    std::vector<const void*> in(p);
    for (int j = 0; j < p; ++j) in[j] = all.data() + j * input.size();
    testing::referenceFold(reference.data(), in, count, DataType::kFloat32, ReduceOp::kSum, p);
  }
  MPI_Bcast(reference.data(), static_cast<int>(reference.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  const long i =
      testing::firstDifference(output.data(), reference.data(), count, DataType::kFloat32);
  expectOnAllRanks(i < 0,
                   "ordered after native: element " + std::to_string(i) + " is " +
                       (i < 0 ? "" : describeElement(output.data(), i, DataType::kFloat32)) +
                       ", the rank-order fold is " +
                       (i < 0 ? "" : describeElement(reference.data(), i, DataType::kFloat32)));
}

TEST(Mode, UnknownModesAreRejectedAndLeaveTheModeAlone) {
  ASSERT_TRUE(expectOnAllRanks(detcoll_get_mode() == DETCOLL_MODE_ORDERED, "mode is not ordered"));
  ASSERT_EQ(detcoll_set_mode(DETCOLL_MODE_INVARIANT), DETCOLL_SUCCESS) << detcoll_last_error();
  EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_INVARIANT);
  ASSERT_EQ(detcoll_set_mode(DETCOLL_MODE_ORDERED), DETCOLL_SUCCESS) << detcoll_last_error();
  EXPECT_EQ(detcoll_set_mode(static_cast<detcoll_mode_t>(7)), DETCOLL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_ORDERED);
  double mine = worldRank() + 0.5, sum = 0;
  const detcoll_status_t status =
      detcoll_allreduce(&mine, &sum, 1, DETCOLL_FLOAT64, DETCOLL_SUM, "after rejected mode");
  const int p = worldSize();
  expectOnAllRanks(status == DETCOLL_SUCCESS && sum == p * (p - 1) / 2.0 + 0.5 * p,
                   "allreduce after a rejected mode: " + std::to_string(sum));
}

}  // namespace
}  // namespace detcoll
