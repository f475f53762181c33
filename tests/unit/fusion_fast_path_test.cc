// The fast path of a repeated step (fusion/fast_path.h): what a step is and the plan of one, then
// engines on ranks as threads. A step that repeats runs without the coordinator from its third
// run on, with the blocking collectives' bits; anything the plan does not hold (a new name, a
// changed shape on one rank, a tensor missing on one rank, a smaller step that a thread waits
// on, a join, a shutdown, a new threshold) stops it on every rank, and the requests complete or
// fail as they do negotiated, with the same messages.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collective/barrier.h"
#include "fusion/fast_path.h"
#include "fusion/settings.h"
#include "tests/unit/engine_ranks.h"

namespace detcoll {
namespace {

using fusion::EngineStats;
using fusion::FastPlan;
using fusion::StepTracker;
using testing::Buffer;
using testing::randomBuffer;
using testing::sameBits;
using namespace testing::engines;  // NOLINT: the harness

// StepTracker and FastPlan ---------------------------------------------------------------------

TEST(FusionStepTrackerTest, AStepRepeatsWhenExactlyItsRequestsRanAgain) {
  StepTracker t;
  t.observe({0, 1});
  t.observe({2});
  EXPECT_FALSE(t.repeated()) << "one run is not a repeat";
  t.observe({1, 2});  // 1 ran again: the step {0, 1, 2} ended
  EXPECT_FALSE(t.repeated());
  t.observe({});  // an empty response changes nothing
  t.observe({0});
  EXPECT_TRUE(t.repeated());
  ASSERT_EQ(t.latest().size(), 2u);
  EXPECT_EQ(t.latest()[0], (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(t.latest()[1], (std::vector<uint32_t>{0}));
  t.observe({3});  // a new request joins the step: no longer the same
  EXPECT_FALSE(t.repeated());

  StepTracker fewer;
  fewer.observe({0, 1, 2});
  fewer.observe({0, 1});
  EXPECT_FALSE(fewer.repeated()) << "a step that lacks one of the last step's requests";
  fewer.observe({2});
  EXPECT_TRUE(fewer.repeated());
  fewer.reset();
  EXPECT_FALSE(fewer.repeated());
  fewer.observe({0, 1, 2});
  EXPECT_FALSE(fewer.repeated()) << "reset forgets the last step";
}

fusion::Descriptor allreduceOf(size_t count, DataType type = kF32) {
  fusion::Descriptor d;
  d.type = type;
  d.count = count;
  return d;
}

TEST(FusionFastPlanTest, BucketsAreTheResponsesAndBatchesThePlannersOwn) {
  fusion::ResponseCache cache;
  const std::vector<std::pair<std::string, fusion::Descriptor>> requests = {
      {"a", allreduceOf(10)},
      {"b", allreduceOf(1 << 20)},
      {"c", allreduceOf(20)},
      {"d", allreduceOf(30)},
      {"e", allreduceOf(5, DataType::kFloat64)}};
  for (const auto& [name, d] : requests) cache.record(name, d);
  fusion::PlanOptions options;
  options.fusionThresholdBytes = 1 << 10;
  const FastPlan plan({{0, 1, 2}, {3, 4}}, cache, options);
  ASSERT_EQ(plan.buckets(), 2u);
  EXPECT_EQ(plan.members(0), 3u);
  EXPECT_EQ(plan.members(1), 2u);
  EXPECT_EQ(plan.requests(), 5u);
  EXPECT_EQ(plan.fusionThresholdBytes(), options.fusionThresholdBytes);
  // Bucket 0: "a" and "c" fused (float32, 120 bytes), "b" alone (past directBytes).
  ASSERT_EQ(plan.batches(0).size(), 2u);
  EXPECT_EQ(plan.batches(0)[0].members, (std::vector<size_t>{0, 2}));
  EXPECT_TRUE(plan.batches(0)[0].fused);
  EXPECT_EQ(plan.batches(0)[0].bytes, 120u);
  EXPECT_EQ(plan.batches(0)[1].members, (std::vector<size_t>{1}));
  EXPECT_FALSE(plan.batches(0)[1].fused);
  // Bucket 1: two dtypes, two batches of one.
  ASSERT_EQ(plan.batches(1).size(), 2u);
  EXPECT_FALSE(plan.batches(1)[0].fused);

  const auto d = plan.find("d", allreduceOf(30));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->bucket, 1u);
  EXPECT_EQ(d->index, 0u);
  EXPECT_FALSE(plan.find("d", allreduceOf(31)).has_value()) << "another shape is not the plan's";
  EXPECT_FALSE(plan.find("z", allreduceOf(30)).has_value());
  fusion::Descriptor deviceD = allreduceOf(30);
  deviceD.device = true;
  EXPECT_FALSE(fusion::fastEligible(deviceD));
  deviceD.device = false;
  deviceD.processSet = 2;
  EXPECT_FALSE(fusion::fastEligible(deviceD));
  fusion::Descriptor join;
  join.kind = RequestKind::kJoin;
  EXPECT_FALSE(fusion::fastEligible(join));
  EXPECT_TRUE(fusion::fastEligible(allreduceOf(30)));
}

TEST(FusionFastPathSettingTest, ReadFromTheEnvironmentOrHorovodsCacheCapacity) {
  const auto load = [](std::map<std::string, std::string> vars, bool* fast) {
    Environment env([vars](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
    EngineOptions options;
    const Status s = fusion::loadEngineSettings(env, &options);
    *fast = options.fastPath;
    return s;
  };
  bool fast = false;
  ASSERT_TRUE(ok(load({}, &fast)));
  EXPECT_TRUE(fast);
  ASSERT_TRUE(ok(load({{"DETCOLL_FAST_PATH", "0"}}, &fast)));
  EXPECT_FALSE(fast);
  ASSERT_TRUE(ok(load({{"HOROVOD_CACHE_CAPACITY", "0"}}, &fast)));
  EXPECT_FALSE(fast) << "Horovod's cache off: every request negotiated";
  ASSERT_TRUE(ok(load({{"HOROVOD_CACHE_CAPACITY", "1024"}}, &fast)));
  EXPECT_TRUE(fast);
  ASSERT_TRUE(ok(load({{"DETCOLL_FAST_PATH", "1"}, {"HOROVOD_CACHE_CAPACITY", "0"}}, &fast)));
  EXPECT_TRUE(fast) << "ours wins over Horovod's";
  for (const char* bad : {"2", "yes", "-1", "1 "}) {
    const Status s = load({{"DETCOLL_FAST_PATH", bad}}, &fast);
    expectFailure(s, StatusCode::kInvalidArgument, {"DETCOLL_FAST_PATH", "0 (off) or 1 (on)"});
  }
  expectFailure(load({{"HOROVOD_CACHE_CAPACITY", "lots"}}, &fast), StatusCode::kInvalidArgument,
                {"HOROVOD_CACHE_CAPACITY"});
}

// Engines --------------------------------------------------------------------------------------

constexpr int kRanks = 3;

struct Tensor {
  std::string name;
  DataType type;
  size_t count;
};

// 24 tensors: mostly small float32 (a model's biases), some float64 and float16, two past the
// direct size (1 MiB).
std::vector<Tensor> stepTensors() {
  std::vector<Tensor> tensors;
  std::mt19937_64 rng(24);
  for (int i = 0; i < 24; ++i) {
    size_t count = 1 + rng() % 3000;
    if (i == 5 || i == 17) count = 300000;
    const DataType type = i % 7 == 3 ? DataType::kFloat64 : i % 7 == 6 ? DataType::kFloat16 : kF32;
    tensors.push_back({"layer" + std::to_string(i) + ".grad", type, count});
  }
  return tensors;
}

// One rank's step: its tensors (or those `keep` accepts) enqueued in a random order, random
// inputs new for every step; the results are compared bit for bit with the blocking allreduce of
// the same inputs (which every rank runs for every tensor of the step, before the engine does).
class Step {
 public:
  Step(Communicator& comm, Engine& engine, Mode mode, ReduceOp op)
      : comm_(comm), engine_(engine), mode_(mode), op_(op) {}

  // The requests as enqueued, for the caller to wait on or check.
  // In a random order, or in the given one when `shuffle` is false.
  std::vector<RequestPtr> enqueue(const std::vector<Tensor>& tensors, int step,
                                  const std::function<bool(const Tensor&)>& keep = nullptr,
                                  bool shuffle = true) {
    const int r = comm_.rank();
    in_.clear();
    out_.clear();
    ref_.clear();
    kept_.clear();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      in_.push_back(randomBuffer(t.type, t.count, 1000003 * step + 7919 * i + r));
      ref_.push_back(blockingAllreduce(comm_, mode_, in_[i], t.count, t.type, op_, t.name));
      out_.push_back(output(t.count * dataTypeSize(t.type)));
      if (!keep || keep(t)) kept_.push_back(i);
    }
    std::vector<size_t> order = kept_;
    if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937_64(step * 31 + r));
    std::vector<RequestPtr> requests(tensors.size());
    for (size_t i : order) {
      const Tensor& t = tensors[i];
      requests[i] = enqueueOk(
          engine_, allreduce(t.name, t.type, t.count, in_[i].data(), out_[i].data(), op_, mode_));
    }
    return requests;
  }

  // Waits for the kept requests (but those the caller has set to null) and checks their bits.
  void check(const std::vector<Tensor>& tensors, const std::vector<RequestPtr>& requests) {
    for (size_t i : kept_) {
      const Tensor& t = tensors[i];
      if (!requests[i]) continue;  // the caller's to check
      ASSERT_TRUE(ok(waitFor(requests[i]))) << "rank " << comm_.rank() << " " << t.name;
      if (mode_ != Mode::kNative) {  // native bits depend on the batches (fusion's layout)
        EXPECT_TRUE(sameBits(out_[i].data(), ref_[i].data(), t.count, t.type))
            << "rank " << comm_.rank() << " " << t.name;
      }
      EXPECT_TRUE(tailUntouched(out_[i], t.count * dataTypeSize(t.type))) << t.name;
    }
  }

  const std::vector<Buffer>& outputs() const { return out_; }

  void run(const std::vector<Tensor>& tensors, int step, bool shuffle = true) {
    check(tensors, enqueue(tensors, step, nullptr, shuffle));
  }

 private:
  Communicator& comm_;
  Engine& engine_;
  const Mode mode_;
  const ReduceOp op_;
  std::vector<Buffer> in_, out_, ref_;
  std::vector<size_t> kept_;
};

EngineOptions fastOptions() {
  EngineOptions options;
  options.fusionThresholdBytes = 64 << 10;
  return options;
}

class FusionFastPathModesTest : public ::testing::TestWithParam<Mode> {};

TEST_P(FusionFastPathModesTest, ARepeatedStepSkipsTheCoordinatorAndKeepsTheBits) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<EngineStats> learned(kRanks), last(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      Step step(comm, engine, GetParam(), ReduceOp::kAverage);
      step.run(tensors, 0);  // first sightings
      step.run(tensors, 1);  // the repeat: the fast path starts after its last response
      learned[r] = engine.stats();
      for (int s = 2; s < 6; ++s) step.run(tensors, s);
      last[r] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) {
    // learned: read once step 1's requests completed, when the engine may not have started the
    // fast path yet, but has counted its last cycle.
    EXPECT_EQ(last[r].fastStarts, 1u) << "rank " << r;
    EXPECT_EQ(learned[r].fastRequests, 0u) << "rank " << r;
    EXPECT_EQ(last[r].fastRequests, 4 * tensors.size()) << "rank " << r;
    EXPECT_EQ(last[r].fastStops, 0u) << "rank " << r;
    EXPECT_EQ(last[r].cycles, learned[r].cycles) << "rank " << r << ": negotiated on the fast path";
  }
}

INSTANTIATE_TEST_SUITE_P(FusionFastPath, FusionFastPathModesTest,
                         ::testing::Values(Mode::kOrdered, Mode::kInvariant),
                         [](const auto& info) { return std::string(modeName(info.param)); });

TEST(FusionFastPathTest, NativeBitsAreThoseOfTheNegotiatedRunItLearnedFrom) {
  // In native mode the batches can change bits; the fast path runs the batches of the run it
  // learned from, so the same inputs give the same bits, on every rank.
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<std::vector<Buffer>> negotiated(kRanks), fast(kRanks);
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      Step step(comm, engine, Mode::kNative, ReduceOp::kAverage);
      step.run(tensors, 0);
      step.run(tensors, 1);  // learned from this run
      negotiated[r] = step.outputs();
      step.run(tensors, 1);  // the same inputs, on the fast path
      fast[r] = step.outputs();
      stats[r] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(stats[r].fastRequests, tensors.size()) << "rank " << r;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      EXPECT_TRUE(sameBits(fast[r][i].data(), negotiated[r][i].data(), t.count, t.type))
          << "rank " << r << " " << t.name;
      EXPECT_TRUE(sameBits(fast[r][i].data(), fast[0][i].data(), t.count, t.type))
          << "rank " << r << " " << t.name << " differs from rank 0's";
    }
  }
}

