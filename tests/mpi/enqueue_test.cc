// detcoll_enqueue under mpirun: reduce-scatters and alltoalls described whole, with shapes,
// through the fusion engine. Every rank regenerates every rank's input from its seed, so each
// checks its own block against the independent references (tests/support/reference.h for the
// ordered and native modes, the MPFR reference for invariant) and against the slice of the
// blocking allreduce. Then the disagreements, each failing every rank with DETCOLL_ERR_MISMATCH:
// equal counts of different shapes, reduce-scatter blocks that differ on one rank, alltoall
// counts that a sender does not send. Every wait is bounded by the engine's stall limit.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
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
using testing::expectOnAllRanks;
using testing::seedFor;
using testing::worldRank;
using testing::worldSize;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Enqueues r and waits; the status, and the last error in *text.
detcoll_status_t enqueueAndWait(const detcoll_request_desc_t& r, std::string* text) {
  detcoll_handle_t h = nullptr;
  detcoll_status_t s = detcoll_enqueue(&r, &h);
  if (s == DETCOLL_SUCCESS) s = detcoll_wait(h);
  *text = s == DETCOLL_SUCCESS ? "" : detcoll_last_error();
  return s;
}

// Every rank's input, as every rank regenerates it.
std::vector<Bytes> everyInput(const std::string& label, DataType type, size_t count) {
  std::vector<Bytes> inputs;
  for (int r = 0; r < worldSize(); ++r) {
    inputs.push_back(testing::randomBuffer(type, count, seedFor(label, r)));
  }
  return inputs;
}

std::vector<const void*> pointers(const std::vector<Bytes>& buffers) {
  std::vector<const void*> out;
  for (const Bytes& b : buffers) out.push_back(b.data());
  return out;
}

// Horovod's split of rows: the first rows % p ranks take one more, times the row length.
std::vector<size_t> horovodSplit(size_t rows, size_t rowLength) {
  const size_t p = static_cast<size_t>(worldSize());
  std::vector<size_t> blocks;
  for (size_t j = 0; j < p; ++j) blocks.push_back((rows / p + (j < rows % p ? 1 : 0)) * rowLength);
  return blocks;
}

struct ModeCase {
  detcoll_mode_t mode;
  const char* name;
};
constexpr ModeCase kModes[] = {{DETCOLL_MODE_ORDERED, "ordered"},
                               {DETCOLL_MODE_INVARIANT, "invariant"},
                               {DETCOLL_MODE_NATIVE, "native"}};

TEST(EnqueueCApiTest, ReducescatterMatchesTheReferencesAndTheAllreduce) {
  const int p = worldSize();
  const int me = worldRank();
  std::string failure;
  for (const ModeCase& mode : kModes) {
    ASSERT_EQ(detcoll_set_mode(mode.mode), DETCOLL_SUCCESS);
    for (DataType type :
         {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16, DataType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        const size_t es = dataTypeSize(type);
        // A tensor of (2p + 1) rows of 1237 elements: blocks of uneven rows, over many segments.
        const size_t rows = 2 * p + 1, rowLength = 1237;
        const std::vector<size_t> blocks = horovodSplit(rows, rowLength);
        const size_t count = rows * rowLength;
        const std::string label = std::string("rs/") + mode.name + "/" + testing::typeName(type) +
                                  "/" + testing::opName(op);
        const std::vector<Bytes> inputs = everyInput(label, type, count);
        Bytes want(count * es + 1);
        if (mode.mode == DETCOLL_MODE_INVARIANT) {
          testing::exactInvariantReference(want.data(), pointers(inputs), count, type, op);
        } else {
          testing::referenceFold(want.data(), pointers(inputs), count, type, op, p);
        }
        size_t offset = 0;
        for (int j = 0; j < me; ++j) offset += blocks[j];
        Bytes block(blocks[me] * es);
        const int64_t shape[2] = {static_cast<int64_t>(rows), static_cast<int64_t>(rowLength)};
        detcoll_request_desc_t r{};
        r.kind = DETCOLL_REQUEST_REDUCESCATTER;
        r.sendbuf = inputs[me].data();
        r.recvbuf = block.data();
        r.counts = blocks.data();
        r.dtype = testing::cType(type);
        r.op = testing::cOp(op);
        r.name = label.c_str();
        r.shape = shape;
        r.ndim = 2;
        std::string text;
        const detcoll_status_t s = enqueueAndWait(r, &text);
        // The blocking allreduce of the same inputs (ordered stands for native: that is MPI's).
        if (mode.mode == DETCOLL_MODE_NATIVE) detcoll_set_mode(DETCOLL_MODE_ORDERED);
        Bytes all(count * es);
        const detcoll_status_t sa =
            detcoll_allreduce(inputs[me].data(), all.data(), count, testing::cType(type),
                              testing::cOp(op), (label + "/allreduce").c_str());
        detcoll_set_mode(mode.mode);
        if (!failure.empty()) continue;
        if (s != DETCOLL_SUCCESS || sa != DETCOLL_SUCCESS) {
          failure = label + ": status " + std::to_string(s) + " " + std::to_string(sa) + ": " +
                    text + detcoll_last_error();
        } else if (std::memcmp(block.data(), want.data() + offset * es, block.size()) != 0) {
          const long i =
              testing::firstDifference(block.data(), want.data() + offset * es, blocks[me], type);
          failure = label + ": element " + std::to_string(i) + " of the block differs from the " +
                    "reference: " + testing::describeElement(block.data(), i, type) + " vs " +
                    testing::describeElement(want.data() + offset * es, i, type);
        } else if (std::memcmp(block.data(), all.data() + offset * es, block.size()) != 0) {
          failure = label + ": the block differs from the allreduce's slice";
        }
      }
    }
  }
  detcoll_set_mode(DETCOLL_MODE_ORDERED);
  expectOnAllRanks(failure.empty(), failure);
}

