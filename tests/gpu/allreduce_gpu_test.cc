// The GPU allreduce (collective/device_allreduce.h: the schedule of collective/allreduce.h with the
// device's kernel bodies) on P simulated ranks in one process
// (tests/gpu/simulated_ranks.h: a thread and a stream per rank, device-to-device copies for the
// transfers), every rank's leaves in device memory, against the CPU reference bit for bit on every
// rank:
//   ordered    kernels::foldRankOrder over the rank contributions (a rank with several leaves
//              contributes them folded in order: summed for average, else by the op), average
//              dividing by the number of leaves;
//   invariant  kernels::invariantReduceLocal over every leaf, the same bits whatever the number
//              of ranks the leaves are spread over;
//   native     integer-valued data, where every order of summation is exact.
// P = 1, 2, 3, 4, 5, 8; one leaf per rank and uneven numbers of leaves; every dtype; sum,
// average, min and max; counts from 1 (most shards empty) to 2^20 + 3; pipeline segments of 256
// and 4096 bytes (many rounds) and the default; in place and out of place; buffers at 16-byte
// boundaries and one element off; random non-integer inputs over the whole exponent range, with
// and without inf and NaN. The device path must also give the CPU path's bits
// (collective::allreduce over ranks as threads), leave
// the leaves and the bytes around recv alone, and (built with NCCL) give the same over an NCCL
// communicator of one rank. Skips, saying so, when no GPU is present.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "collective/allreduce.h"
#include "collective/device_allreduce.h"
#include "collective/transport/exchange.h"
#include "collective/transport/thread_communicator.h"
#include "common/dtype.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"
#include "tests/gpu/device_buffers.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/simulated_ranks.h"
#include "tests/support/reference.h"
#include "tests/support/wide_bits.h"

#if defined(DETCOLL_GPU_TEST_NCCL) && DETCOLL_GPU_TEST_NCCL
#include "collective/transport/nccl_transport.h"
#endif

namespace detcoll {
namespace {

using testing::Buffer;
using testing::isFloatType;
using testing::kSentinel;
using testing::pointersOf;
using testing::sameBits;

constexpr int kWorlds[] = {1, 2, 3, 4, 5, 8};
constexpr size_t kLarge = (size_t{1} << 20) + 3;

// One allreduce call, the same on every rank.
struct Case {
  Mode mode = Mode::kOrdered;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<int> spread;  // leaves per rank
  size_t count = 0;
  size_t segmentBytes = collective::kDeviceSegmentBytes;
  bool inPlace = false;     // recv is the rank's first leaf
  bool misaligned = false;  // every buffer one element past a 16-byte boundary
  bool specials = false;    // inf and NaN among the leaves

  Case() = default;
  Case(Mode mode_, DataType type_, ReduceOp op_, std::vector<int> spread_, size_t count_,
       size_t segmentBytes_)
      : mode(mode_),
        type(type_),
        op(op_),
        spread(std::move(spread_)),
        count(count_),
        segmentBytes(segmentBytes_) {}

