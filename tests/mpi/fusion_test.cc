// The fusion engine under mpirun: the ResNet-50 gradient set enqueued in a different shuffled
// order on every rank, with random pauses, under several fusion thresholds and cycle times, gives
// exactly the bits of the same tensors reduced one by one with the blocking call, in ordered and
// invariant mode, every step, negotiated and on the fast path of a repeated step. Then the
// asynchronous C API (allreduce, grouped, broadcast, allgather) and its errors, each seen on every
// rank: mismatch, duplicate name, a bad argument on one rank, a stall, and a shutdown with a
// request in flight. Every wait is bounded by the engine's own stall limit, so nothing here can
// hang.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/transport/mpi_communicator.h"
#include "detcoll.h"
#include "fusion/engine.h"
#include "tests/mpi/mpi_test_util.h"
#include "tests/support/reference.h"
#include "tests/support/workload.h"

namespace detcoll {
namespace {

using testing::Bytes;
using testing::expectOnAllRanks;
using testing::randomBuffer;
using testing::seedFor;
using testing::worldRank;
using testing::worldSize;

struct Gradients {
  std::vector<testing::TensorShape> shapes;
  std::vector<Bytes> inputs;  // this rank's, float32
};

const Gradients& resnet50() {
  static const Gradients g = [] {
    Gradients g;
    std::string error;
    if (!testing::loadWorkload(testing::workloadDirectory() + "/resnet50.txt", &g.shapes, &error)) {
      ADD_FAILURE() << error;
      return g;
    }
    for (const auto& shape : g.shapes) {
      g.inputs.push_back(randomBuffer(DataType::kFloat32, shape.elements,
                                      seedFor("resnet50/" + shape.name, worldRank())));
    }
    return g;
  }();
  return g;
}

// Every tensor reduced alone with the blocking call, in workload order.
std::vector<Bytes> oneByOne(const Gradients& g, detcoll_mode_t mode, detcoll_op_t op) {
  EXPECT_EQ(detcoll_set_mode(mode), DETCOLL_SUCCESS);
  std::vector<Bytes> out;
  for (size_t i = 0; i < g.shapes.size(); ++i) {
    out.emplace_back(g.inputs[i].size());
    EXPECT_EQ(detcoll_allreduce(g.inputs[i].data(), out.back().data(), g.shapes[i].elements,
                                DETCOLL_FLOAT32, op, g.shapes[i].name.c_str()),
              DETCOLL_SUCCESS)
        << detcoll_last_error();
  }
  EXPECT_EQ(detcoll_set_mode(DETCOLL_MODE_ORDERED), DETCOLL_SUCCESS);
  return out;
}

// This rank's order of the tensors: a shuffle of its own.
std::vector<size_t> shuffledOrder(size_t n, const std::string& label, std::mt19937_64& rng) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  rng.seed(seedFor(label, worldRank()));
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// Compares every tensor's bits; returns the first difference's description, or "".
std::string compare(const Gradients& g, const std::vector<Bytes>& got,
                    const std::vector<Bytes>& want) {
  for (size_t i = 0; i < g.shapes.size(); ++i) {
    const long k = testing::firstDifference(got[i].data(), want[i].data(), g.shapes[i].elements,
                                            DataType::kFloat32);
    if (k >= 0) {
      return g.shapes[i].name + " element " + std::to_string(k) + ": got " +
             testing::describeElement(got[i].data(), k, DataType::kFloat32) + ", one by one " +
             testing::describeElement(want[i].data(), k, DataType::kFloat32);
    }
  }
  return "";
}

struct EngineConfig {
  size_t threshold;
  double cycleMs;
};

TEST(FusionMpiTest, ShuffledResNet50MatchesOneByOneUnderEveryThresholdAndCycle) {
  const Gradients& g = resnet50();
  ASSERT_FALSE(g.shapes.empty());
  const EngineConfig configs[] = {{0, 0.5}, {1 << 20, 2.0}, {64 << 20, 0.5}};
  // Three steps on one engine: the first two negotiated, the last on the fast path of a
  // repeated step (fusion/fast_path.h), each rank's order shuffled anew every step.
  constexpr int kSteps = 3;
  std::mt19937_64 rng;
  for (detcoll_mode_t mode : {DETCOLL_MODE_ORDERED, DETCOLL_MODE_INVARIANT}) {
    const std::vector<Bytes> reference = oneByOne(g, mode, DETCOLL_AVERAGE);
    for (const EngineConfig& config : configs) {
      const std::string engineLabel = "mode " + std::to_string(mode) + " threshold " +
                                      std::to_string(config.threshold) + " cycle " +
                                      std::to_string(config.cycleMs);
      std::unique_ptr<collective::transport::MpiCommunicator> comm;
      ASSERT_TRUE(collective::transport::MpiCommunicator::create(MPI_COMM_WORLD, &comm).isOk());
      fusion::EngineOptions options;
      options.fusionThresholdBytes = config.threshold;
      options.cycleTimeMs = config.cycleMs;
      options.stallShutdownSeconds = 120;  // bounds the test if a rank lost a request
      fusion::Engine engine(*comm, options);
      ASSERT_TRUE(engine.start().isOk());
      for (int step = 0; step < kSteps; ++step) {
        const std::string label = engineLabel + " step " + std::to_string(step);
        SCOPED_TRACE(label);
        std::vector<Bytes> out(g.shapes.size());
        std::vector<fusion::RequestPtr> requests(g.shapes.size());
        std::string failure;
        for (size_t idx : shuffledOrder(g.shapes.size(), label, rng)) {
          if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
          out[idx].assign(g.inputs[idx].size(), 0xEE);
          fusion::RequestSpec spec;
          spec.name = g.shapes[idx].name;
          spec.descriptor.kind = fusion::RequestKind::kAllreduce;
          spec.descriptor.type = DataType::kFloat32;
          spec.descriptor.op = ReduceOp::kAverage;
          spec.descriptor.mode = static_cast<Mode>(mode);
          spec.descriptor.count = g.shapes[idx].elements;
          spec.send = g.inputs[idx].data();
          spec.recv = out[idx].data();
          const Status s = engine.enqueue(std::move(spec), nullptr, &requests[idx]);
          if (!s.isOk() && failure.empty()) failure = "enqueue: " + s.toString();
        }
        for (const auto& request : requests) {
          if (!request) continue;
          const Status s = request->wait();
          if (!s.isOk() && failure.empty()) failure = request->name() + ": " + s.toString();
        }
        if (failure.empty()) failure = compare(g, out, reference);
        expectOnAllRanks(failure.empty(), label + ": " + failure);
      }
      const fusion::EngineStats stats = engine.stats();
      engine.shutdown();
      expectOnAllRanks(stats.fastStarts == 1 && stats.fastStops == 0 &&
                           stats.fastRequests == (kSteps - 2) * g.shapes.size(),
                       engineLabel + ": fast path started " + std::to_string(stats.fastStarts) +
                           " times, stopped " + std::to_string(stats.fastStops) + ", ran " +
                           std::to_string(stats.fastRequests) + " requests");
    }
  }
}

// The C API ------------------------------------------------------------------------------------

// Waits for every handle; returns the first failure's text.
std::string waitAll(std::vector<detcoll_handle_t>& handles) {
  std::string failure;
  for (detcoll_handle_t& h : handles) {
    if (h == nullptr) continue;
    if (detcoll_wait(h) != DETCOLL_SUCCESS && failure.empty()) failure = detcoll_last_error();
    h = nullptr;
  }
  return failure;
}

TEST(FusionCApiTest, AsyncAllreduceInShuffledOrderMatchesOneByOne) {
  const Gradients& g = resnet50();
  ASSERT_FALSE(g.shapes.empty());
  std::mt19937_64 rng;
  for (detcoll_mode_t mode : {DETCOLL_MODE_ORDERED, DETCOLL_MODE_INVARIANT}) {
    const std::vector<Bytes> reference = oneByOne(g, mode, DETCOLL_SUM);
    ASSERT_EQ(detcoll_set_mode(mode), DETCOLL_SUCCESS);
    std::vector<Bytes> out(g.shapes.size());
    std::vector<detcoll_handle_t> handles(g.shapes.size(), nullptr);
    std::string failure;
    for (size_t idx : shuffledOrder(g.shapes.size(), "c api " + std::to_string(mode), rng)) {
      out[idx].assign(g.inputs[idx].size(), 0xEE);
      if (detcoll_allreduce_async(g.inputs[idx].data(), out[idx].data(), g.shapes[idx].elements,
                                  DETCOLL_FLOAT32, DETCOLL_SUM, g.shapes[idx].name.c_str(),
                                  &handles[idx]) != DETCOLL_SUCCESS &&
          failure.empty()) {
        failure = detcoll_last_error();
      }
    }
    const std::string waited = waitAll(handles);
    if (failure.empty()) failure = waited;
    ASSERT_EQ(detcoll_set_mode(DETCOLL_MODE_ORDERED), DETCOLL_SUCCESS);
    if (failure.empty()) failure = compare(g, out, reference);
    expectOnAllRanks(failure.empty(), "mode " + std::to_string(mode) + ": " + failure);
  }
}

TEST(FusionCApiTest, GroupedBroadcastAndAllgatherRequests) {
  const int rank = worldRank();
  const int p = worldSize();
  std::string failure;
  // A group of three allreduces, in place, against the blocking call.
  const size_t counts[3] = {5, 1000, 77};
  std::vector<Bytes> data, expected;
  for (int i = 0; i < 3; ++i) {
    data.push_back(
        randomBuffer(DataType::kFloat32, counts[i], seedFor("group" + std::to_string(i), rank)));
    expected.emplace_back(data.back().size());
    EXPECT_EQ(detcoll_allreduce(data[i].data(), expected[i].data(), counts[i], DETCOLL_FLOAT32,
                                DETCOLL_AVERAGE, "group reference"),
              DETCOLL_SUCCESS);
  }
  const void* sends[3] = {data[0].data(), data[1].data(), data[2].data()};
  void* recvs[3] = {data[0].data(), data[1].data(), data[2].data()};
  const char* names[3] = {"group.a", "group.b", "group.c"};
  std::vector<detcoll_handle_t> handles(3, nullptr);
  if (detcoll_grouped_allreduce_async(3, sends, recvs, counts, DETCOLL_FLOAT32, DETCOLL_AVERAGE,
                                      names, handles.data()) != DETCOLL_SUCCESS) {
    failure = detcoll_last_error();
  }
  std::string waited = waitAll(handles);
  if (failure.empty()) failure = waited;
  for (int i = 0; i < 3 && failure.empty(); ++i) {
    if (data[i] != expected[i]) failure = std::string(names[i]) + " differs from the blocking call";
  }

  // Broadcast from the last rank, and allgather of one int64 per rank.
  std::vector<int64_t> buf(100);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = rank * 1000 + static_cast<int64_t>(i);
  std::vector<int64_t> mine = {rank * 7 + 3, -rank};
  std::vector<int64_t> gathered(2 * p, -1);
  handles.assign(2, nullptr);
  if (detcoll_broadcast_async(buf.data(), buf.size(), DETCOLL_INT64, p - 1, "bcast", &handles[0]) !=
          DETCOLL_SUCCESS ||
      detcoll_allgather_async(mine.data(), gathered.data(), 2, DETCOLL_INT64, "gather",
                              &handles[1]) != DETCOLL_SUCCESS) {
    if (failure.empty()) failure = detcoll_last_error();
  }
  waited = waitAll(handles);
  if (failure.empty()) failure = waited;
  for (size_t i = 0; i < buf.size() && failure.empty(); ++i) {
    if (buf[i] != (p - 1) * 1000 + static_cast<int64_t>(i))
      failure = "broadcast element " + std::to_string(i);
  }
  for (int j = 0; j < p && failure.empty(); ++j) {
    if (gathered[2 * j] != j * 7 + 3 || gathered[2 * j + 1] != -j)
      failure = "allgather slot " + std::to_string(j);
  }
  expectOnAllRanks(failure.empty(), failure);
}

// Enqueues one float32 allreduce of `count` elements and waits; returns the status and sets
// *text to the last error.
detcoll_status_t allreduceAsync(const char* name, size_t count, void* recv, std::string* text,
                                int dtype = DETCOLL_FLOAT32) {
  static std::vector<double> send(1 << 12, 0.5);  // large enough for every case here
  detcoll_handle_t h = nullptr;
  detcoll_status_t s = detcoll_allreduce_async(
      send.data(), recv, count, static_cast<detcoll_dtype_t>(dtype), DETCOLL_SUM, name, &h);
  if (s == DETCOLL_SUCCESS) s = detcoll_wait(h);
  *text = s == DETCOLL_SUCCESS ? "" : detcoll_last_error();
  return s;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(FusionCApiErrorTest, MismatchedCountFailsEveryRankNamingTheRanks) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  std::vector<float> recv(200);
  std::string text;
  const detcoll_status_t s =
      allreduceAsync("grad.mismatch", worldRank() == 1 ? 99 : 100, recv.data(), &text);
  const bool ok = s == DETCOLL_ERR_MISMATCH && contains(text, "'grad.mismatch'") &&
                  contains(text, "rank 1 has allreduce float32[99]") &&
                  contains(text, "float32[100]");
  expectOnAllRanks(ok, "status " + std::to_string(s) + ": " + text);
}

TEST(FusionCApiErrorTest, BadArgumentOnOneRankFailsEveryRank) {
  const int p = worldSize();
  std::vector<float> recv(10);
  std::string text;
  // The last rank passes a null recvbuf; then rank 0 an unknown dtype.
  detcoll_status_t s =
      allreduceAsync("grad.null", 10, worldRank() == p - 1 ? nullptr : recv.data(), &text);
  bool ok = s == DETCOLL_ERR_INVALID_ARGUMENT && contains(text, "'grad.null'") &&
            contains(text, "rank " + std::to_string(p - 1) + ": recvbuf is null");
  expectOnAllRanks(ok, "null recvbuf: status " + std::to_string(s) + ": " + text);
  s = allreduceAsync("grad.dtype", 10, recv.data(), &text, worldRank() == 0 ? 42 : DETCOLL_FLOAT32);
  ok = s == DETCOLL_ERR_INVALID_ARGUMENT && contains(text, "rank 0: unknown dtype 42");
  expectOnAllRanks(ok, "bad dtype: status " + std::to_string(s) + ": " + text);
}

TEST(FusionCApiErrorTest, RejectedCallFailsEveryRankWithTheReasonOnce) {
  const int p = worldSize();
  const int last = p - 1;
  std::vector<float> recv(10, -1.0f);
  std::vector<float> send(10, 0.5f);
  std::string text;
  const std::string reason = "binding: the tensor is not contiguous";
  // Asynchronous: the last rank's request is rejected; every rank fails, naming it.
  if (worldRank() == last) ASSERT_EQ(detcoll_reject_next_call(reason.c_str()), DETCOLL_SUCCESS);
  detcoll_status_t s = allreduceAsync("grad.rejected", 10, recv.data(), &text);
  bool ok = s == DETCOLL_ERR_INVALID_ARGUMENT && contains(text, "'grad.rejected'") &&
            contains(text, "rank " + std::to_string(last) + ": " + reason) &&
            std::all_of(recv.begin(), recv.end(), [](float v) { return v == -1.0f; });
  expectOnAllRanks(ok, "async: status " + std::to_string(s) + ": " + text);
  // Blocking: the same.
  if (worldRank() == last) detcoll_reject_next_call(reason.c_str());
  s = detcoll_allreduce(send.data(), recv.data(), 10, DETCOLL_FLOAT32, DETCOLL_SUM, "blocking");
  text = s == DETCOLL_SUCCESS ? "" : detcoll_last_error();
  ok = s == DETCOLL_ERR_INVALID_ARGUMENT &&
       contains(text, "rank " + std::to_string(last) + ": " + reason) &&
       std::all_of(recv.begin(), recv.end(), [](float v) { return v == -1.0f; });
  expectOnAllRanks(ok, "blocking: status " + std::to_string(s) + ": " + text);
  // A rejection is spent by one call, and NULL cancels one.
  detcoll_reject_next_call("cancelled");
  detcoll_reject_next_call(nullptr);
  s = detcoll_allreduce(send.data(), recv.data(), 10, DETCOLL_FLOAT32, DETCOLL_SUM, "after");
  ok = s == DETCOLL_SUCCESS && recv[0] == 0.5f * static_cast<float>(p);
  expectOnAllRanks(ok, std::string("after: ") + (s == DETCOLL_SUCCESS ? "" : detcoll_last_error()));
}

TEST(FusionCApiErrorTest, DuplicateNameIsRefusedAndTheFirstCompletes) {
  // Rank 0 enqueues 'dup' twice before any other rank enqueues it (they wait at the barrier), so
  // its first cannot have completed when the second comes: the second is refused. Without the
  // barrier the first could complete in between, under load, and the second be a new request.
  std::vector<float> a(50, 1.0f), b(50), c(50);
  detcoll_handle_t first = nullptr;
  detcoll_handle_t second = reinterpret_cast<detcoll_handle_t>(&a);  // must be reset to null
  std::string failure;
  const bool zero = worldRank() == 0;
  if (!zero) MPI_Barrier(MPI_COMM_WORLD);
  if (detcoll_allreduce_async(a.data(), b.data(), 50, DETCOLL_FLOAT32, DETCOLL_SUM, "dup",
                              &first) != DETCOLL_SUCCESS) {
    failure = std::string("first enqueue: ") + detcoll_last_error();
  }
  if (zero) {
    const detcoll_status_t s = detcoll_allreduce_async(a.data(), c.data(), 50, DETCOLL_FLOAT32,
                                                       DETCOLL_SUM, "dup", &second);
    if (failure.empty() && (s != DETCOLL_ERR_INVALID_ARGUMENT || second != nullptr ||
                            !contains(detcoll_last_error(), "'dup' is already enqueued"))) {
      failure = "second enqueue: status " + std::to_string(s) + ": " + detcoll_last_error();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (first != nullptr && detcoll_wait(first) != DETCOLL_SUCCESS && failure.empty()) {
    failure = std::string("first wait: ") + detcoll_last_error();
  }
  for (float v : b) {
    if (failure.empty() && v != static_cast<float>(worldSize())) failure = "first result wrong";
  }
  expectOnAllRanks(failure.empty(), failure);
}

// Stall and shutdown, on engines with short limits ---------------------------------------------

struct ShortEngine {
  std::unique_ptr<collective::transport::MpiCommunicator> comm;
  std::unique_ptr<fusion::Engine> engine;
  std::mutex mutex;
  std::vector<std::string> warnings;

  explicit ShortEngine(double warnSeconds, double shutdownSeconds) {
    EXPECT_TRUE(collective::transport::MpiCommunicator::create(MPI_COMM_WORLD, &comm).isOk());
    fusion::EngineOptions options;
    options.stallWarningSeconds = warnSeconds;
    options.stallShutdownSeconds = shutdownSeconds;
    options.warn = [this](const std::string& text) {
      std::lock_guard<std::mutex> lock(mutex);
      warnings.push_back(text);
    };
    engine = std::make_unique<fusion::Engine>(*comm, options);
    EXPECT_TRUE(engine->start().isOk());
  }

  fusion::RequestSpec spec(const std::string& name, const float* send, float* recv) {
    fusion::RequestSpec s;
    s.name = name;
    s.descriptor.count = 16;
    s.send = send;
    s.recv = recv;
    return s;
  }
};

// A set's request may be named by a response that a non-member's engine handles after its main
// thread removed the set (the members' requests completed, and they removed it too, while that
// engine was behind). The non-member stands aside: the request completes on the members, and
// every engine goes on (before, that engine stopped with an internal error, and the job hung at
// exit with the others waiting for its negotiation).
TEST(FusionSetTest, ARequestOfASetRemovedOnANonMemberRunsAndTheEnginesGoOn) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "needs a rank outside the set";
  ShortEngine e(0, 10.0);
  const int me = worldRank();
  MPI_Comm split = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, me == 0 ? 0 : MPI_UNDEFINED, me, &split), MPI_SUCCESS);
  std::unique_ptr<collective::transport::MpiCommunicator> solo;
  if (me == 0) {
    ASSERT_TRUE(collective::transport::MpiCommunicator::create(split, &solo).isOk());
    MPI_Comm_free(&split);
  }
  ASSERT_TRUE(e.engine->addProcessSet(7, {0}, std::move(solo)).isOk());
  if (me != 0) e.engine->removeProcessSet(7);  // as if its main thread were ahead
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> send(16, 1.5f), recv(16, 0.0f);
  std::string failure;
  if (me == 0) {
    fusion::RequestSpec s = e.spec("in.set", send.data(), recv.data());
    s.descriptor.processSet = 7;
    fusion::RequestPtr request;
    Status st = e.engine->enqueue(s, nullptr, &request);
    if (st.isOk()) st = request->wait();
    if (!st.isOk() || recv[0] != 1.5f) failure = "the set's request: " + st.toString();
  }
  // Every engine still negotiates: a request of every rank completes.
  std::fill(recv.begin(), recv.end(), 0.0f);
  fusion::RequestPtr world;
  Status st = e.engine->enqueue(e.spec("after.set", send.data(), recv.data()), nullptr, &world);
  if (st.isOk()) st = world->wait();
  if (failure.empty() && (!st.isOk() || recv[0] != 1.5f * static_cast<float>(p))) {
    failure = "the world's request after it: " + st.toString();
  }
  e.engine->shutdown();
  expectOnAllRanks(failure.empty(), failure);
}

TEST(FusionStallTest, MissingRankIsWarnedAboutThenFailsEveryRankThatWaits) {
  const int p = worldSize();
  if (p < 2) GTEST_SKIP() << "a stall needs a rank that does not submit";
  ShortEngine e(0.2, 1.0);
  std::vector<float> send(16, 1.0f), recv(16);
  const std::string missing = "rank " + std::to_string(p - 1);
  std::string failure;
  if (worldRank() != p - 1) {
    fusion::RequestPtr request;
    const Status enqueued =
        e.engine->enqueue(e.spec("late", send.data(), recv.data()), nullptr, &request);
    const Status s = enqueued.isOk() ? request->wait() : enqueued;
    if (s.code() != StatusCode::kTimeout || !contains(s.message(), "'late' stalled: " + missing)) {
      failure = "got " + s.toString();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  e.engine->shutdown();
  if (worldRank() == 0) {
    std::lock_guard<std::mutex> lock(e.mutex);
    const bool warned = !e.warnings.empty() && contains(e.warnings[0], "'late'") &&
                        contains(e.warnings[0], "for " + missing);
    if (!warned && failure.empty()) failure = "no stall warning naming " + missing;
  }
  expectOnAllRanks(failure.empty(), failure);
}

TEST(FusionStallTest, ShutdownFailsRequestsInFlightAndLaterEnqueues) {
  ShortEngine e(0, 0);  // no stall limit: only the shutdown ends the request
  std::vector<float> send(16, 1.0f), recv(16);
  std::string failure;
  fusion::RequestPtr request;
  if (worldRank() == 0) {
    const Status s =
        e.engine->enqueue(e.spec("orphan", send.data(), recv.data()), nullptr, &request);
    if (!s.isOk()) failure = "enqueue: " + s.toString();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (worldRank() == worldSize() - 1) e.engine->shutdown();  // one rank stops them all
  if (request) {
    const Status s = request->wait();
    if (s.isOk() || !contains(s.message(), "'orphan' did not complete") ||
        !contains(s.message(), "shut detcoll down")) {
      failure = "in flight: " + s.toString();
    }
  }
  e.engine->shutdown();
  fusion::RequestPtr after;
  const Status refused =
      e.engine->enqueue(e.spec("after", send.data(), recv.data()), nullptr, &after);
  if (failure.empty() && (refused.isOk() || after)) failure = "enqueue after shutdown accepted";
  expectOnAllRanks(failure.empty(), failure);
}

}  // namespace
}  // namespace detcoll
