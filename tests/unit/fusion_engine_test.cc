// The fusion engine (fusion/engine.h) end to end, ranks as threads, each rank's engine over a
// duplicate of its communicator: many tensors enqueued in a different random order on every rank,
// with and without fusion, at two cycle times, in place or not, give the bits of the blocking
// one-by-one collectives; groups; broadcast and allgather; mismatches, duplicate names, local
// argument errors, stalls and shutdown with requests in flight fail on every rank with the right
// code and a message naming the request and the ranks; callbacks; the timeline file.
//
// Every test has a deadline: a hang aborts the run with the test's name instead of blocking.

#include "fusion/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collective/barrier.h"
#include "collective/collectives.h"
#include "collective/transport/thread_communicator.h"
#include "tests/support/reference.h"
#include "tests/unit/engine_ranks.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll {
namespace {

using testing::Buffer;
using testing::expectSameFailureEverywhere;
using testing::kSentinel;
using testing::randomBuffer;
using testing::sameBits;
using testing::untouched;
using namespace testing::engines;  // NOLINT: the harness

struct Tensor {
  std::string name;
  DataType type;
  size_t count;
};

// 60 tensors, 1 to 300000 elements spread log-uniformly; mostly float32, some float16 and float64.
std::vector<Tensor> manyTensors() {
  std::mt19937_64 rng(60);
  std::uniform_real_distribution<double> logCount(0, std::log(300000.0));
  std::vector<Tensor> tensors;
  for (int i = 0; i < 60; ++i) {
    size_t count = std::max<size_t>(1, static_cast<size_t>(std::exp(logCount(rng))));
    if (i == 0) count = 1;
    if (i == 1) count = 300000;
    const DataType type = i % 6 == 2 ? DataType::kFloat16 : i % 6 == 4 ? DataType::kFloat64 : kF32;
    tensors.push_back({"layer" + std::to_string(i) + ".grad", type, count});
  }
  return tensors;
}

// Many tensors in random order -------------------------------------------------------------------

class FusionEngineManyTensorsTest
    : public ::testing::TestWithParam<std::tuple<Mode, ReduceOp, int>> {};

TEST_P(FusionEngineManyTensorsTest, EveryOrderThresholdAndCycleGivesTheBlockingBits) {
  const auto [mode, op, p] = GetParam();
  const std::vector<Tensor> tensors = manyTensors();
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<Buffer> in, ref;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      in.push_back(randomBuffer(t.type, t.count, (i + 1) * 7919 + r));
      ref.push_back(blockingAllreduce(comm, mode, in[i], t.count, t.type, op, t.name));
    }
    const size_t thresholds[] = {0, 64 << 10, 64 << 20};
    const double cycles[] = {0.2, 2.0};
    for (int ti = 0; ti < 3; ++ti) {
      for (int ci = 0; ci < 2; ++ci) {
        EngineOptions options;
        options.fusionThresholdBytes = thresholds[ti];
        options.cycleTimeMs = cycles[ci];
        std::mt19937_64 rng(1000 * r + 10 * ti + ci + 1);
        withEngine(comm, options, [&](Engine& engine) {
          // Two steps with the same names: the second is announced through the response cache.
          for (int step = 0; step < 2; ++step) {
            const bool inPlace = (ti + ci + step) % 2 == 1;
            SCOPED_TRACE("rank " + std::to_string(r) + ", threshold " +
                         std::to_string(thresholds[ti]) + ", cycle " + std::to_string(cycles[ci]) +
                         " ms, step " + std::to_string(step) + (inPlace ? ", in place" : ""));
            std::vector<Buffer> out;
            for (size_t i = 0; i < tensors.size(); ++i) {
              const size_t bytes = tensors[i].count * dataTypeSize(tensors[i].type);
              out.push_back(output(bytes));
              if (inPlace) std::memcpy(out[i].data(), in[i].data(), bytes);
            }
            // A different order and different pauses on every rank, configuration and step.
            std::vector<size_t> order(tensors.size());
            std::iota(order.begin(), order.end(), 0);
            std::shuffle(order.begin(), order.end(), rng);
            std::vector<RequestPtr> requests(tensors.size());
            for (size_t i : order) {
              const Tensor& t = tensors[i];
              const void* send = inPlace ? out[i].data() : in[i].data();
              requests[i] = enqueueOk(
                  engine, allreduce(t.name, t.type, t.count, send, out[i].data(), op, mode));
              if (rng() % 4 == 0)
                std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
            }
            for (size_t i = 0; i < tensors.size(); ++i) {
              const Tensor& t = tensors[i];
              ASSERT_TRUE(ok(waitFor(requests[i]))) << t.name;
              EXPECT_TRUE(sameBits(out[i].data(), ref[i].data(), t.count, t.type)) << t.name;
              EXPECT_TRUE(tailUntouched(out[i], t.count * dataTypeSize(t.type)))
                  << t.name << " written past its end";
            }
          }
        });
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(FusionEngineModes, FusionEngineManyTensorsTest,
                         ::testing::Combine(::testing::Values(Mode::kOrdered, Mode::kInvariant),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kAverage),
                                            ::testing::Values(3, 4)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" +
                                  std::string(reduceOpName(std::get<1>(info.param))) + "_np" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Groups -----------------------------------------------------------------------------------------

TEST(FusionEngineGroupTest, GroupGivesTheBlockingBitsAndOneBadMemberFailsTheGroup) {
  const std::vector<Tensor> members = {{"g.w0", kF32, 1000},
                                       {"g.b0", kF32, 7},
                                       {"g.w1", DataType::kFloat64, 5000},
                                       {"g.w2", kF32, 300000},
                                       {"g.b1", DataType::kFloat16, 33}};
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    EngineOptions options;
    options.fusionThresholdBytes = 64 << 10;
    std::vector<Buffer> in, ref, out;
    std::vector<RequestSpec> specs;
    for (size_t i = 0; i < members.size(); ++i) {
      const Tensor& t = members[i];
      in.push_back(randomBuffer(t.type, t.count, 500 + 7919 * i + r));
      ref.push_back(blockingAllreduce(comm, Mode::kOrdered, in[i], t.count, t.type,
                                      ReduceOp::kAverage, t.name));
      out.push_back(output(t.count * dataTypeSize(t.type)));
      specs.push_back(
          allreduce(t.name, t.type, t.count, in[i].data(), out[i].data(), ReduceOp::kAverage));
    }
    withEngine(comm, options, [&](Engine& engine) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * r));  // ranks arrive apart
      std::atomic<int> calls{0};
      std::vector<RequestPtr> requests;
      ASSERT_TRUE(ok(engine.enqueueGroup(
          specs, [&](const Status&) { ++calls; }, &requests)));
      ASSERT_EQ(requests.size(), members.size());
      for (size_t i = 0; i < members.size(); ++i) {
        const Tensor& t = members[i];
        EXPECT_EQ(requests[i]->descriptor().groupSize, members.size());
        ASSERT_TRUE(ok(waitFor(requests[i]))) << "rank " << r << " " << t.name;
        EXPECT_TRUE(sameBits(out[i].data(), ref[i].data(), t.count, t.type))
            << "rank " << r << " " << t.name;
      }
      EXPECT_EQ(calls.load(), static_cast<int>(members.size()));

      // Rank 1's second member has no recv buffer: the whole group fails, on every rank.
      std::vector<Buffer> bad(3, output(64 * 4));
      std::vector<RequestSpec> badSpecs;
      for (int k = 0; k < 3; ++k) {
        void* recv = (r == 1 && k == 1) ? nullptr : bad[k].data();
        badSpecs.push_back(allreduce("h" + std::to_string(k), kF32, 64, in[0].data(), recv));
      }
      std::vector<RequestPtr> badRequests;
      ASSERT_TRUE(ok(engine.enqueueGroup(badSpecs, nullptr, &badRequests)));
      ASSERT_EQ(badRequests.size(), 3u);
      expectFailure(waitFor(badRequests[1]), StatusCode::kInvalidArgument,
                    {"'h1'", "rank 1", "recvbuf is null"});
      for (int k : {0, 2}) {
        expectFailure(waitFor(badRequests[k]), StatusCode::kInvalidArgument,
                      {"'h" + std::to_string(k) + "'", "'h1'"});
        EXPECT_TRUE(untouched(bad[k])) << "rank " << r << " h" << k;
      }
    });
  });
}

