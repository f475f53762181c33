// Broadcast, allgather, the world queries, and bad input under mpirun, through the C API.
//
// Bad input on one rank must fail the call on every rank with the same status and message, leave
// the output buffers untouched, never hang, and leave the library usable.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
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
using testing::firstDifference;
using testing::randomBuffer;

using testing::Bytes;
using testing::expectOnAllRanks;
using testing::seedFor;
using testing::worldRank;
using testing::worldSize;

std::string statusText(detcoll_status_t status) {
  static const char* const kNames[] = {"SUCCESS", "INVALID_ARGUMENT", "MISMATCH", "TIMEOUT",
                                       "BACKEND", "NOT_INITIALIZED",  "INTERNAL"};
  const int s = static_cast<int>(status);
  return s >= 0 && s < 7 ? kNames[s] : "status(" + std::to_string(s) + ")";
}

detcoll_dtype_t cType(DataType t) {
  return static_cast<detcoll_dtype_t>(t);
}

// Every rank's message, gathered on every rank.
std::vector<std::string> allMessages(const std::string& mine) {
  const int p = worldSize();
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(p), offsets(p);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int j = 0; j < p; ++j) {
    offsets[j] = total;
    total += lengths[j];
  }
  std::vector<char> text(std::max(total, 1));
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, text.data(), lengths.data(), offsets.data(),
                 MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out(p);
  for (int j = 0; j < p; ++j) out[j].assign(text.data() + offsets[j], lengths[j]);
  return out;
}

// The library still works after a failure: an inline and a pipelined allreduce with exact
// expected values.
void expectStillUsable(const std::string& after) {
  const int p = worldSize();
  const int rank = worldRank();
  double mine[3] = {rank + 0.25, -0.5 * rank, 1.0};
  double sum[3] = {0, 0, 0};
  detcoll_status_t status = detcoll_allreduce(mine, sum, 3, DETCOLL_FLOAT64, DETCOLL_SUM, "usable");
  expectOnAllRanks(status == DETCOLL_SUCCESS && sum[0] == p * (p - 1) / 2.0 + 0.25 * p &&
                       sum[1] == -0.25 * p * (p - 1) && sum[2] == p,
                   "after " + after + ": inline allreduce gives " + std::to_string(sum[0]) + " (" +
                       statusText(status) + ", " + detcoll_last_error() + ")");
  const size_t count = 6000;  // 48000 bytes: the pipelined path
  std::vector<int64_t> values(count), total(count, 0);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<int64_t>(i) * (rank + 1) - rank;
  status = detcoll_allreduce(values.data(), total.data(), count, DETCOLL_INT64, DETCOLL_SUM,
                             "usable large");
  bool ok = status == DETCOLL_SUCCESS;
  for (size_t i = 0; i < count && ok; ++i) {
    ok = total[i] == static_cast<int64_t>(i) * p * (p + 1) / 2 - int64_t{p} * (p - 1) / 2;
  }
  expectOnAllRanks(ok, "after " + after + ": pipelined allreduce is wrong (" + statusText(status) +
                           ", " + detcoll_last_error() + ")");
}

// A call that must fail the same way on every rank: status, text, identical message.
void expectSameFailure(const std::string& label, detcoll_status_t status, detcoll_status_t expected,
                       const std::string& mustContain) {
  const std::string message = detcoll_last_error();
  expectOnAllRanks(status == expected, label + ": returned " + statusText(status) + " (" + message +
                                           "), expected " + statusText(expected));
  expectOnAllRanks(message.find(mustContain) != std::string::npos,
                   label + ": message '" + message + "' does not mention '" + mustContain + "'");
  const std::vector<std::string> messages = allMessages(message);
  std::string differing;
  for (size_t j = 1; j < messages.size(); ++j) {
    if (messages[j] != messages[0]) differing += "; rank " + std::to_string(j) + ": " + messages[j];
  }
  EXPECT_TRUE(differing.empty()) << label
                                 << ": messages differ across ranks: rank 0: " << messages[0]
                                 << differing;
  if (worldRank() == 0) std::printf("[ message   ] %s: %s\n", label.c_str(), message.c_str());
}

bool allBytesAre(const Bytes& b, uint8_t value) {
  return std::all_of(b.begin(), b.end(), [&](uint8_t v) { return v == value; });
}

// ---------------------------------------------------------------------------------------------