// counts[i][j]: elements rank i sends rank j, the same matrix on every rank (one seed).
std::vector<std::vector<size_t>> countMatrix(const std::string& label, size_t row) {
  const int p = worldSize();
  std::mt19937_64 g(testing::hashText(label));
  std::vector<std::vector<size_t>> c(p, std::vector<size_t>(p));
  for (auto& counts : c) {
    for (size_t& n : counts) n = g() % 4 == 0 ? 0 : (1 + g() % 3000) * row;
  }
  return c;
}

TEST(EnqueueCApiTest, AlltoallMatchesTheReference) {
  const int p = worldSize();
  const int me = worldRank();
  std::string failure;
  for (DataType type :
       {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kInt32}) {
    for (int trial = 0; trial < 3; ++trial) {
      const size_t es = dataTypeSize(type);
      const size_t row = 1 + trial;  // elements of a row: the shape is (row,)
      const std::string label = "a2a/" + testing::typeName(type) + "/" + std::to_string(trial);
      const auto c = countMatrix(label, row);
      std::vector<size_t> recvCounts;
      for (int i = 0; i < p; ++i) recvCounts.push_back(c[i][me]);
      // Every rank's send buffer, regenerated here.
      std::vector<Bytes> send;
      for (int i = 0; i < p; ++i) {
        size_t total = 0;
        for (size_t n : c[i]) total += n;
        send.push_back(testing::randomBuffer(type, total, seedFor(label, i)));
      }
      Bytes want;
      for (int i = 0; i < p; ++i) {
        size_t offset = 0;
        for (int j = 0; j < me; ++j) offset += c[i][j];
        want.insert(want.end(), send[i].begin() + offset * es,
                    send[i].begin() + (offset + c[i][me]) * es);
      }
      Bytes recv(want.size() + 1, 0xa5);
      const int64_t shape[1] = {static_cast<int64_t>(row)};
      detcoll_request_desc_t r{};
      r.kind = DETCOLL_REQUEST_ALLTOALL;
      r.sendbuf = send[me].data();
      r.recvbuf = recv.data();
      r.counts = c[me].data();
      r.recvcounts = recvCounts.data();
      r.dtype = testing::cType(type);
      r.name = label.c_str();
      r.shape = shape;
      r.ndim = 1;
      std::string text;
      const detcoll_status_t s = enqueueAndWait(r, &text);
      if (!failure.empty()) continue;
      if (s != DETCOLL_SUCCESS) {
        failure = label + ": status " + std::to_string(s) + ": " + text;
      } else if (std::memcmp(recv.data(), want.data(), want.size()) != 0 || recv.back() != 0xa5) {
        failure = label + ": the received blocks differ from the reference";
      }
    }
  }
  expectOnAllRanks(failure.empty(), failure);
}