  int ranks() const { return static_cast<int>(spread.size()); }
  int totalLeaves() const { return std::accumulate(spread.begin(), spread.end(), 0); }
  int firstLeaf(int rank) const {
    return std::accumulate(spread.begin(), spread.begin() + rank, 0);
  }
  std::string name() const {
    std::string s = modeName(mode) + " " + dataTypeName(type) + " " + reduceOpName(op) +
                    " P=" + std::to_string(ranks()) + " leaves=";
    for (size_t r = 0; r < spread.size(); ++r) s += (r ? "," : "") + std::to_string(spread[r]);
    s += " count=" + std::to_string(count) + " segment=" + std::to_string(segmentBytes) +
         (inPlace ? " in place" : " out of place") + (misaligned ? " misaligned" : " aligned") +
         (specials ? " with inf/NaN" : "");
    return s;
  }
};

// The leaves of a case, in rank order: wide-range random values, or small integers for native
// (whose sums are exact in every order and every dtype: at most 16 leaves of at most 15).
std::vector<Buffer> leavesFor(const Case& c, uint64_t seed) {
  if (c.mode == Mode::kNative) {
    return testing::integerLeaves(c.type, c.totalLeaves(), c.count, seed, 15);
  }
  return testing::wideLeaves(c.type, c.totalLeaves(), c.count, seed, c.specials);
}

// The rank contributions of the ordered (and native) mode: a rank's one leaf, or its leaves
// folded in order, summed for average.
std::vector<Buffer> contributions(const Case& c, const std::vector<Buffer>& leaves) {
  const std::vector<const void*> all = pointersOf(leaves);
  std::vector<Buffer> out;
  for (int r = 0; r < c.ranks(); ++r) {
    const int first = c.firstLeaf(r);
    if (c.spread[r] == 1) {
      out.push_back(leaves[first]);
      continue;
    }
    out.emplace_back(c.count * dataTypeSize(c.type));
    kernels::foldRankOrder(out.back().data(), all.data() + first, c.spread[r], c.count, c.type,
                           c.op == ReduceOp::kAverage ? ReduceOp::kSum : c.op, 1);
  }
  return out;
}

// The CPU reference of the case.
Buffer reference(const Case& c, const std::vector<Buffer>& leaves) {
  Buffer want(c.count * dataTypeSize(c.type));
  if (c.mode == Mode::kInvariant) {
    kernels::invariantReduceLocal(want.data(), pointersOf(leaves).data(), c.totalLeaves(), c.count,
                                  c.type, c.op);
  } else {
    const std::vector<Buffer> contribution = contributions(c, leaves);
    kernels::foldRankOrder(want.data(), pointersOf(contribution).data(), c.ranks(), c.count, c.type,
                           c.op, c.totalLeaves());
  }
  return want;
}

// What one rank saw: the status of its call, its recv, and anything else wrong (a leaf written,
// a guard byte changed, a CUDA failure around the call).
struct RankResult {
  Status status;
  Buffer recv;
  std::string problem;
};

constexpr size_t kGuard = 256;

// Runs the case's call on one rank over `transport`, on `stream`: the rank's leaves uploaded to
// device buffers between guard bytes, recv a buffer of its own or the first leaf.
RankResult runRank(const Case& c, const std::vector<Buffer>& leaves, int rank,
                   collective::transport::Exchange& transport, cudaStream_t stream) {
  RankResult result;
  auto cuda = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && result.problem.empty()) {
      result.problem = std::string(what) + " failed: " + cudaGetErrorString(e);
    }
    return e == cudaSuccess;
  };
  const size_t es = dataTypeSize(c.type);
  const size_t bytes = c.count * es;
  const size_t shift = c.misaligned ? es : 0;
  const size_t total = kGuard + shift + bytes + kGuard;
  const int first = c.firstLeaf(rank);
  const int n = c.spread[rank];
  // Buffers 0 .. n-1: the leaves; n: recv when out of place.
  std::vector<char*> base(n + 1, nullptr);
  bool ok = true;
  for (int b = 0; b <= n && ok; ++b) {
    void* p = nullptr;
    ok = cuda(cudaMallocAsync(&p, total, stream), "cudaMallocAsync") &&
         cuda(cudaMemsetAsync(p, kSentinel, total, stream), "cudaMemsetAsync");
    base[b] = static_cast<char*>(p);
    if (ok && b < n && bytes > 0) {
      ok = cuda(cudaMemcpyAsync(base[b] + kGuard + shift, leaves[first + b].data(), bytes,
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync to the device");
    }
  }
  std::vector<const void*> mine;
  for (int b = 0; b < n; ++b) mine.push_back(base[b] + kGuard + shift);
  char* recv = base[c.inPlace ? 0 : n] + kGuard + shift;
  if (ok) {
    collective::AllreduceOptions o;
    o.mode = c.mode;
    o.leaves = mine.data();
    o.nleaves = n;
    o.recv = recv;
    o.count = c.count;
    o.type = c.type;
    o.op = c.op;
    o.totalLeaves = c.totalLeaves();
    o.segmentBytes = c.segmentBytes;
    result.status = collective::deviceAllreduce(transport, stream, o);
    ok = cuda(cudaStreamSynchronize(stream), "the allreduce's work");
  } else {
    result.status = Status::internal("not run: " + result.problem);
  }
  // Every buffer back, guards included: recv's data, the leaves unchanged (but an in-place recv).
  for (int b = 0; b <= n && ok; ++b) {
    const bool isRecv = b == (c.inPlace ? 0 : n);
    Buffer all(total);
    ok = cuda(cudaMemcpyAsync(all.data(), base[b], total, cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync to the host") &&
         cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (!ok) break;
    const auto data = all.begin() + kGuard + shift;
    if (isRecv) result.recv.assign(data, data + bytes);
    if (b < n && !isRecv && !std::equal(data, data + bytes, leaves[first + b].begin())) {
      result.problem = "leaf " + std::to_string(b) + " was written";
    }
    for (size_t i = 0; i < total && result.problem.empty(); ++i) {
      if ((i < kGuard + shift || i >= kGuard + shift + bytes) && all[i] != kSentinel) {
        result.problem = "a byte around buffer " + std::to_string(b) + " was written";
      }
    }
  }
  for (char* p : base) {
    if (p != nullptr) cuda(cudaFreeAsync(p, stream), "cudaFreeAsync");
  }
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return result;
}

// The case on simulated ranks: every rank's result.
std::vector<RankResult> runSimulated(const Case& c, const std::vector<Buffer>& leaves,
                                     Status* world) {
  std::vector<RankResult> results(c.ranks());
  *world = testing::runRanks(
      c.ranks(), [&](int rank, testing::SimulatedTransport& transport, cudaStream_t stream) {
        results[rank] = runRank(c, leaves, rank, transport, stream);
      });
  return results;
}

// Why the simulated world broke, with the failures the ranks returned.
::testing::AssertionResult worldFailure(const Status& world,
                                        const std::vector<RankResult>& results) {
  ::testing::AssertionResult failure = ::testing::AssertionFailure() << world.toString();
  for (size_t r = 0; r < results.size(); ++r) {
    if (!results[r].status.isOk())
      failure << "; rank " << r << ": " << results[r].status.toString();
  }
  return failure;
}

// Every rank's result is `want`.
::testing::AssertionResult everyRankGives(const std::vector<RankResult>& results,
                                          const Buffer& want, const Case& c) {
  for (size_t r = 0; r < results.size(); ++r) {
    if (!results[r].status.isOk()) {
      return ::testing::AssertionFailure() << "rank " << r << ": " << results[r].status.toString();
    }
    if (!results[r].problem.empty()) {
      return ::testing::AssertionFailure() << "rank " << r << ": " << results[r].problem;
    }
    const ::testing::AssertionResult same =
        sameBits(results[r].recv.data(), want.data(), c.count, c.type);
    if (!same) return ::testing::AssertionFailure() << "rank " << r << ": " << same.message();
  }
  return ::testing::AssertionSuccess();
}

// Runs the case on simulated ranks with fresh leaves and checks it against the CPU reference.
::testing::AssertionResult check(const Case& c, uint64_t seed) {
  const std::vector<Buffer> leaves = leavesFor(c, seed);
  Status world;
  const std::vector<RankResult> results = runSimulated(c, leaves, &world);
  if (!world.isOk()) return worldFailure(world, results);
  return everyRankGives(results, reference(c, leaves), c);
}

// Uneven spreads of leaves over P ranks (at most 16 leaves: native's exactness needs it).
std::vector<int> unevenSpread(int p) {
  switch (p) {
    case 1:
      return {3};
    case 2:
      return {2, 1};
    case 3:
      return {1, 3, 2};
    case 4:
      return {2, 1, 1, 3};
    case 5:
      return {1, 1, 2, 1, 1};
    default:
      return {1, 2, 1, 1, 3, 1, 1, 2};
  }
}

// One leaf per rank, or the uneven spread over p ranks.
std::vector<int> spreadOf(int p, bool severalLeaves) {
  return severalLeaves ? unevenSpread(p) : std::vector<int>(p, 1);
}

// The grid of a mode over world sizes, dtypes, ops and counts; the segment, in-place, alignment
// and inf/NaN choices rotate over it, so that each meets every dtype, op and world size.
void checkGrid(Mode mode, bool severalLeaves, const std::vector<size_t>& counts) {
  uint64_t seed = static_cast<uint64_t>(mode) * 100000 + (severalLeaves ? 50000 : 0);
  size_t turn = 0;
  for (int p : kWorlds) {
    for (DataType type : testing::kAllTypes) {
      for (ReduceOp op : testing::kAllOps) {
        for (size_t count : counts) {
          ++turn;
          Case c(mode, type, op, spreadOf(p, severalLeaves), count, turn % 2 ? 256 : 4096);
          c.inPlace = turn % 3 == 1;
          c.misaligned = turn % 5 == 2;
          c.specials = isFloatType(type) && mode != Mode::kNative && turn % 4 != 0;
          ASSERT_TRUE(check(c, ++seed)) << c.name();
        }
      }
    }
  }
}

// Every test of the pipeline needs a device: skipped, saying so, without one.
class AllreduceGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    DETCOLL_SKIP_WITHOUT_GPU("the GPU allreduce pipeline and its transports are");
  }
};

TEST_F(AllreduceGpu, OrderedOneLeafPerRankIsTheRankOrderFold) {
  checkGrid(Mode::kOrdered, false, {1, 7, 1000, 20011});
}

TEST_F(AllreduceGpu, OrderedSeveralLeavesPerRankFoldsThemFirst) {
  checkGrid(Mode::kOrdered, true, {1, 9, 1000, 20011});
}

TEST_F(AllreduceGpu, InvariantOneLeafPerRankIsTheExactReduction) {
  checkGrid(Mode::kInvariant, false, {1, 7, 1000, 20011});
}

TEST_F(AllreduceGpu, InvariantSeveralLeavesPerRankIsTheExactReduction) {
  checkGrid(Mode::kInvariant, true, {1, 9, 1000, 20011});
}

TEST_F(AllreduceGpu, NativeSumsOfIntegerValuesAreExact) {
  checkGrid(Mode::kNative, false, {1, 1000});
  checkGrid(Mode::kNative, true, {7, 20011});
}

// Large buffers with the default segment (rounds of several MiB) and a mid-sized one.
TEST_F(AllreduceGpu, LargeBuffersWithLargeSegments) {
  uint64_t seed = 700000;
  for (Mode mode : {Mode::kOrdered, Mode::kInvariant}) {
    for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64}) {
      for (int p : {3, 4}) {
        for (bool several : {false, true}) {
          Case c(mode, type, p == 3 ? ReduceOp::kSum : ReduceOp::kAverage, spreadOf(p, several),
                 kLarge, several ? size_t{1} << 16 : collective::kDeviceSegmentBytes);
          c.inPlace = several;
          c.specials = true;
          ASSERT_TRUE(check(c, ++seed)) << c.name();
        }
      }
    }
  }
}