TEST(World, RankAndSizeMatchMpi) {
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(detcoll_rank(), rank);
  EXPECT_EQ(detcoll_size(), size);
  MPI_Comm node = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            MPI_SUCCESS);
  int localRank = -1, localSize = -1;
  MPI_Comm_rank(node, &localRank);
  MPI_Comm_size(node, &localSize);
  MPI_Comm_free(&node);
  EXPECT_EQ(detcoll_local_rank(), localRank);
  EXPECT_EQ(detcoll_local_size(), localSize);
  EXPECT_GE(detcoll_local_rank(), 0);
  EXPECT_LT(detcoll_local_rank(), detcoll_local_size());
  EXPECT_LE(detcoll_local_size(), detcoll_size());
  // Local ranks are distinct on a node: one node here, so they are a permutation of 0..size-1.
  std::vector<int> locals(size);
  const int mine = detcoll_local_rank();
  MPI_Allgather(&mine, 1, MPI_INT, locals.data(), 1, MPI_INT, MPI_COMM_WORLD);
  if (localSize == size) {
    std::sort(locals.begin(), locals.end());
    for (int j = 0; j < size; ++j) EXPECT_EQ(locals[j], j);
  }
}

// ---------------------------------------------------------------------------------------------
// Broadcast from every root.

void checkBroadcast(DataType type, size_t count, int root) {
  const std::string label = "broadcast " + dataTypeName(type) + " count " + std::to_string(count) +
                            " root " + std::to_string(root);
  const Bytes expected = randomBuffer(type, count, seedFor(label, root));
  Bytes buf = worldRank() == root ? expected
                                  : randomBuffer(type, count, seedFor(label, 1000 + worldRank()));
  const detcoll_status_t status =
      detcoll_broadcast(buf.data(), count, cType(type), root, label.c_str());
  expectOnAllRanks(status == DETCOLL_SUCCESS,
                   label + ": " + statusText(status) + ": " + detcoll_last_error());
  const long i = firstDifference(buf.data(), expected.data(), count, type);
  expectOnAllRanks(i < 0, label + ": element " + std::to_string(i) + " is " +
                              (i < 0 ? "" : describeElement(buf.data(), i, type)) + ", root has " +
                              (i < 0 ? "" : describeElement(expected.data(), i, type)));
}

TEST(Broadcast, FromEveryRoot) {
  for (int root = 0; root < worldSize(); ++root) {
    for (DataType type :
         {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt64}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1023}, size_t{5000}}) {
        checkBroadcast(type, count, root);
      }
    }
    checkBroadcast(DataType::kFloat32, 300007, root);   // 1.2 MB
    checkBroadcast(DataType::kBFloat16, 600001, root);  // 1.2 MB
  }
}

// ---------------------------------------------------------------------------------------------
// Allgather: rank j's data lands at offset j * count on every rank.

void checkAllgather(DataType type, size_t count, bool inPlace) {
  const std::string label = "allgather " + dataTypeName(type) + " count " + std::to_string(count) +
                            (inPlace ? " in place" : " out of place");
  const int p = worldSize();
  const int rank = worldRank();
  const size_t bytes = count * dataTypeSize(type);
  Bytes expected;
  for (int j = 0; j < p; ++j) {
    const Bytes part = randomBuffer(type, count, seedFor(label, j));
    expected.insert(expected.end(), part.begin(), part.end());
  }
  const Bytes mine(expected.begin() + rank * bytes, expected.begin() + (rank + 1) * bytes);
  Bytes recv(bytes * p, 0xee);
  detcoll_status_t status;
  if (inPlace) {
    std::copy(mine.begin(), mine.end(), recv.begin() + rank * bytes);
    status = detcoll_allgather(recv.data() + rank * bytes, recv.data(), count, cType(type),
                               label.c_str());
  } else {
    Bytes send = mine;
    status = detcoll_allgather(send.data(), recv.data(), count, cType(type), label.c_str());
    expectOnAllRanks(send == mine, label + ": sendbuf was modified");
  }
  expectOnAllRanks(status == DETCOLL_SUCCESS,
                   label + ": " + statusText(status) + ": " + detcoll_last_error());
  const long i = firstDifference(recv.data(), expected.data(), count * p, type);
  expectOnAllRanks(i < 0, label + ": element " + std::to_string(i) + " (rank " +
                              std::to_string(count ? i / static_cast<long>(count) : 0) +
                              "'s slot) is " +
                              (i < 0 ? "" : describeElement(recv.data(), i, type)) + ", expected " +
                              (i < 0 ? "" : describeElement(expected.data(), i, type)));
}

