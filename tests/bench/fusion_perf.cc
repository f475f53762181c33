// detcoll_fusion_perf: a training step's gradient allreduces through the fusion engine, fused
// beside unfused, beside one MPI_Allreduce over a flat buffer of the same total size (the ideal:
// no per-tensor cost at all).
//
//   mpirun -np 2 detcoll_fusion_perf [-n iterations] [-w warmup] [-m ordered|invariant|native]
//                                    [-t threshold] [-c cycle_ms] [-F 0|1] [-B 0|1] [model ...]
//
// A model is a workload file (tests/support/workload.h; resnet50 and bert_base by default). For
// each model two sets are timed: its tensors under 64 KiB (batch-norm and bias vectors, the
// latency-bound part fusion exists for) and the whole step. A step enqueues every tensor of the
// set in workload order, float32 average, and waits for all; its time is the slowest rank's.
// Fused runs an engine with the fusion threshold (-t, default 64 MiB); unfused another with
// threshold 0 (HOROVOD_FUSION_THRESHOLD=0); the three run alternately, step by step, on the
// same buffers, each step starting at a random point of the engine's cycle. Both engines take the
// fast path of a repeated step unless -F 0 (fusion/fast_path.h); the share of requests that took
// it, the fast path's votes per step and rank 0's time to enqueue a step are printed after each
// set. The engines' communicators get a record board where every rank is on one node, as the C
// API's do (-B 0: none). #wrong counts
// elements where the fused result's bits differ from the unfused one's (in ordered and invariant
// mode there must be none). The timeline (-T) records the fused engine's steps. -C FILE appends the
// table's rows to a CSV file as well (rank 0; tests/bench/bench_csv.h).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/transport/mpi_communicator.h"
#include "fusion/engine.h"
#include "tests/bench/bench_csv.h"
#include "tests/support/reference.h"
#include "tests/support/workload.h"

namespace {

using detcoll::DataType;
using detcoll::Mode;
using detcoll::ReduceOp;
using detcoll::Status;
namespace fusion = detcoll::fusion;

struct Options {
  int iterations = 10;
  int warmup = 3;
  Mode mode = Mode::kOrdered;
  size_t threshold = 64 << 20;
  double cycleMs = 1.0;
  bool fastPath = true;  // -F 0: every step negotiated
  bool board = true;     // -B 0: the engines' communicators without a record board
  std::string timeline;  // of the fused engine
  std::string csv;       // -C: the CSV file the rows are appended to
  std::vector<std::string> models;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: detcoll_fusion_perf [-n iterations] [-w warmup] "
               "[-m ordered|invariant|native] [-t threshold_bytes] [-c cycle_ms] [-F 0|1] [-B 0|1] "
               "[-T timeline] [-C csv_file] [model ...]\n",
               why);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag[0] != '-') {
      o.models.push_back(flag);
      continue;
    }
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "-n") {
      o.iterations = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "-w") {
      o.warmup = std::max(0, std::atoi(value.c_str()));
    } else if (flag == "-t") {
      o.threshold = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "-T") {
      o.timeline = value;
    } else if (flag == "-C") {
      o.csv = value;
    } else if (flag == "-B") {
      o.board = std::atoi(value.c_str()) != 0;
    } else if (flag == "-F") {
      o.fastPath = std::atoi(value.c_str()) != 0;
    } else if (flag == "-c") {
      o.cycleMs = std::atof(value.c_str());
    } else if (flag == "-m") {
      if (!detcoll::parseMode(value, &o.mode)) usage(("unknown mode " + value).c_str());
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.models.empty()) o.models = {"resnet50", "bert_base"};
  return o;
}

