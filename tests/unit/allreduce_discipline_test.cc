// The schedule's discipline (collective/pipeline.h, collective/allreduce.h), on ranks as threads:
// - scratch: every stage releases what it allocated, so an allreduce of many chunks (invariant
//   mode with several leaves per rank) holds no more scratch at its peak than one of two chunks;
// - failures: a kernel that fails on one rank (as a device executor does: it reports the failure
//   and runs no more kernels) fails the call on every rank with the same status, in bounded time,
//   over an exchange whose agreement reaches the other ranks (as NCCL's does); no rank returns
//   success with a result a peer did not finish.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/agreement.h"
#include "collective/allreduce.h"
#include "collective/comm_exchange.h"
#include "collective/transport/thread_communicator.h"
#include "kernels/host_reduce_kernels.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using collective::AllreduceOptions;
using collective::transport::Communicator;
using kernels::Pieces;
using testing::Buffer;

// The CPU's kernels, counting the scratch they hand out: `live` bytes now, `peak` the most.
// When `failAfterFolds` >= 0, the kernels fail (status BACKEND) once that many folds have run,
// and do nothing afterwards, as a device executor does after a failed launch.
class WatchedKernels {
 public:
  explicit WatchedKernels(int failAfterFolds = -1) : failAfterFolds_(failAfterFolds) {}

  template <typename T>
  T* alloc(int64_t n) {
    live_ += static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    peak_ = std::max(peak_, live_);
    return host_.alloc<T>(n);
  }
  size_t mark() {
    marks_.push_back(live_);
    return host_.mark();
  }
  void release(size_t mark) {
    host_.release(mark);
    if (!marks_.empty()) {
      live_ = marks_.back();
      marks_.pop_back();
    }
  }
  Status status() const {
    return failed_ ? Status::backend("a kernel launch failed") : Status::ok();
  }
  void* stream() const { return nullptr; }
  Pieces table(const void* const* pointers, int k) { return host_.table(pointers, k); }

  void fold(void* out, const Pieces& pieces, int k, int64_t n, DataType type, ReduceOp op,
            int64_t divisor, bool vectorized) {
    if (run()) host_.fold(out, pieces, k, n, type, op, divisor, vectorized);
    if (failAfterFolds_ >= 0 && ++folds_ > failAfterFolds_) failed_ = true;
  }
  void localKeys(void* keys, const Pieces& leaves, int nleaves, int64_t n, DataType type,
                 bool vectorized) {
    if (run()) host_.localKeys(keys, leaves, nleaves, n, type, vectorized);
  }
  void foldKeys(void* out, const Pieces& pieces, int p, int64_t n, DataType type) {
    if (run()) host_.foldKeys(out, pieces, p, n, type);
  }
  void encode(int64_t* out, const Pieces& leaves, int nleaves, const void* keys, int64_t n,
              DataType type, bool vectorized) {
    if (run()) host_.encode(out, leaves, nleaves, keys, n, type, vectorized);
  }
  void decode(void* out, const Pieces& sums, int p, const void* keys, int64_t n, DataType type,
              ReduceOp op, int64_t leaves, bool vectorized) {
    if (run()) host_.decode(out, sums, p, keys, n, type, op, leaves, vectorized);
    if (failAfterFolds_ >= 0 && ++folds_ > failAfterFolds_) failed_ = true;
  }
  void invariantLocal(void* out, const Pieces& pieces, int p, int64_t n, DataType type, ReduceOp op,
                      bool vectorized) {
    if (run()) host_.invariantLocal(out, pieces, p, n, type, op, vectorized);
    if (failAfterFolds_ >= 0 && ++folds_ > failAfterFolds_) failed_ = true;
  }

  size_t peak() const { return peak_; }

 private:
  bool run() const { return !failed_; }

  kernels::HostReduceKernels host_;
  const int failAfterFolds_;
  int folds_ = 0;
  bool failed_ = false;
  size_t live_ = 0;
  size_t peak_ = 0;
  std::vector<size_t> marks_;
};

// CommExchange whose agreement reaches every rank, over a communicator of its own, as
// NcclTransport's does over the host communicator.
class AgreeingExchange : public collective::CommExchange {
 public:
  AgreeingExchange(Communicator& comm, Communicator& agreement)
      : CommExchange(comm), agreement_(agreement) {}
  Status agree(const Status& local) override {
    return collective::agreeOnStatus(agreement_, local);
  }

 private:
  Communicator& agreement_;
};

AllreduceOptions invariantOptions(const std::vector<const void*>& mine, void* recv, size_t count,
                                  int64_t total, size_t segmentBytes) {
  AllreduceOptions o;
  o.mode = Mode::kInvariant;
  o.leaves = mine.data();
  o.nleaves = static_cast<int>(mine.size());
  o.recv = recv;
  o.count = count;
  o.type = DataType::kFloat32;
  o.op = ReduceOp::kSum;
  o.totalLeaves = total;
  o.segmentBytes = segmentBytes;
  return o;
}