// Broadcast and allgather ------------------------------------------------------------------------

TEST(FusionEngineBroadcastAllgatherTest, MixedWithAllreducesGiveTheRightData) {
  const int p = 4;
  const DataType types[] = {kF32, DataType::kFloat64, DataType::kFloat16, DataType::kInt64};
  const size_t counts[] = {1, 1000, 40000, 0, 77, 123457};
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::vector<Buffer>> inputs(6);  // [k][rank]: every rank knows every input
    std::vector<Buffer> bcast(6), gathered(6), reduced(6), ref(6);
    std::vector<RequestSpec> specs;
    for (int k = 0; k < 6; ++k) {
      const DataType t = types[k % 4];
      const size_t bytes = counts[k] * dataTypeSize(t);
      for (int q = 0; q < p; ++q) inputs[k].push_back(randomBuffer(t, counts[k], 31 * k + q));
      const int root = k % p;
      bcast[k] = r == root ? inputs[k][r] : Buffer(bytes, kSentinel);
      bcast[k].resize(bytes + kTail, kSentinel);
      gathered[k] = output(bytes * p);
      // Allgather 1 in place: the send buffer is this rank's slot of recv.
      if (k == 1) std::memcpy(gathered[k].data() + r * bytes, inputs[k][r].data(), bytes);
      const void* gsend = k == 1 ? gathered[k].data() + r * bytes : inputs[k][r].data();
      reduced[k] = output(bytes);
      const std::string id = std::to_string(k);
      if (t != DataType::kInt64) {
        ref[k] = blockingAllreduce(comm, Mode::kOrdered, inputs[k][r], counts[k], t, ReduceOp::kSum,
                                   "r" + id);
        specs.push_back(allreduce("r" + id, t, counts[k], inputs[k][r].data(), reduced[k].data()));
      }
      specs.push_back(spec(RequestKind::kBroadcast, "b" + id, t, counts[k], nullptr,
                           bcast[k].data(), ReduceOp::kSum, Mode::kOrdered, root));
      specs.push_back(
          spec(RequestKind::kAllgather, "a" + id, t, counts[k], gsend, gathered[k].data()));
    }
    std::mt19937_64 rng(77 + r);
    std::shuffle(specs.begin(), specs.end(), rng);
    withEngine(comm, EngineOptions{}, [&](Engine& engine) {
      std::vector<RequestPtr> requests;
      for (RequestSpec& s : specs) {
        requests.push_back(enqueueOk(engine, s));
        if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      }
      for (const RequestPtr& request : requests) EXPECT_TRUE(ok(waitFor(request)));
    });
    for (int k = 0; k < 6; ++k) {
      const DataType t = types[k % 4];
      const size_t bytes = counts[k] * dataTypeSize(t);
      SCOPED_TRACE("rank " + std::to_string(r) + ", k " + std::to_string(k));
      EXPECT_TRUE(sameBits(bcast[k].data(), inputs[k][k % p].data(), counts[k], t)) << "broadcast";
      EXPECT_TRUE(tailUntouched(bcast[k], bytes));
      for (int q = 0; q < p; ++q) {
        EXPECT_TRUE(sameBits(gathered[k].data() + q * bytes, inputs[k][q].data(), counts[k], t))
            << "allgather slot " << q;
      }
      EXPECT_TRUE(tailUntouched(gathered[k], p * bytes));
      if (t != DataType::kInt64) {
        EXPECT_TRUE(sameBits(reduced[k].data(), ref[k].data(), counts[k], t)) << "allreduce";
      }
    }
  });
}