TEST(FusionFastPathTest, OffEveryStepIsNegotiated) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    EngineOptions options = fastOptions();
    options.fastPath = false;
    withEngine(comm, options, [&](Engine& engine) {
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
      for (int s = 0; s < 4; ++s) step.run(tensors, s);
      stats[comm.rank()] = engine.stats();
    });
  });
  for (const EngineStats& s : stats) {
    EXPECT_EQ(s.fastStarts, 0u);
    EXPECT_EQ(s.fastRequests, 0u);
    EXPECT_GE(s.cycles, 4u);
  }
}

TEST(FusionFastPathTest, ANewNameStopsItAndTheLargerStepStartsItAgain) {
  std::vector<Tensor> tensors = stepTensors();
  // The new name first: every rank's fast path stops before any bucket of the step is complete.
  std::vector<Tensor> larger = {{"extra.grad", kF32, 77}};
  larger.insert(larger.end(), tensors.begin(), tensors.end());
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kAverage);
      for (int s = 0; s < 3; ++s) step.run(tensors, s);
      step.run(larger, 3, false);
      for (int s = 4; s < 7; ++s) step.run(larger, s);
      stats[comm.rank()] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(stats[r].fastStops, 1u) << "rank " << r;
    EXPECT_EQ(stats[r].fastStarts, 2u) << "rank " << r;
    // Step 2 on the fast path; steps 3 and 4 negotiated (the new step, then its repeat); 5, 6 fast.
    EXPECT_EQ(stats[r].fastRequests, tensors.size() + 2 * larger.size()) << "rank " << r;
  }
}