// The invariant mode's bits depend on the multiset of leaves only: the same 8 leaves spread over
// 1 to 8 ranks, in any order, give one result (and it is the CPU's).
TEST_F(AllreduceGpu, InvariantBitsIndependentOfWorldSizeAndSpread) {
  const std::vector<std::vector<int>> spreads = {
      {8}, {4, 4}, {3, 3, 2}, {2, 2, 2, 2}, {1, 2, 1, 3, 1}, {5, 1, 2}, {1, 1, 1, 1, 1, 1, 1, 1}};
  uint64_t seed = 800000;
  for (DataType type : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (bool specials : {false, true}) {
        if (specials && !isFloatType(type)) continue;
        Case base(Mode::kInvariant, type, op, spreads[0], 4099, collective::kDeviceSegmentBytes);
        base.specials = specials;
        std::vector<Buffer> leaves = leavesFor(base, ++seed);
        const Buffer want = reference(base, leaves);
        Buffer first;
        for (size_t s = 0; s < spreads.size(); ++s) {
          Case c = base;
          c.spread = spreads[s];
          c.segmentBytes = s % 2 ? 512 : 4096;
          // Another order of the leaves over the ranks for every other spread.
          std::vector<Buffer> order = leaves;
          if (s % 2) std::reverse(order.begin(), order.end());
          Status world;
          const std::vector<RankResult> results = runSimulated(c, order, &world);
          ASSERT_TRUE(world.isOk()) << worldFailure(world, results).message() << " " << c.name();
          ASSERT_TRUE(everyRankGives(results, want, c)) << c.name();
          if (s == 0) first = results[0].recv;
          ASSERT_EQ(results[0].recv, first) << c.name() << " differs from " << base.name();
        }
      }
    }
  }
}