// Errors -----------------------------------------------------------------------------------------

TEST(FusionEngineErrorTest, MismatchOrLocalBadArgumentFailsEveryRankNamingTheRanks) {
  const int p = 4;
  std::vector<std::vector<Status>> status(5, std::vector<Status>(p));  // x, y, n, b, ok again
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    const Buffer in = randomBuffer(DataType::kFloat64, 200, 9 + r);
    const Buffer ref = blockingAllreduce(comm, Mode::kOrdered, in, 100, kF32, ReduceOp::kSum, "ok");
    std::vector<Buffer> outs(4, output(101 * 8));
    Buffer okOut = output(100 * 4);
    const std::vector<RequestSpec> bad = {
        allreduce("x", kF32, r == 1 ? 101 : 100, in.data(), outs[0].data()),  // count
        allreduce("y", r == 2 ? DataType::kFloat64 : kF32, 50, in.data(), outs[1].data()),
        allreduce("n", kF32, 10, in.data(), r == 1 ? nullptr : outs[2].data()),
        spec(RequestKind::kBroadcast, "b", kF32, 10, nullptr, outs[3].data(), ReduceOp::kSum,
             Mode::kOrdered, r == 3 ? 5 : 0)};
    withEngine(comm, EngineOptions{}, [&](Engine& engine) {
      std::vector<RequestPtr> requests;
      for (const RequestSpec& s : bad) requests.push_back(enqueueOk(engine, s));
      RequestPtr good = enqueueOk(engine, allreduce("ok", kF32, 100, in.data(), okOut.data()));
      for (size_t k = 0; k < bad.size(); ++k) status[k][r] = waitFor(requests[k]);
      EXPECT_TRUE(ok(waitFor(good))) << "rank " << r;
      EXPECT_TRUE(sameBits(okOut.data(), ref.data(), 100, kF32)) << "rank " << r;
      // "ok" is cached now, and the other ranks announce it as a bit: rank 3 still mismatches.
      RequestPtr again =
          enqueueOk(engine, allreduce("ok", kF32, r == 3 ? 99 : 100, in.data(), outs[0].data()));
      status[4][r] = waitFor(again);
    });
    for (const Buffer& o : outs) EXPECT_TRUE(untouched(o)) << "rank " << r;
  });
  expectSameFailureEverywhere(status[0], StatusCode::kMismatch,
                              {"'x'", "rank 1", "ranks 0, 2 and 3"});
  expectSameFailureEverywhere(status[1], StatusCode::kMismatch,
                              {"'y'", "rank 2", "ranks 0, 1 and 3", "float64"});
  expectSameFailureEverywhere(status[2], StatusCode::kInvalidArgument,
                              {"'n'", "rank 1", "recvbuf is null"});
  expectSameFailureEverywhere(status[3], StatusCode::kInvalidArgument, {"'b'", "rank 3", "root 5"});
  expectSameFailureEverywhere(
      status[4], StatusCode::kMismatch,
      {"'ok'", "ranks 0, 1 and 2 have allreduce float32[100]", "rank 3 has allreduce float32[99]"});
}