// Runs `steps` steps of `tensors` (the fast path is on from the third), then fn.
void afterFastSteps(Communicator& comm, Engine& engine, const std::vector<Tensor>& tensors,
                    int steps = 3) {
  Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
  for (int s = 0; s < steps; ++s) step.run(tensors, s);
}

TEST(FusionFastPathTest, AChangedShapeOnOneRankFailsEveryRankNamingItTheRestComplete) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<Status> changed(kRanks);
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      afterFastSteps(comm, engine, tensors);
      // Rank 1 gives layer3 one element more; every other tensor is as before.
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
      const std::vector<RequestPtr> requests =
          step.enqueue(tensors, 9, [](const Tensor& t) { return t.name != "layer3.grad"; });
      Tensor t = tensors[3];
      if (r == 1) t.count += 1;
      const Buffer in = randomBuffer(t.type, t.count, 3);
      Buffer out = output(t.count * dataTypeSize(t.type));
      changed[r] =
          waitFor(enqueueOk(engine, allreduce(t.name, t.type, t.count, in.data(), out.data())));
      EXPECT_TRUE(testing::untouched(out)) << "rank " << r;
      step.check(tensors, requests);
      stats[r] = engine.stats();
    });
  });
  testing::expectSameFailureEverywhere(changed, StatusCode::kMismatch,
                                       {"'layer3.grad'", "rank 1", "ranks 0 and 2"});
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(stats[r].fastStops, 1u) << "rank " << r;
}