// Invariant sum of two leaves per rank over p ranks; returns rank 0's peak scratch and checks
// every rank's bits against the MPFR reference.
size_t peakScratchOf(int p, size_t count, size_t segmentBytes) {
  const std::vector<Buffer> leaves = testing::makeInputs(DataType::kFloat32, 2 * p, count, count);
  Buffer expected(count * 4);
  testing::exactInvariantReference(expected.data(), testing::pointers(leaves), count,
                                   DataType::kFloat32, ReduceOp::kSum);
  std::vector<Buffer> out(p, Buffer(count * 4));
  std::vector<Status> status(p);
  std::vector<size_t> peak(p);
  const Status spawned = collective::transport::spawn(p, [&](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<const void*> mine = {leaves[2 * r].data(), leaves[2 * r + 1].data()};
    WatchedKernels kernels;
    collective::CommExchange exchange(comm);
    status[r] = collective::allreduceWith(
        kernels, exchange, invariantOptions(mine, out[r].data(), count, 2 * p, segmentBytes));
    peak[r] = kernels.peak();
  });
  EXPECT_TRUE(spawned.isOk()) << spawned.toString();
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(status[r].isOk()) << "rank " << r << ": " << status[r].toString();
    EXPECT_TRUE(testing::sameBits(out[r].data(), expected.data(), count, DataType::kFloat32))
        << "rank " << r;
  }
  return peak[0];
}

TEST(AllreduceDisciplineTest, ScratchDoesNotGrowWithTheNumberOfChunks) {
  // 1 KiB segments: a chunk is 128 elements per rank, so 40 * 3 * 128 elements are 40 chunks.
  const int p = 3;
  const size_t segmentBytes = 1024;
  const size_t chunk = segmentBytes / sizeof(int64_t) * p;
  const size_t two = peakScratchOf(p, 2 * chunk, segmentBytes);
  const size_t forty = peakScratchOf(p, 40 * chunk, segmentBytes);
  EXPECT_GT(two, 0u);
  EXPECT_EQ(forty, two) << "the peak scratch grew with the number of chunks";
}

// Runs `fn` on p ranks as threads; fails the test and ends the process if they do not all return
// within a minute (a hang must fail the run, not stall it).
void spawnBounded(int p, const std::function<void(Communicator&)>& fn) {
  std::mutex mutex;
  std::condition_variable done;
  bool finished = false;
  Status spawned;
  std::thread runner([&] {
    const Status s = collective::transport::spawn(p, fn);
    std::lock_guard<std::mutex> lock(mutex);
    spawned = s;
    finished = true;
    done.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  if (!done.wait_for(lock, std::chrono::seconds(60), [&] { return finished; })) {
    std::fprintf(stderr, "FAILED: the ranks did not all return within 60 s (a hang)\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
  lock.unlock();
  runner.join();
  EXPECT_TRUE(spawned.isOk()) << spawned.toString();
}

void expectKernelFailureOnEveryRank(Mode mode, int leavesPerRank, size_t count,
                                    size_t segmentBytes) {
  const int p = 3;
  const std::vector<Buffer> leaves =
      testing::makeInputs(DataType::kFloat32, leavesPerRank * p, count, 77);
  std::vector<Status> status(p);
  spawnBounded(p, [&](Communicator& comm) {
    const int r = comm.rank();
    auto agreement = dynamic_cast<collective::transport::ThreadCommunicator&>(comm).duplicate();
    std::vector<const void*> mine;
    for (int l = 0; l < leavesPerRank; ++l) mine.push_back(leaves[leavesPerRank * r + l].data());
    Buffer out(count * 4);
    AllreduceOptions o = invariantOptions(mine, out.data(), count, leavesPerRank * p, segmentBytes);
    o.mode = mode;
    WatchedKernels kernels(r == 1 ? 0 : -1);  // rank 1's first fold fails
    AgreeingExchange exchange(comm, *agreement);
    status[r] = collective::allreduceWith(kernels, exchange, o);
  });
  testing::expectSameFailureEverywhere(status, StatusCode::kBackend,
                                       {"rank 1", "a kernel launch failed"});
}

TEST(AllreduceDisciplineTest, AKernelFailureOnOneRankFailsEveryRankInOrderedMode) {
  expectKernelFailureOnEveryRank(Mode::kOrdered, 1, 4096, 1 << 20);
  expectKernelFailureOnEveryRank(Mode::kOrdered, 1, 4096, 256);  // many rounds
}

TEST(AllreduceDisciplineTest, AKernelFailureOnOneRankFailsEveryRankAcrossInvariantChunks) {
  expectKernelFailureOnEveryRank(Mode::kInvariant, 1, 4096, 256);
  expectKernelFailureOnEveryRank(Mode::kInvariant, 2, 4096, 64);  // many chunks of two stages
}

}  // namespace
}  // namespace detcoll