TEST(FusionEngineErrorTest, DuplicateNameIsRefusedAndTheFirstStillCompletes) {
  const int p = 3;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    const Buffer in = randomBuffer(kF32, 500, 70 + r);
    const Buffer ref = blockingAllreduce(comm, Mode::kOrdered, in, 500, kF32, ReduceOp::kSum, "d");
    auto request = [&](const std::string& n, Buffer& o) {
      return allreduce(n, kF32, 500, in.data(), o.data());
    };
    withEngine(comm, EngineOptions{}, [&](Engine& engine) {
      // One rank enqueues late, so no other rank's first request can complete before its
      // duplicate is refused; over the two rounds every rank is refused.
      for (int late : {p - 1, 0}) {
        const std::string name = "d" + std::to_string(late);
        const std::string spare = "free" + std::to_string(late);
        Buffer out = output(500 * 4), out2 = output(500 * 4);
        RequestPtr first;
        if (r != late) {
          first = enqueueOk(engine, request(name, out));
          RequestPtr again;
          expectFailure(engine.enqueue(request(name, out2), nullptr, &again),
                        StatusCode::kInvalidArgument, {"'" + name + "'", "already enqueued"});
          EXPECT_EQ(again, nullptr);
          // A group holding the name is refused whole: its other member is not enqueued.
          std::vector<RequestPtr> group;
          expectFailure(
              engine.enqueueGroup({request(spare, out2), request(name, out2)}, nullptr, &group),
              StatusCode::kInvalidArgument, {"'" + name + "'"});
          EXPECT_TRUE(group.empty());
          expectFailure(engine.enqueueGroup({request("twice", out2), request("twice", out2)},
                                            nullptr, &group),
                        StatusCode::kInvalidArgument, {"'twice'"});
          EXPECT_TRUE(group.empty());
        }
        ASSERT_TRUE(ok(collective::barrier(comm)));
        if (r == late) first = enqueueOk(engine, request(name, out));
        ASSERT_TRUE(first);
        EXPECT_TRUE(ok(waitFor(first))) << "rank " << r;
        EXPECT_TRUE(sameBits(out.data(), ref.data(), 500, kF32)) << name;
        EXPECT_TRUE(untouched(out2)) << name;
        // The refused group left nothing behind, and a completed name can be used again.
        for (const std::string& n : {spare, name}) {
          Buffer again = output(500 * 4);
          RequestPtr next = enqueueOk(engine, request(n, again));
          EXPECT_TRUE(ok(waitFor(next))) << "rank " << r;
          EXPECT_TRUE(sameBits(again.data(), ref.data(), 500, kF32)) << n;
        }
      }
    });
  });
}