// The GPU path gives the CPU path's bits: the same leaves through the CPU allreduce of the mode
// on ranks as threads (collective/transport/thread_communicator.h).
TEST_F(AllreduceGpu, MatchesTheCpuPathOverThreadRanks) {
  uint64_t seed = 900000;
  for (Mode mode : {Mode::kOrdered, Mode::kInvariant}) {
    for (int p : {3, 4}) {
      for (bool several : {false, true}) {
        for (DataType type : testing::kAllTypes) {
          for (ReduceOp op : testing::kAllOps) {
            Case c(mode, type, op, spreadOf(p, several), 3001, 1024);
            c.specials = isFloatType(type);
            const std::vector<Buffer> leaves = leavesFor(c, ++seed);
            const size_t es = dataTypeSize(type);
            std::vector<Buffer> cpu(p, Buffer(c.count * es));
            std::vector<Status> cpuStatus(p);
            const Status spawned =
                collective::transport::spawn(p, [&](collective::transport::Communicator& comm) {
                  const int r = comm.rank();
                  const std::vector<const void*> all = pointersOf(leaves);
                  collective::AllreduceOptions o;
                  o.mode = mode;
                  o.leaves = all.data() + c.firstLeaf(r);
                  o.nleaves = c.spread[r];
                  o.recv = cpu[r].data();
                  o.count = c.count;
                  o.type = type;
                  o.op = op;
                  o.totalLeaves = c.totalLeaves();
                  o.segmentBytes = c.segmentBytes;
                  cpuStatus[r] = collective::allreduce(comm, o);
                });
            ASSERT_TRUE(spawned.isOk()) << spawned.toString();
            for (int r = 0; r < p; ++r) {
              ASSERT_TRUE(cpuStatus[r].isOk()) << cpuStatus[r].toString();
              ASSERT_EQ(cpu[r], cpu[0]) << "the CPU path differs between ranks 0 and " << r;
            }
            Status world;
            const std::vector<RankResult> results = runSimulated(c, leaves, &world);
            ASSERT_TRUE(world.isOk()) << worldFailure(world, results).message() << " " << c.name();
            ASSERT_TRUE(everyRankGives(results, cpu[0], c)) << c.name() << " vs the CPU path";
          }
        }
      }
    }
  }
}