void require(const Status& s, const char* what) {
  if (!s.isOk()) {
    std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

struct TensorSet {
  std::string label;
  std::string kind;  // "<64KiB" or "step"
  std::vector<std::string> names;
  std::vector<size_t> counts;
  size_t total = 0;
};

// One step: every tensor of the set enqueued in order, then every request waited for.
// Steps start at a random point of the engine's cycle (the same pause on every rank), as a
// training step's backward pass does, rather than in lockstep with it.
// *enqueueing gets this rank's time to enqueue the set.
double step(fusion::Engine& engine, const TensorSet& set, Mode mode,
            const std::vector<std::vector<float>>& in, std::vector<std::vector<float>>& out,
            double pauseMs, double* enqueueing) {
  std::vector<fusion::RequestPtr> requests(set.names.size());
  MPI_Barrier(MPI_COMM_WORLD);
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(pauseMs));
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (size_t i = 0; i < set.names.size(); ++i) {
    fusion::RequestSpec spec;
    spec.name = set.names[i];
    spec.descriptor.op = ReduceOp::kAverage;
    spec.descriptor.mode = mode;
    spec.descriptor.count = set.counts[i];
    spec.send = in[i].data();
    spec.recv = out[i].data();
    require(engine.enqueue(std::move(spec), nullptr, &requests[i]), "enqueue");
  }
  *enqueueing = MPI_Wtime() - start;
  for (auto& request : requests) require(request->wait(), "request");
  const double elapsed = MPI_Wtime() - start;
  double slowest = 0;
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double flatStep(const std::vector<float>& in, std::vector<float>& out) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  const double elapsed = MPI_Wtime() - start;
  double slowest = 0;
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

std::unique_ptr<fusion::Engine> makeEngine(
    std::unique_ptr<detcoll::collective::transport::MpiCommunicator>& comm, size_t threshold,
    double cycleMs, bool fastPath, bool board, const std::string& timeline = "") {
  require(detcoll::collective::transport::MpiCommunicator::create(MPI_COMM_WORLD, &comm),
          "communicator");
  // As the C API gives the engine's communicator (DETCOLL_AGREEMENT_TRANSPORT=auto): a record
  // board where every rank is on this node.
  std::string why;
  if (board && !comm->attachBoard(&why) && comm->rank() == 0) {
    std::printf("# no record board: %s\n", why.c_str());
  }
  fusion::EngineOptions options;
  options.fusionThresholdBytes = threshold;
  options.cycleTimeMs = cycleMs;
  options.timelinePath = timeline;
  options.fastPath = fastPath;
  auto engine = std::make_unique<fusion::Engine>(*comm, options);
  require(engine->start(), "engine");
  return engine;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) usage("the engine needs MPI_THREAD_MULTIPLE");
  const Options o = parse(argc, argv);
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);

  // Two engines, fused and unfused, each on its own communicator: the fast path of a repeated
  // step (fusion/fast_path.h) keeps the threshold its step was planned with, so one engine whose
  // threshold changed every step would negotiate every step.
  std::unique_ptr<detcoll::collective::transport::MpiCommunicator> fusedComm, unfusedComm;
  auto fused = makeEngine(fusedComm, o.threshold, o.cycleMs, o.fastPath, o.board, o.timeline);
  auto unfused = makeEngine(unfusedComm, 0, o.cycleMs, o.fastPath, o.board);

  detcoll::bench::CsvFile csv;
  if (rank == 0 && !o.csv.empty()) {
    std::string error;
    if (!csv.open(o.csv,
                  "mode,ranks,threshold,cycle_ms,model,set,tensors,bytes,fused_ms,unfused_ms,"
                  "flat_ms,wrong,unfused_over_fused,fused_over_flat",
                  &error)) {
      usage(error.c_str());
    }
  }
  if (rank == 0) {
    std::printf(
        "# detcoll_fusion_perf: %d ranks, float32 average, mode %s, %d iterations, %d warmup, "
        "cycle %.1f ms\n",
        p, detcoll::modeName(o.mode).c_str(), o.iterations, o.warmup, o.cycleMs);
    std::printf(
        "# fused: threshold %zu B; unfused: threshold 0; flat: one MPI_Allreduce of the step's "
        "total size. Times per step (slowest rank, mean).\n",
        o.threshold);
    std::printf("#%-17s %7s %12s | %10s %12s %12s %7s | %14s %11s\n", "set", "tensors", "bytes",
                "fused(ms)", "unfused(ms)", "flat(ms)", "#wrong", "unfused/fused", "fused/flat");
  }
  for (const std::string& model : o.models) {
    std::vector<detcoll::testing::TensorShape> shapes;
    std::string error;
    const std::string path = detcoll::testing::workloadDirectory() + "/" + model + ".txt";
    if (!detcoll::testing::loadWorkload(path, &shapes, &error)) usage(error.c_str());
    TensorSet small{model + " <64KiB", "<64KiB", {}, {}, 0};
    TensorSet all{model + " step", "step", {}, {}, 0};
    for (const auto& shape : shapes) {
      for (TensorSet* set : {&small, &all}) {
        if (set == &small && shape.elements * 4 >= (64 << 10)) continue;
        set->names.push_back(shape.name);
        set->counts.push_back(shape.elements);
        set->total += shape.elements;
      }
    }
    for (const TensorSet* set : {&small, &all}) {
      std::vector<std::vector<float>> in, outFused, outUnfused;
      for (size_t i = 0; i < set->names.size(); ++i) {
        const auto bytes = detcoll::testing::randomBuffer(DataType::kFloat32, set->counts[i],
                                                          7919 * (i + 1) + rank);
        in.emplace_back(set->counts[i]);
        std::memcpy(in.back().data(), bytes.data(), bytes.size());
        outFused.emplace_back(set->counts[i]);
        outUnfused.emplace_back(set->counts[i]);
      }
      std::vector<float> flatIn(set->total, 1.0f), flatOut(set->total);
      double tFused = 0, tUnfused = 0, tFlat = 0;
      double enqueueFused = 0, enqueueUnfused = 0;
      const fusion::EngineStats fusedBefore = fused->stats();
      const fusion::EngineStats unfusedBefore = unfused->stats();
      std::mt19937 rng(12345);  // the same pauses on every rank
      for (int it = 0; it < o.warmup + o.iterations; ++it) {
        const double pause = o.cycleMs * static_cast<double>(rng() % 1000) / 1000.0;
        double enqueueA = 0, enqueueB = 0;
        const double a = step(*fused, *set, o.mode, in, outFused, pause, &enqueueA);
        const double b = step(*unfused, *set, o.mode, in, outUnfused, pause, &enqueueB);
        const double c = flatStep(flatIn, flatOut);
        if (it >= o.warmup) {
          tFused += a;
          tUnfused += b;
          tFlat += c;
          enqueueFused += enqueueA;
          enqueueUnfused += enqueueB;
        }
      }
      long wrong = 0;
      for (size_t i = 0; i < set->names.size(); ++i) {
        for (size_t k = 0; k < set->counts[i]; ++k) {
          wrong += std::memcmp(&outFused[i][k], &outUnfused[i][k], 4) != 0;
        }
      }
      long totalWrong = 0;
      MPI_Allreduce(&wrong, &totalWrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      if (rank == 0) {
        const double n = o.iterations;
        std::printf(" %-17s %7zu %12zu | %10.3f %12.3f %12.3f %7ld | %14.2f %11.2f\n",
                    set->label.c_str(), set->names.size(), set->total * 4, 1e3 * tFused / n,
                    1e3 * tUnfused / n, 1e3 * tFlat / n, totalWrong, tUnfused / tFused,
                    tFused / tFlat);
        const fusion::EngineStats f = fused->stats();
        const fusion::EngineStats u = unfused->stats();
        const double requests = static_cast<double>(set->names.size()) * (o.warmup + o.iterations);
        const double steps = o.warmup + o.iterations;
        std::printf(
            "#   fast path: fused %.0f%% of requests, unfused %.0f%% (%llu and %llu stops); votes "
            "per step: fused %.1f, unfused %.1f; rank 0 enqueues a step in %.1f us fused, %.1f "
            "us unfused\n",
            100.0 * static_cast<double>(f.fastRequests - fusedBefore.fastRequests) / requests,
            100.0 * static_cast<double>(u.fastRequests - unfusedBefore.fastRequests) / requests,
            static_cast<unsigned long long>(f.fastStops - fusedBefore.fastStops),
            static_cast<unsigned long long>(u.fastStops - unfusedBefore.fastStops),
            static_cast<double>(f.fastVotes - fusedBefore.fastVotes) / steps,
            static_cast<double>(u.fastVotes - unfusedBefore.fastVotes) / steps,
            1e6 * enqueueFused / n, 1e6 * enqueueUnfused / n);
        std::fflush(stdout);
        csv.row("%s,%d,%zu,%.6g,%s,%s,%zu,%zu,%.6g,%.6g,%.6g,%ld,%.6g,%.6g",
                detcoll::modeName(o.mode).c_str(), p, o.threshold, o.cycleMs, model.c_str(),
                set->kind.c_str(), set->names.size(), set->total * 4, 1e3 * tFused / n,
                1e3 * tUnfused / n, 1e3 * tFlat / n, totalWrong, tUnfused / tFused, tFused / tFlat);
      }
    }
  }
  fused->shutdown();
  unfused->shutdown();
  fused.reset();
  unfused.reset();
  fusedComm.reset();
  unfusedComm.reset();
  MPI_Finalize();
  return 0;
}