TEST(FusionEngineErrorTest, StallWarnsThenTimesOutNamingTheMissingRankAndStopsEveryEngine) {
  const int p = 3;
  std::mutex mutex;
  std::vector<std::string> warnings;
  std::vector<Status> late(p);
  std::vector<Status> afterwards(p);
  std::vector<double> waited(p, 0);
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    EngineOptions options;
    options.stallWarningSeconds = 0.2;
    options.stallShutdownSeconds = 1;
    options.warn = [&](const std::string& text) {
      std::lock_guard<std::mutex> lock(mutex);
      warnings.push_back(text);
    };
    const Buffer in = randomBuffer(kF32, 64, 40 + r);
    Buffer out = output(64 * 4), after = output(64 * 4);
    withEngine(comm, options, [&](Engine& engine) {
      if (r != 2) {  // rank 2 does not enqueue "late" in time
        const Clock::time_point begin = Clock::now();
        RequestPtr request = enqueueOk(engine, allreduce("late", kF32, 64, in.data(), out.data()));
        late[r] = waitFor(request);
        waited[r] = std::chrono::duration<double>(Clock::now() - begin).count();
      }
      ASSERT_TRUE(ok(collective::barrier(comm)));
      // The stall stopped every engine, rank 2's too: its late "late" and everyone's next request
      // are refused with the stall's TIMEOUT, so nothing can pair across steps. (Every engine
      // stops on the same response; rank 2's may take a moment to read it.)
      for (int i = 0; i < 1000 && engine.stoppedBecause().isOk(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      RequestPtr next;
      afterwards[r] = engine.enqueue(
          allreduce(r == 2 ? "late" : "after", kF32, 64, in.data(), after.data()), nullptr, &next);
      EXPECT_EQ(next, nullptr) << "rank " << r;
      EXPECT_EQ(engine.stoppedBecause().code(), StatusCode::kTimeout) << "rank " << r;
    });
    EXPECT_TRUE(untouched(out)) << "rank " << r;
    EXPECT_TRUE(untouched(after)) << "rank " << r;
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(afterwards[r].code(), StatusCode::kTimeout) << "rank " << r;
    EXPECT_TRUE(contains(afterwards[r].message(), "'late' stalled: rank 2"))
        << afterwards[r].message();
  }
  late.pop_back();
  expectSameFailureEverywhere(late, StatusCode::kTimeout, {"'late'", "rank 2"});
  // The rank announced first waited the whole stallShutdownSeconds.
  EXPECT_GE(std::max(waited[0], waited[1]), 0.95) << "timed out early";
  int aboutLate = 0;
  for (const std::string& w : warnings) {
    if (!contains(w, "'late'")) continue;
    ++aboutLate;
    EXPECT_TRUE(contains(w, "rank 2") && contains(w, "ranks 0 and 1")) << w;
  }
  EXPECT_GE(aboutLate, 1) << "no stall warning about 'late'";
}

TEST(FusionEngineErrorTest, ShutdownFailsRequestsInFlightAndRefusesLaterEnqueues) {
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    const Buffer in = randomBuffer(kF32, 32, 3 + r);
    Buffer out = output(32 * 4);
    auto refused = [&](Engine& engine) {
      RequestPtr request;
      expectFailure(
          engine.enqueue(allreduce("later", kF32, 32, in.data(), out.data()), nullptr, &request),
          StatusCode::kNotInitialized, {"'later'"});
      EXPECT_EQ(request, nullptr) << "rank " << r;
    };
    {  // Every rank shuts down, rank 0 with a request nobody else enqueues.
      RankEngine e(comm, EngineOptions{});
      RequestPtr orphan =
          r == 0 ? enqueueOk(*e.engine, allreduce("orphan", kF32, 32, in.data(), out.data()))
                 : nullptr;
      ASSERT_TRUE(ok(collective::barrier(comm)));
      e.engine->shutdown();
      if (orphan) {
        EXPECT_TRUE(orphan->done()) << "shutdown returned with a request in flight";
        const Status s = orphan->done() ? orphan->wait() : Status::ok();
        expectFailure(s, StatusCode::kNotInitialized, {"'orphan'", "shut down"});
      }
      refused(*e.engine);
    }
    {  // Rank 1 alone shuts down: the other ranks' engines stop too.
      RankEngine e(comm, EngineOptions{});
      const std::string name = "orphan" + std::to_string(r);
      RequestPtr orphan =
          r != 1 ? enqueueOk(*e.engine, allreduce(name, kF32, 32, in.data(), out.data())) : nullptr;
      ASSERT_TRUE(ok(collective::barrier(comm)));
      if (r == 1) e.engine->shutdown();
      if (orphan) {
        expectFailure(waitFor(orphan), StatusCode::kNotInitialized, {"'" + name + "'", "rank 1"});
        refused(*e.engine);
      }
      e.engine->shutdown();
    }
    EXPECT_TRUE(untouched(out)) << "rank " << r;
  });
}