// The transport's calls: one exchange per pipeline round plus the last allgather, the same
// number on every rank; native uses the backend's allreduce once and no exchange.
TEST_F(AllreduceGpu, EveryRankRunsTheSameTransportCalls) {
  for (Mode mode : {Mode::kNative, Mode::kOrdered, Mode::kInvariant}) {
    const Case c(mode, DataType::kFloat32, ReduceOp::kAverage, unevenSpread(5), 10000, 4096);
    const std::vector<Buffer> leaves = leavesFor(c, 31);
    std::vector<int> exchanges(c.ranks()), natives(c.ranks());
    std::vector<RankResult> results(c.ranks());
    const Status world = testing::runRanks(
        c.ranks(), [&](int rank, testing::SimulatedTransport& transport, cudaStream_t stream) {
          results[rank] = runRank(c, leaves, rank, transport, stream);
          exchanges[rank] = transport.exchanges();
          natives[rank] = transport.natives();
        });
    ASSERT_TRUE(world.isOk()) << worldFailure(world, results).message();
    ASSERT_TRUE(everyRankGives(results, reference(c, leaves), c)) << c.name();
    for (int r = 0; r < c.ranks(); ++r) {
      EXPECT_EQ(exchanges[r], exchanges[0]) << modeName(mode) << " rank " << r;
      EXPECT_EQ(natives[r], mode == Mode::kNative ? 1 : 0) << modeName(mode) << " rank " << r;
    }
    if (mode == Mode::kNative) {
      EXPECT_EQ(exchanges[0], 0);
    } else {
      // 1024 float32 per shard and round: at least count / (5 * 1024) rounds.
      EXPECT_GE(exchanges[0], static_cast<int>(c.count / (5 * 1024)));
    }
  }
}