TEST(FusionFastPathTest, ATensorMissingOnOneRankIsAStallNamingThatRank) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<Status> missing(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    EngineOptions options = fastOptions();
    options.stallWarningSeconds = 0.4;
    options.stallShutdownSeconds = 1.5;
    options.warn = [](const std::string&) {};
    withEngine(comm, options, [&](Engine& engine) {
      afterFastSteps(comm, engine, tensors);
      // Rank 2 leaves out layer7 and waits for the rest, which complete: it holds part of a
      // bucket and waits, so the fast path stops, and the negotiation finds the stall.
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
      std::vector<RequestPtr> requests = step.enqueue(
          tensors, 9, [&](const Tensor& t) { return r != 2 || t.name != "layer7.grad"; });
      if (r != 2) {
        missing[r] = waitFor(requests[7]);
        requests[7] = nullptr;
      }
      step.check(tensors, requests);               // the others complete, with the right bits
      ASSERT_TRUE(ok(collective::barrier(comm)));  // rank 2's engine runs until the stall
    });
  });
  missing.pop_back();
  testing::expectSameFailureEverywhere(missing, StatusCode::kTimeout,
                                       {"'layer7.grad' stalled: rank 2"});
}

TEST(FusionFastPathTest, ASmallerStepThatAThreadWaitsOnRunsNegotiated) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    EngineOptions options = fastOptions();
    // The other way out of a partly held bucket, the idle limit, is far beyond waitFor's 20 s: the
    // waits below complete only because waiting stops the fast path.
    options.stallWarningSeconds = 0;
    options.stallShutdownSeconds = 0;
    options.fastIdleSeconds = 600;
    withEngine(comm, options, [&](Engine& engine) {
      afterFastSteps(comm, engine, tensors);
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
      // Every rank leaves out the same two tensors (a layer that got no gradient).
      const auto keep = [](const Tensor& t) {
        return t.name != "layer2.grad" && t.name != "layer11.grad";
      };
      step.check(tensors, step.enqueue(tensors, 10, keep));
      step.check(tensors, step.enqueue(tensors, 11, keep));
      step.check(tensors, step.enqueue(tensors, 12, keep));  // fast again: the new step repeated
      stats[comm.rank()] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(stats[r].fastStops, 1u) << "rank " << r;
    EXPECT_EQ(stats[r].fastStarts, 2u) << "rank " << r;
  }
}