// Callbacks --------------------------------------------------------------------------------------

TEST(FusionEngineCallbackTest, RunsOnceWithTheStatusBeforeWaitReturns) {
  struct Seen {
    std::atomic<int> calls{0};
    std::atomic<bool> finished{false};
    Status status;
  };
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    const Buffer in = randomBuffer(kF32, 256, 90 + r);
    Buffer out = output(256 * 4), bad = output(256 * 4), out2 = output(256 * 4);
    Buffer chainedOut = output(256 * 4);
    Seen good, mismatched;
    auto callback = [](Seen& seen) {
      return [&seen](const Status& s) {
        seen.status = s;
        ++seen.calls;
        // Slow on purpose: a waiter woken before the callback ends would see finished false.
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        seen.finished = true;
      };
    };
    withEngine(comm, EngineOptions{}, [&](Engine& engine) {
      RequestPtr a =
          enqueueOk(engine, allreduce("cb", kF32, 256, in.data(), out.data()), callback(good));
      RequestPtr b =
          enqueueOk(engine, allreduce("cb_bad", kF32, r == 0 ? 255 : 256, in.data(), bad.data()),
                    callback(mismatched));
      // A callback may enqueue: it runs on the engine's thread without the engine's lock.
      RequestPtr chained;
      RequestPtr c = enqueueOk(
          engine, allreduce("cb_chain", kF32, 256, in.data(), out2.data()), [&](const Status&) {
            chained =
                enqueueOk(engine, allreduce("chained", kF32, 256, in.data(), chainedOut.data()));
          });
      ASSERT_TRUE(a && b && c);
      EXPECT_TRUE(ok(c->wait()));
      EXPECT_TRUE(ok(waitFor(chained))) << "rank " << r;
      EXPECT_TRUE(sameBits(chainedOut.data(), out.data(), 256, kF32)) << "rank " << r;
      for (auto [request, seen, code] : {std::tuple{a, &good, StatusCode::kSuccess},
                                         std::tuple{b, &mismatched, StatusCode::kMismatch}}) {
        const Status status = request->wait();  // blocking; the deadline of runRanks bounds it
        EXPECT_TRUE(seen->finished) << "wait() returned before the callback finished";
        EXPECT_EQ(seen->calls.load(), 1);
        EXPECT_EQ(status.code(), code) << status.toString();
        EXPECT_EQ(seen->status.code(), status.code());
        EXPECT_EQ(seen->status.message(), status.message());
      }
    });
    EXPECT_EQ(good.calls.load(), 1) << "rank " << r << ": callback ran again at shutdown";
    EXPECT_EQ(mismatched.calls.load(), 1) << "rank " << r;
  });
}