#if defined(DETCOLL_GPU_TEST_NCCL) && DETCOLL_GPU_TEST_NCCL

std::unique_ptr<collective::transport::NcclTransport> singleRankNccl() {
  collective::transport::NcclTransport::UniqueId id{};
  const Status made = collective::transport::NcclTransport::uniqueId(&id);
  EXPECT_TRUE(made.isOk()) << made.toString();
  std::unique_ptr<collective::transport::NcclTransport> transport;
  if (!made.isOk()) return transport;
  const Status created = collective::transport::NcclTransport::create(id, 0, 1, &transport);
  EXPECT_TRUE(created.isOk()) << created.toString();
  return transport;
}

// Every mode over an NCCL communicator of one rank: the CPU reference's bits.
TEST_F(AllreduceGpu, NcclSingleRankMatchesCpuReference) {
  const std::unique_ptr<collective::transport::NcclTransport> nccl = singleRankNccl();
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->rank(), 0);
  EXPECT_EQ(nccl->size(), 1);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  uint64_t seed = 1000000;
  for (Mode mode : {Mode::kNative, Mode::kOrdered, Mode::kInvariant}) {
    for (DataType type : testing::kAllTypes) {
      for (ReduceOp op : testing::kAllOps) {
        for (int leaves : {1, 3}) {
          Case c(mode, type, op, {leaves}, 5003,
                 leaves == 1 ? 4096 : collective::kDeviceSegmentBytes);
          c.inPlace = leaves == 3;
          c.specials = isFloatType(type) && mode != Mode::kNative;
          const std::vector<Buffer> data = leavesFor(c, ++seed);
          const RankResult result = runRank(c, data, 0, *nccl, stream);
          ASSERT_TRUE(everyRankGives({result}, reference(c, data), c)) << c.name() << " over NCCL";
        }
      }
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// Broadcast and allgather at one rank copy: the root's bytes stay, the gather is the send.
TEST_F(AllreduceGpu, NcclSingleRankBroadcastAndAllgatherCopy) {
  const std::unique_ptr<collective::transport::NcclTransport> nccl = singleRankNccl();
  ASSERT_NE(nccl, nullptr);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (size_t bytes : {size_t{1}, size_t{4097}, size_t{1} << 22}) {
    const Buffer data = testing::wideLeaves(DataType::kInt64, 1, (bytes + 7) / 8, bytes, false)[0];
    const Buffer host(data.begin(), data.begin() + bytes);
    void* a = nullptr;
    void* b = nullptr;
    ASSERT_EQ(cudaMalloc(&a, bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(b, 0x5a, bytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const Status broadcast = nccl->broadcast(a, bytes, 0, stream);
    ASSERT_TRUE(broadcast.isOk()) << broadcast.toString();
    const Status gathered = nccl->allgather(a, b, bytes, stream);
    ASSERT_TRUE(gathered.isOk()) << gathered.toString();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    Buffer gotA(bytes), gotB(bytes);
    ASSERT_EQ(cudaMemcpy(gotA.data(), a, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gotB.data(), b, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(gotA, host) << "broadcast of " << bytes << " bytes at one rank";
    EXPECT_EQ(gotB, host) << "allgather of " << bytes << " bytes at one rank";
    ASSERT_EQ(cudaFree(a), cudaSuccess);
    ASSERT_EQ(cudaFree(b), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

#endif  // DETCOLL_GPU_TEST_NCCL

}  // namespace
}  // namespace detcoll