TEST(FusionFastPathTest, ShutdownOnOneRankStopsEveryEngine) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<Status> refused(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    RankEngine e(comm, fastOptions());
    afterFastSteps(comm, *e.engine, tensors);
    if (r == 0) e.engine->shutdown();
    // The others enqueue a new name until they are refused: it stops the fast path, and the next
    // cycle's response stops their engines.
    for (int i = 0; i < 2000; ++i) {
      RequestPtr probe;
      Buffer in = randomBuffer(kF32, 4, 1), out = output(16);
      refused[r] =
          e.engine->enqueue(allreduce("probe", kF32, 4, in.data(), out.data()), nullptr, &probe);
      if (!refused[r].isOk()) break;
      // Enqueued before the engine stopped: it fails with the shutdown, or completes if every
      // rank's probe made it in time.
      (void)waitFor(probe);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(refused[r].code(), StatusCode::kNotInitialized)
        << "rank " << r << ": " << refused[r].toString();
    EXPECT_TRUE(contains(refused[r].message(), "rank 0 shut detcoll down"))
        << refused[r].toString();
    e.engine->shutdown();
  });
}

TEST(FusionFastPathTest, ARankThatJoinsStopsItAndContributesZeros) {
  const std::vector<Tensor> tensors = stepTensors();
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      afterFastSteps(comm, engine, tensors);
      // Rank 2 has run out of data: its join stops the fast path; the others' next step reduces
      // their tensors with rank 2's zeros.
      const Tensor& t = tensors[0];
      Buffer in = r == 2 ? Buffer(t.count * 4, 0) : randomBuffer(t.type, t.count, 77 + r);
      const Buffer ref =
          blockingAllreduce(comm, Mode::kOrdered, in, t.count, t.type, ReduceOp::kSum, "reference");
      int32_t last = -1;
      const auto join = [&] {
        RequestSpec spec;
        spec.name = fusion::kJoinName;
        spec.descriptor.kind = RequestKind::kJoin;
        spec.recv = &last;
        spec.checked = true;
        return enqueueOk(engine, std::move(spec));
      };
      RequestPtr joined;
      if (r == 2) joined = join();
      if (r != 2) {
        Buffer out = output(t.count * 4);
        ASSERT_TRUE(ok(
            waitFor(enqueueOk(engine, allreduce(t.name, t.type, t.count, in.data(), out.data())))));
        EXPECT_TRUE(sameBits(out.data(), ref.data(), t.count, t.type)) << "rank " << r;
      }
      if (r == 0) joined = join();
      // Rank 1 joins last. The barrier orders the enqueues, not the negotiation rounds that see
      // them: rank 1's engine could announce its join in a round whose rank 0 had not yet taken
      // its own. So rank 1 first completes one more allreduce, which needs every other rank
      // seen as joined (their zeros stand in), and joins after it.
      ASSERT_TRUE(ok(collective::barrier(comm)));
      if (r == 1) {
        Buffer out = output(t.count * 4);
        ASSERT_TRUE(ok(waitFor(
            enqueueOk(engine, allreduce("alone", t.type, t.count, in.data(), out.data())))));
        joined = join();
      }
      ASSERT_TRUE(ok(waitFor(joined))) << "rank " << r;
      EXPECT_EQ(last, 1) << "rank " << r << ": the last rank to join";
      EXPECT_GE(engine.stats().fastStops, 1u);
    });
  });
}