// A callback that throws stops the engine (loop() catches it), but no request is dropped: the
// requests of the batches not yet run fail, naming the exception, their names are free of the
// engine's bookkeeping, and the request whose callback threw is complete too.
TEST(FusionEngineCallbackTest, ACallbackThatThrowsFailsTheRestAndStopsTheEngine) {
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    const Buffer in32 = randomBuffer(kF32, 64, 300 + r);
    const Buffer in64 = randomBuffer(DataType::kFloat64, 64, 310 + r);
    Buffer out32 = output(64 * 4), out64 = output(64 * 8);
    std::atomic<int> calls{0};
    Status second;
    // One group, two dtypes: two batches of one response, run one after the other.
    std::vector<RequestSpec> specs;
    specs.push_back(allreduce("throws.a", kF32, 64, in32.data(), out32.data()));
    specs.push_back(allreduce("throws.b", DataType::kFloat64, 64, in64.data(), out64.data()));
    RankEngine e(comm, EngineOptions{});
    std::vector<RequestPtr> requests;
    ASSERT_TRUE(ok(e.engine->enqueueGroup(
        std::move(specs),
        [&](const Status& s) {
          if (calls.fetch_add(1) == 0) throw std::runtime_error("callback exploded");
          second = s;
        },
        &requests)));
    ASSERT_EQ(requests.size(), 2u);
    // The batch whose callback threw ran; the other did not, whichever ran first.
    const Status a = waitFor(requests[0], 5), b = waitFor(requests[1], 5);
    EXPECT_NE(a.isOk(), b.isOk()) << "rank " << r << ": " << a.toString() << " / " << b.toString();
    const Status& failed = a.isOk() ? b : a;
    const std::string failedName = a.isOk() ? "throws.b" : "throws.a";
    expectFailure(failed, StatusCode::kInternal,
                  {"allreduce '" + failedName + "' did not complete",
                   "the fusion engine stopped: callback exploded"});
    EXPECT_EQ(second.message(), failed.message()) << "rank " << r;
    EXPECT_EQ(calls.load(), 2) << "rank " << r;
    // The engine has stopped with the exception's text; a later enqueue of either name is refused
    // with it.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
    while (e.engine->stoppedBecause().isOk() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    expectFailure(e.engine->stoppedBecause(), StatusCode::kInternal, {"callback exploded"});
    for (const char* name : {"throws.a", "throws.b"}) {
      RequestPtr again;
      expectFailure(
          e.engine->enqueue(allreduce(name, kF32, 64, in32.data(), out32.data()), nullptr, &again),
          StatusCode::kInternal, {"callback exploded", name, "was not enqueued"});
      EXPECT_EQ(again, nullptr);
    }
    e.engine->shutdown();
  });
}

// Timeline ---------------------------------------------------------------------------------------

TEST(FusionEngineTimelineTest, WritesChromeTraceEventsForEveryRequest) {
  const std::string path = ::testing::TempDir() + "fusion_engine_timeline_" +
                           std::to_string(static_cast<long>(::getpid())) + ".json";
  const std::vector<std::string> fused = {"t.a", "t.b", "t.c", "t.d"};
  std::string afterShutdown, afterDestruction;
  auto read = [&] {
    std::ifstream file(path);
    return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  };
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    EngineOptions options;
    options.timelinePath = path;  // rank 0 writes it
    const Buffer small = randomBuffer(kF32, 1000, 11 + r), big = randomBuffer(kF32, 300000, 12 + r);
    std::vector<Buffer> outs(5, Buffer(300000 * 4));
    RankEngine e(comm, options);
    std::vector<RequestSpec> specs;
    for (size_t i = 0; i < fused.size(); ++i) {
      specs.push_back(allreduce(fused[i], kF32, 1000, small.data(), outs[i].data()));
    }
    std::vector<RequestPtr> requests;  // a group is ready in one cycle: one fused batch
    EXPECT_TRUE(ok(e.engine->enqueueGroup(specs, nullptr, &requests)));
    // Past directBytes: runs alone.
    requests.push_back(
        enqueueOk(*e.engine, allreduce("t.big", kF32, 300000, big.data(), outs[4].data())));
    for (const RequestPtr& request : requests) EXPECT_TRUE(ok(waitFor(request)));
    e.engine->shutdown();
    if (r == 0) afterShutdown = read();
    ASSERT_TRUE(ok(collective::barrier(comm)));
    e.engine.reset();
    if (r == 0) afterDestruction = read();
  });
  std::remove(path.c_str());
  // After shutdown() the engine has stopped for good: nothing is left to write.
  EXPECT_TRUE(nlohmann::json::parse(afterShutdown, nullptr, false).is_array())
      << "the timeline is not complete JSON after shutdown():\n"
      << afterShutdown;
  const nlohmann::json trace = nlohmann::json::parse(afterDestruction, nullptr, false);
  ASSERT_TRUE(trace.is_array()) << "not a JSON array:\n" << afterDestruction;
  std::map<int, std::string> rows;  // tid -> request name, named before the row's first event
  // name -> phase -> every {ts, dur} of it
  std::map<std::string, std::map<std::string, std::vector<std::pair<double, double>>>> phases;
  for (const auto& event : trace) {
    if (event.value("ph", "") == "M" && event.value("name", "") == "thread_name") {
      rows[event.value("tid", -1)] = event["args"].value("name", "");
    }
    if (event.value("ph", "") != "X") continue;
    ASSERT_TRUE(event.contains("ts") && event["ts"].is_number() && event.contains("dur") &&
                event["dur"].is_number())
        << event.dump();
    EXPECT_GE(event["dur"].get<double>(), 0) << event.dump();
    ASSERT_EQ(rows.count(event.value("tid", -1)), 1u)
        << "event on an unnamed row: " << event.dump();
    phases[rows[event.value("tid", -1)]][event.value("name", "")].emplace_back(
        event["ts"].get<double>(), event["dur"].get<double>());
  }
  for (const std::string& name : fused) {
    for (const char* phase : {"NEGOTIATE", "COPY_IN", "ALLREDUCE", "COPY_OUT"}) {
      EXPECT_EQ(phases[name][phase].size(), 1u) << name << " " << phase;
    }
    // One batch: every member has the same copy-in interval.
    EXPECT_EQ(phases[name]["COPY_IN"], phases[fused[0]]["COPY_IN"]) << name;
  }
  EXPECT_EQ(phases["t.big"]["NEGOTIATE"].size(), 1u);
  EXPECT_EQ(phases["t.big"]["ALLREDUCE"].size(), 1u);
  EXPECT_EQ(phases["t.big"]["COPY_IN"].size(), 0u) << "a tensor past directBytes was fused";
}