TEST(EnqueueCApiErrorTest, EqualCountsOfDifferentShapesFailEveryRank) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  std::vector<float> send(6, 1.0f), recv(6);
  const int64_t agreed[2] = {2, 3}, odd[2] = {3, 2};
  detcoll_request_desc_t r{};
  r.kind = DETCOLL_REQUEST_ALLREDUCE;
  r.sendbuf = send.data();
  r.recvbuf = recv.data();
  r.count = 6;
  r.dtype = DETCOLL_FLOAT32;
  r.op = DETCOLL_SUM;
  r.name = "shape.allreduce";
  r.shape = worldRank() == 1 ? odd : agreed;
  r.ndim = 2;
  std::string text;
  detcoll_status_t s = enqueueAndWait(r, &text);
  bool ok = s == DETCOLL_ERR_MISMATCH && contains(text, "'shape.allreduce'") &&
            contains(text, "rank 1 has allreduce float32[6] shape (3, 2)") &&
            contains(text, "shape (2, 3)");
  expectOnAllRanks(ok, "allreduce: status " + std::to_string(s) + ": " + text);

  // A reduce-scatter of equal blocks with another shape on the last rank.
  const std::vector<size_t> blocks(p, 2);
  const int64_t rows[2] = {p, 2}, flat[1] = {2 * p};
  std::vector<float> big(2 * p, 1.0f);
  r = detcoll_request_desc_t{};
  r.kind = DETCOLL_REQUEST_REDUCESCATTER;
  r.sendbuf = big.data();
  r.recvbuf = recv.data();
  r.counts = blocks.data();
  r.dtype = DETCOLL_FLOAT32;
  r.op = DETCOLL_SUM;
  r.name = "shape.reducescatter";
  const bool last = worldRank() == p - 1;
  r.shape = last ? flat : rows;
  r.ndim = last ? 1 : 2;
  s = enqueueAndWait(r, &text);
  const std::string count = "float32[" + std::to_string(2 * p) + "]";
  ok = s == DETCOLL_ERR_MISMATCH && contains(text, "'shape.reducescatter'") &&
       contains(text, "rank " + std::to_string(p - 1) + " has reducescatter " + count + " shape (" +
                          std::to_string(2 * p) + ",)") &&
       contains(text, "shape (" + std::to_string(p) + ", 2)");
  expectOnAllRanks(ok, "reducescatter: status " + std::to_string(s) + ": " + text);

  // The engine goes on: the same name with agreeing shapes completes.
  r.shape = rows;
  r.ndim = 2;
  s = enqueueAndWait(r, &text);
  expectOnAllRanks(s == DETCOLL_SUCCESS && recv[0] == static_cast<float>(p),
                   "after the mismatch: status " + std::to_string(s) + ": " + text);
}

TEST(EnqueueCApiErrorTest, ReducescatterBlocksThatDifferOnOneRankFailEveryRank) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  // The same total on every rank; rank 1 moves an element from block 0 to block 1.
  std::vector<size_t> blocks(p, 4);
  if (worldRank() == 1) {
    blocks[0] = 3;
    blocks[1] = 5;
  }
  std::vector<double> send(4 * p, 0.25), recv(5);
  detcoll_request_desc_t r{};
  r.kind = DETCOLL_REQUEST_REDUCESCATTER;
  r.sendbuf = send.data();
  r.recvbuf = recv.data();
  r.counts = blocks.data();
  r.dtype = DETCOLL_FLOAT64;
  r.op = DETCOLL_SUM;
  r.name = "rs.blocks";
  std::string text;
  const detcoll_status_t s = enqueueAndWait(r, &text);
  const bool ok = s == DETCOLL_ERR_MISMATCH && contains(text, "'rs.blocks'") &&
                  contains(text, "rank 1 has reducescatter float64[" + std::to_string(4 * p) +
                                     "] in blocks of 3, 5") &&
                  contains(text, "in blocks of 4, 4");
  expectOnAllRanks(ok, "status " + std::to_string(s) + ": " + text);
}

TEST(EnqueueCApiErrorTest, AlltoallCountsThatASenderDoesNotSendFailEveryRank) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  const int me = worldRank();
  // Every rank sends 3 elements to each; rank 1 expects 4 from rank 0.
  std::vector<size_t> sendCounts(p, 3), recvCounts(p, 3);
  if (me == 1) recvCounts[0] = 4;
  std::vector<int32_t> send(3 * p, me), recv(3 * p + 1, -1);
  detcoll_request_desc_t r{};
  r.kind = DETCOLL_REQUEST_ALLTOALL;
  r.sendbuf = send.data();
  r.recvbuf = recv.data();
  r.counts = sendCounts.data();
  r.recvcounts = recvCounts.data();
  r.dtype = DETCOLL_INT32;
  r.name = "a2a.counts";
  std::string text;
  const detcoll_status_t s = enqueueAndWait(r, &text);
  const bool ok = s == DETCOLL_ERR_MISMATCH &&
                  contains(text, "rank 0 sends 3 elements to rank 1, which expects 4");
  expectOnAllRanks(ok, "status " + std::to_string(s) + ": " + text);
  // Nothing arrived anywhere.
  bool untouched = true;
  for (int32_t v : recv) untouched = untouched && v == -1;
  expectOnAllRanks(untouched, "the receive buffer was written");
}

}  // namespace
}  // namespace detcoll