TEST(Allgather, EveryRanksDataAtItsOffset) {
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt32}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1023}, size_t{70001}}) {
      checkAllgather(type, count, false);
      checkAllgather(type, count, true);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input. The failing argument is on the last rank only unless said otherwise.

class BadInput : public ::testing::Test {
 protected:
  int p_ = worldSize();
  int rank_ = worldRank();
  bool last() const { return rank_ == p_ - 1; }
};

TEST_F(BadInput, NullSendbufOnOneRank) {
  for (size_t count : {size_t{10}, size_t{100000}}) {
    const std::string label = "null sendbuf count " + std::to_string(count);
    const Bytes input = randomBuffer(DataType::kFloat32, count, seedFor(label, rank_));
    Bytes recv(input.size(), 0x77);
    const detcoll_status_t status =
        detcoll_allreduce(last() ? nullptr : input.data(), recv.data(), count, DETCOLL_FLOAT32,
                          DETCOLL_SUM, "null sendbuf");
    expectSameFailure(label, status, DETCOLL_ERR_INVALID_ARGUMENT, "sendbuf");
    expectOnAllRanks(allBytesAre(recv, 0x77), label + ": recvbuf was written");
    expectStillUsable(label);
  }
}

TEST_F(BadInput, NullRecvbufOnOneRank) {
  const Bytes input = randomBuffer(DataType::kFloat64, 50, seedFor("null recvbuf", rank_));
  Bytes recv(input.size(), 0x77);
  const detcoll_status_t status = detcoll_allreduce(input.data(), last() ? nullptr : recv.data(),
                                                    50, DETCOLL_FLOAT64, DETCOLL_MAX, "null recv");
  expectSameFailure("null recvbuf", status, DETCOLL_ERR_INVALID_ARGUMENT, "recvbuf");
  expectOnAllRanks(allBytesAre(recv, 0x77), "null recvbuf: recvbuf was written");
  expectStillUsable("null recvbuf");
}

TEST_F(BadInput, UnknownDtypeOnOneRank) {
  for (size_t count : {size_t{16}, size_t{20000}}) {
    const std::string label = "dtype 42 count " + std::to_string(count);
    const Bytes input = randomBuffer(DataType::kFloat32, count, seedFor(label, rank_));
    Bytes recv(input.size(), 0x77);
    const auto dtype = last() ? static_cast<detcoll_dtype_t>(42) : DETCOLL_FLOAT32;
    const detcoll_status_t status =
        detcoll_allreduce(input.data(), recv.data(), count, dtype, DETCOLL_SUM, "bad dtype");
    expectSameFailure(label, status, DETCOLL_ERR_INVALID_ARGUMENT, "dtype");
    expectOnAllRanks(allBytesAre(recv, 0x77), label + ": recvbuf was written");
    expectStillUsable(label);
  }
}

TEST_F(BadInput, UnknownOp) {
  for (bool everywhere : {false, true}) {
    const std::string label = everywhere ? "op 9 on every rank" : "op 9 on one rank";
    const Bytes input = randomBuffer(DataType::kFloat32, 64, seedFor(label, rank_));
    Bytes recv(input.size(), 0x77);
    const auto op = everywhere || last() ? static_cast<detcoll_op_t>(9) : DETCOLL_SUM;
    const detcoll_status_t status =
        detcoll_allreduce(input.data(), recv.data(), 64, DETCOLL_FLOAT32, op, "bad op");
    expectSameFailure(label, status, DETCOLL_ERR_INVALID_ARGUMENT, "op");
    expectOnAllRanks(allBytesAre(recv, 0x77), label + ": recvbuf was written");
    expectStillUsable(label);
  }
}

TEST_F(BadInput, PartiallyOverlappingBuffersOnOneRank) {
  Bytes buf = randomBuffer(DataType::kFloat32, 200, seedFor("overlap", rank_));
  const Bytes before = buf;
  Bytes recv(400, 0x77);
  const void* send = buf.data();
  void* out = last() ? static_cast<void*>(buf.data() + 4) : static_cast<void*>(recv.data());
  const detcoll_status_t status =
      detcoll_allreduce(send, out, 100, DETCOLL_FLOAT32, DETCOLL_SUM, "overlap");
  expectSameFailure("overlap", status, DETCOLL_ERR_INVALID_ARGUMENT, "overlap");
  expectOnAllRanks(buf == before && allBytesAre(recv, 0x77), "overlap: a buffer was written");
  expectStillUsable("overlap");
}

TEST_F(BadInput, CountDiffersAcrossRanks) {
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  // Both counts inline; then one rank above the inline limit and the others below it.
  for (size_t base : {size_t{100}, size_t{4000}}) {
    const std::string label = "count differs from " + std::to_string(base);
    const size_t count = rank_ == 0 && base == 4000 ? 5000 : base + (last() ? 1 : 0);
    const Bytes input = randomBuffer(DataType::kFloat32, count, seedFor(label, rank_));
    Bytes recv(input.size(), 0x77);
    const detcoll_status_t status =
        detcoll_allreduce(input.data(), recv.data(), count, DETCOLL_FLOAT32, DETCOLL_SUM, "counts");
    expectSameFailure(label, status, DETCOLL_ERR_MISMATCH, "element count");
    expectOnAllRanks(allBytesAre(recv, 0x77), label + ": recvbuf was written");
    expectStillUsable(label);
  }
}

TEST_F(BadInput, NameDiffersAcrossRanks) {
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  const Bytes input = randomBuffer(DataType::kFloat32, 32, seedFor("names", rank_));
  Bytes recv(input.size(), 0x77);
  const detcoll_status_t status =
      detcoll_allreduce(input.data(), recv.data(), 32, DETCOLL_FLOAT32, DETCOLL_SUM,
                        last() ? "layer2.bias" : "layer1.weight");
  expectSameFailure("names differ", status, DETCOLL_ERR_MISMATCH, "name");
  expectOnAllRanks(allBytesAre(recv, 0x77), "names differ: recvbuf was written");
  expectStillUsable("names differ");
}

TEST_F(BadInput, LongNamesDifferingPastTheWireFieldAreCaught) {
  // The call header carries 64 bytes of the name; the rest must still be compared.
  const std::string common(100, 'n');
  const Bytes input = randomBuffer(DataType::kFloat32, 32, seedFor("long names", rank_));
  Bytes recv(input.size(), 0x77);
  detcoll_status_t status = detcoll_allreduce(input.data(), recv.data(), 32, DETCOLL_FLOAT32,
                                              DETCOLL_SUM, (common + ".same").c_str());
  expectOnAllRanks(status == DETCOLL_SUCCESS,
                   "equal long names: " + statusText(status) + ": " + detcoll_last_error());
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  std::fill(recv.begin(), recv.end(), 0x77);
  status = detcoll_allreduce(input.data(), recv.data(), 32, DETCOLL_FLOAT32, DETCOLL_SUM,
                             (common + (last() ? ".b" : ".a")).c_str());
  expectSameFailure("long names differ", status, DETCOLL_ERR_MISMATCH, "name");
  expectOnAllRanks(allBytesAre(recv, 0x77), "long names differ: recvbuf was written");
  expectStillUsable("long names differ");
}

TEST_F(BadInput, DtypeOrOpDiffersAcrossRanks) {
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  Bytes input = randomBuffer(DataType::kFloat64, 32, seedFor("dtype differs", rank_));
  Bytes recv(input.size(), 0x77);
  detcoll_status_t status =
      detcoll_allreduce(input.data(), recv.data(), 32, last() ? DETCOLL_INT64 : DETCOLL_FLOAT64,
                        DETCOLL_SUM, "dtypes");
  expectSameFailure("dtype differs", status, DETCOLL_ERR_MISMATCH, "dtype");
  status = detcoll_allreduce(input.data(), recv.data(), 32, DETCOLL_FLOAT64,
                             last() ? DETCOLL_MAX : DETCOLL_SUM, "ops");
  expectSameFailure("op differs", status, DETCOLL_ERR_MISMATCH, "op");
  expectOnAllRanks(allBytesAre(recv, 0x77), "dtype/op differs: recvbuf was written");
  expectStillUsable("dtype/op differs");
}

TEST_F(BadInput, ModeDiffersAcrossRanks) {
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  if (rank_ == 0) {
    EXPECT_EQ(detcoll_set_mode(DETCOLL_MODE_NATIVE), DETCOLL_SUCCESS);
  }
  const Bytes input = randomBuffer(DataType::kFloat32, 32, seedFor("modes", rank_));
  Bytes recv(input.size(), 0x77);
  const detcoll_status_t status =
      detcoll_allreduce(input.data(), recv.data(), 32, DETCOLL_FLOAT32, DETCOLL_SUM, "modes");
  EXPECT_EQ(detcoll_set_mode(DETCOLL_MODE_ORDERED), DETCOLL_SUCCESS);
  EXPECT_EQ(detcoll_get_mode(), DETCOLL_MODE_ORDERED);
  expectSameFailure("modes differ", status, DETCOLL_ERR_MISMATCH, "determinism mode");
  expectOnAllRanks(allBytesAre(recv, 0x77), "modes differ: recvbuf was written");
  expectStillUsable("modes differ");
}

TEST_F(BadInput, LeavesNullOrZeroOnOneRank) {
  const Bytes input = randomBuffer(DataType::kFloat32, 40, seedFor("leaves", rank_));
  const void* leaves[1] = {input.data()};
  Bytes recv(input.size(), 0x77);
  detcoll_status_t status = detcoll_allreduce_leaves(last() ? nullptr : leaves, 1, recv.data(), 40,
                                                     DETCOLL_FLOAT32, DETCOLL_SUM, "leaves");
  expectSameFailure("leaves null", status, DETCOLL_ERR_INVALID_ARGUMENT, "leaves");
  status = detcoll_allreduce_leaves(leaves, last() ? 0 : 1, recv.data(), 40, DETCOLL_FLOAT32,
                                    DETCOLL_SUM, "leaves");
  expectSameFailure("nleaves 0", status, DETCOLL_ERR_INVALID_ARGUMENT, "nleaves");
  expectOnAllRanks(allBytesAre(recv, 0x77), "leaves: recvbuf was written");
  expectStillUsable("leaves");
}

TEST_F(BadInput, BroadcastRootOutOfRange) {
  struct Variant {
    const char* label;
    int root;
  };
  const Variant variants[] = {{"root = size on every rank", p_},
                              {"root = -1 on every rank", -1},
                              {"root = size on the last rank", last() ? p_ : 0}};
  for (const Variant& v : variants) {
    Bytes buf = randomBuffer(DataType::kFloat64, 300, seedFor(v.label, rank_));
    const Bytes before = buf;
    const detcoll_status_t status =
        detcoll_broadcast(buf.data(), 300, DETCOLL_FLOAT64, v.root, "bcast");
    expectSameFailure(v.label, status, DETCOLL_ERR_INVALID_ARGUMENT, "root");
    expectOnAllRanks(buf == before, std::string(v.label) + ": buf was written");
    expectStillUsable(v.label);
  }
}

TEST_F(BadInput, BroadcastDisagreements) {
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  Bytes buf = randomBuffer(DataType::kFloat32, 300, seedFor("bcast count", rank_));
  const Bytes before = buf;
  detcoll_status_t status =
      detcoll_broadcast(buf.data(), last() ? 299 : 300, DETCOLL_FLOAT32, 0, "bcast");
  expectSameFailure("broadcast count differs", status, DETCOLL_ERR_MISMATCH, "element count");
  status = detcoll_broadcast(buf.data(), 300, DETCOLL_FLOAT32, last() ? 1 : 0, "bcast");
  expectSameFailure("broadcast root differs", status, DETCOLL_ERR_MISMATCH, "root");
  status = detcoll_broadcast(last() ? nullptr : buf.data(), 300, DETCOLL_FLOAT32, 0, "bcast");
  expectSameFailure("broadcast null buf", status, DETCOLL_ERR_INVALID_ARGUMENT, "buf");
  expectOnAllRanks(buf == before, "broadcast disagreements: buf was written");
  expectStillUsable("broadcast disagreements");
}

TEST_F(BadInput, AllgatherNullSendbufOrCountDiffers) {
  const size_t count = 500;
  const Bytes input = randomBuffer(DataType::kInt32, count, seedFor("allgather bad", rank_));
  Bytes recv(input.size() * p_, 0x77);
  detcoll_status_t status = detcoll_allgather(last() ? nullptr : input.data(), recv.data(), count,
                                              DETCOLL_INT32, "gather");
  expectSameFailure("allgather null sendbuf", status, DETCOLL_ERR_INVALID_ARGUMENT, "sendbuf");
  if (p_ >= 2) {
    status = detcoll_allgather(input.data(), recv.data(), last() ? count - 1 : count, DETCOLL_INT32,
                               "gather");
    expectSameFailure("allgather count differs", status, DETCOLL_ERR_MISMATCH, "element count");
  }
  expectOnAllRanks(allBytesAre(recv, 0x77), "allgather: recvbuf was written");
  expectStillUsable("allgather errors");
}

TEST_F(BadInput, MakingDifferentCallsFailsEverywhere) {
  if (p_ < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  Bytes buf = randomBuffer(DataType::kFloat32, 64, seedFor("different calls", rank_));
  const Bytes before = buf;
  Bytes recv(buf.size(), 0x77);
  const detcoll_status_t status =
      last() ? detcoll_broadcast(buf.data(), 64, DETCOLL_FLOAT32, 0, "x")
             : detcoll_allreduce(buf.data(), recv.data(), 64, DETCOLL_FLOAT32, DETCOLL_SUM, "x");
  expectSameFailure("broadcast against allreduce", status, DETCOLL_ERR_MISMATCH, "different calls");
  expectOnAllRanks(buf == before && allBytesAre(recv, 0x77), "different calls: output written");
  expectStillUsable("different calls");
}

}  // namespace
}  // namespace detcoll