TEST(FusionEngineTimelineTest, UnwritableFileFailsStartButTheEngineStillRuns) {
  const std::string path = "/nonexistent-detcoll-dir/timeline.json";
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    EngineOptions options;
    options.timelinePath = path;
    std::unique_ptr<ThreadCommunicator> engineComm =
        static_cast<ThreadCommunicator&>(comm).duplicate();
    Engine engine(*engineComm, options);
    const Status started = engine.start();
    if (r == 0) expectFailure(started, StatusCode::kInvalidArgument, {path});
    if (r != 0) EXPECT_TRUE(ok(started));
    const Buffer in = randomBuffer(kF32, 8, 20 + r);
    Buffer out = output(8 * 4);
    RequestPtr request = enqueueOk(engine, allreduce("g", kF32, 8, in.data(), out.data()));
    EXPECT_TRUE(ok(waitFor(request))) << "rank " << r;
    engine.shutdown();
  });
}

}  // namespace
}  // namespace detcoll

namespace detcoll {
namespace {

TEST(FusionEngineThresholdTest, RanksWithDifferentThresholdsPlanWithRankZeros) {
  // The threshold differs between ranks (an environment set differently, or setFusionThreshold
  // on some ranks only): every rank still plans with rank 0's, so they run the same collectives
  // and get the blocking bits.
  const int p = 3;
  const size_t n = 20;
  std::vector<std::vector<Buffer>> in(p);
  for (int r = 0; r < p; ++r) {
    for (size_t t = 0; t < n; ++t) {
      in[r].push_back(testing::randomBuffer(DataType::kFloat32, 100 + 37 * t, 17 * r + t));
    }
  }
  std::vector<std::vector<Buffer>> out(p, std::vector<Buffer>(n)), want(p, std::vector<Buffer>(n));
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    collective::Collectives blocking(comm);
    for (size_t t = 0; t < n; ++t) {
      want[r][t].assign(in[r][t].size(), 0);
      ASSERT_TRUE(ok(blocking.allreduce(Mode::kOrdered, in[r][t].data(), want[r][t].data(),
                                        in[r][t].size() / 4, static_cast<int>(DataType::kFloat32),
                                        static_cast<int>(ReduceOp::kSum), "reference")));
    }
    EngineOptions options;
    options.fusionThresholdBytes = r == 0 ? 0 : (64 << 20);
    withEngine(comm, options, [&](Engine& engine) {
      if (r == 2) engine.setFusionThreshold(1 << 10);
      std::vector<RequestPtr> requests;
      for (size_t t = 0; t < n; ++t) {
        out[r][t].assign(in[r][t].size(), 0);
        requests.push_back(
            enqueueOk(engine, allreduce("t" + std::to_string(t), DataType::kFloat32,
                                        in[r][t].size() / 4, in[r][t].data(), out[r][t].data())));
      }
      for (const RequestPtr& request : requests) EXPECT_TRUE(ok(waitFor(request)));
    });
  });
  for (int r = 0; r < p; ++r) {
    for (size_t t = 0; t < n; ++t) EXPECT_EQ(out[r][t], want[r][t]) << "rank " << r << " t" << t;
  }
}

}  // namespace
}  // namespace detcoll