TEST(FusionFastPathTest, ANewThresholdOnRankZeroStopsItAndTheBitsStay) {
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      afterFastSteps(comm, engine, tensors);
      engine.setFusionThreshold(0);  // counts on rank 0 only
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
      for (int s = 10; s < 14; ++s) step.run(tensors, s);
      stats[comm.rank()] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(stats[r].fastStops, 1u) << "rank " << r;
    EXPECT_EQ(stats[r].fastStarts, 2u) << "rank " << r;
  }
}

TEST(FusionFastPathTest, AProcessSetThatLeavesOutARankKeepsEveryRankNegotiating) {
  // Ranks 0 and 1 also reduce "p" in set {0, 1} every step. The steps are learned from the
  // responses, which every rank reads alike, so rank 2 does not start the fast path alone (the
  // set's request is never part of a step: all negotiate).
  std::vector<std::unique_ptr<ThreadCommunicator>> members(2);
  ASSERT_TRUE(ok(collective::transport::spawn(2, [&](Communicator& c) {
    members[c.rank()] = static_cast<ThreadCommunicator&>(c).duplicate();
  })));
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      ASSERT_TRUE(ok(engine.addProcessSet(1, {0, 1}, r < 2 ? std::move(members[r]) : nullptr)));
      ASSERT_TRUE(ok(collective::barrier(comm)));
      for (int s = 0; s < 5; ++s) {
        const Buffer in = randomBuffer(kF32, 8, 10 * s + r);
        Buffer out = output(32), setOut = output(32);
        const Buffer ref =
            blockingAllreduce(comm, Mode::kOrdered, in, 8, kF32, ReduceOp::kSum, "g");
        RequestPtr g = enqueueOk(engine, allreduce("g", kF32, 8, in.data(), out.data()));
        RequestPtr p;
        if (r < 2) {
          RequestSpec set = allreduce("p", kF32, 8, in.data(), setOut.data());
          set.descriptor.processSet = 1;
          p = enqueueOk(engine, std::move(set));
          ASSERT_TRUE(ok(waitFor(p))) << "rank " << r << " step " << s;
        }
        ASSERT_TRUE(ok(waitFor(g))) << "rank " << r << " step " << s;
        EXPECT_TRUE(sameBits(out.data(), ref.data(), 8, kF32)) << "rank " << r << " step " << s;
      }
      stats[r] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(stats[r].fastStarts, 0u) << "rank " << r;
}

