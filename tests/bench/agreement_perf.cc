// detcoll_agreement_perf: what the call agreement (docs/design.md, "Agreement") costs a small
// blocking allreduce, in messages and in time.
//
//   mpirun -np 8 --oversubscribe detcoll_agreement_perf -n 200 -r 5 -w 20
//
// Every rank makes blocking allreduces of 8 bytes (2 float32, sum, ordered mode) through
// Collectives::allreduce, the call behind detcoll_allreduce: the leaves travel inline in the call
// agreement, so the agreement is the whole call. Printed per rank and call: the messages the
// rank sent with the agreement's tag and with any tag (the communicator's counts, the same on
// every rank, else the largest), and the mean time of a call (the slowest rank's, median of the
// repetitions), beside MPI_Allreduce of the same 8 bytes timed alternately. #wrong counts results
// whose bits differ from the rank-order sum. The agreement travels as messages (the path across
// nodes), or with --board through a record board in shared memory (one node).

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collective/collectives.h"
#include "collective/tags.h"
#include "collective/transport/mpi_communicator.h"

namespace {

using detcoll::Status;
using detcoll::collective::Collectives;
using detcoll::collective::transport::MpiCommunicator;

struct Options {
  int iterations = 200;  // calls per repetition
  int repeats = 5;
  int warmup = 20;
  bool header = true;
  bool board = false;  // --board: the agreements through a record board (one node)
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "detcoll_agreement_perf: %s\n"
               "usage: detcoll_agreement_perf [-n calls] [-r repetitions] [-w warmup] "
               "[--no-header] [--board]\n",
               why);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-header") {
      o.header = false;
      continue;
    }
    if (flag == "--board") {
      o.board = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const int value = std::atoi(argv[++i]);
    if (flag == "-n") {
      o.iterations = std::max(1, value);
    } else if (flag == "-r") {
      o.repeats = std::max(1, value);
    } else if (flag == "-w") {
      o.warmup = std::max(0, value);
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  return o;
}

void require(const Status& s, const char* what) {
  if (!s.isOk()) {
    std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

double slowest(double seconds) {
  double max = 0;
  MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max;
}

uint64_t largest(uint64_t value) {
  uint64_t max = 0;
  MPI_Allreduce(&value, &max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return max;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const Options o = parse(argc, argv);
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  {
    std::unique_ptr<MpiCommunicator> comm;
    require(MpiCommunicator::create(MPI_COMM_WORLD, &comm), "communicator");
    std::string noBoard;
    if (o.board && !comm->attachBoard(&noBoard)) {
      require(detcoll::Status::backend("no record board: " + noBoard), "--board");
    }
    Collectives collectives(*comm);

    // Rank r's inputs: r + 0.25 and r + 0.5; the rank-order sum is exact in float32 here.
    const float in[2] = {rank + 0.25f, rank + 0.5f};
    float expected[2] = {0, 0};
    for (int r = 0; r < p; ++r) {
      expected[0] += r + 0.25f;
      expected[1] += r + 0.5f;
    }
    float out[2] = {0, 0};
    uint64_t wrong = 0;
    auto call = [&] {
      require(collectives.allreduce(detcoll::Mode::kOrdered, in, out, 2, 0, 0, "x"), "allreduce");
      if (std::memcmp(out, expected, sizeof out) != 0) ++wrong;
    };
    for (int i = 0; i < o.warmup; ++i) call();

    std::vector<double> ours, mpi;
    uint64_t agreement = 0;
    uint64_t all = 0;
    for (int rep = 0; rep < o.repeats; ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const uint64_t agreementBefore = comm->sentMessages(detcoll::collective::kTagAgreement);
      const uint64_t allBefore = comm->sentMessages();
      double start = MPI_Wtime();
      for (int i = 0; i < o.iterations; ++i) call();
      ours.push_back(slowest(MPI_Wtime() - start) / o.iterations);
      agreement += comm->sentMessages(detcoll::collective::kTagAgreement) - agreementBefore;
      all += comm->sentMessages() - allBefore;

      MPI_Barrier(MPI_COMM_WORLD);
      float mpiOut[2];
      start = MPI_Wtime();
      for (int i = 0; i < o.iterations; ++i) {
        MPI_Allreduce(in, mpiOut, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      mpi.push_back(slowest(MPI_Wtime() - start) / o.iterations);
    }
    const double calls = static_cast<double>(o.iterations) * o.repeats;
    const double agreementPerCall = static_cast<double>(largest(agreement)) / calls;
    const double allPerCall = static_cast<double>(largest(all)) / calls;
    wrong = largest(wrong);
    if (rank == 0) {
      if (o.header) {
        std::printf(
            "# detcoll_agreement_perf: blocking allreduce of 8 bytes (2 float32, sum, ordered), "
            "%d x %d calls, %d warmup; messages per rank per call; time per call (slowest rank, "
            "median of repetitions)\n",
            o.repeats, o.iterations, o.warmup);
        std::printf("#%4s %16s %16s %14s %18s %7s\n", "np", "agreement msgs", "all msgs",
                    "detcoll (us)", "MPI_Allreduce (us)", "#wrong");
      }
      std::printf("%5d %16.2f %16.2f %14.2f %18.2f %7llu\n", p, agreementPerCall, allPerCall,
                  median(ours) * 1e6, median(mpi) * 1e6, static_cast<unsigned long long>(wrong));
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