TEST(FusionFastPathTest, OffOnOneRankKeepsEveryRankNegotiating) {
  // The C API refuses this at init (DETCOLL_FAST_PATH differs); an engine on its own must not
  // hang on it either: a rank whose fast path is off says so in every message.
  const std::vector<Tensor> tensors = stepTensors();
  std::vector<EngineStats> stats(kRanks);
  runRanks(kRanks, [&](Communicator& comm) {
    EngineOptions options = fastOptions();
    options.fastPath = comm.rank() != 1;
    withEngine(comm, options, [&](Engine& engine) {
      Step step(comm, engine, Mode::kOrdered, ReduceOp::kSum);
      for (int s = 0; s < 5; ++s) step.run(tensors, s);
      stats[comm.rank()] = engine.stats();
    });
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(stats[r].fastStarts, 0u) << "rank " << r;
}

TEST(FusionFastPathTest, ACallbackFindsItsBatchsEarlierRequestsDone) {
  // A group of three, one callback: each call finds the members before it done (a callback may
  // wait on them), on the fast path and negotiated alike.
  runRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    withEngine(comm, fastOptions(), [&](Engine& engine) {
      for (int s = 0; s < 5; ++s) {
        std::vector<Buffer> in, out;
        std::vector<RequestSpec> specs;
        for (int k = 0; k < 3; ++k) {
          in.push_back(randomBuffer(kF32, 16, 100 * s + 10 * k + r));
          out.push_back(output(64));
          specs.push_back(
              allreduce("m" + std::to_string(k), kF32, 16, in[k].data(), out[k].data()));
        }
        std::vector<RequestPtr> requests;
        std::atomic<int> calls{0};
        std::atomic<int> earlierNotDone{0};
        ASSERT_TRUE(ok(engine.enqueueGroup(
            specs,
            [&](const Status&) {
              const int k = calls++;
              for (int j = 0; j < k; ++j) {
                if (!requests[j]->done()) ++earlierNotDone;
                (void)requests[j]->wait();  // would block the engine forever if not done
              }
            },
            &requests)));
        for (const RequestPtr& request : requests) ASSERT_TRUE(ok(waitFor(request)));
        EXPECT_EQ(calls.load(), 3) << "rank " << r << " step " << s;
        EXPECT_EQ(earlierNotDone.load(), 0) << "rank " << r << " step " << s;
      }
      EXPECT_GE(engine.stats().fastRequests, 3u) << "rank " << r;
    });
  });
}

}  // namespace
}  // namespace detcoll
