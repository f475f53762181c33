// detcoll_allreduce_perf: nccl-tests style allreduce benchmark, detcoll beside MPI_Allreduce.
//
//   mpirun -np 2 detcoll_allreduce_perf -b 8 -e 64M -f 2 -n 20 -w 5 -d float -o sum -m ordered
//
// For each size, detcoll (in the mode given by -m) and MPI_Allreduce run on the same buffers,
// alternating in blocks, so both see the same machine state. time is the mean of the slowest
// rank's time per call; algbw = bytes / time; busbw = algbw * 2(P-1)/P. #wrong counts elements
// whose bits differ from the independent reference (the rank-order fold of the gathered inputs,
// computed on rank 0) in ordered mode, from the gathered inputs reduced by one process in
// invariant mode (the np = 1 result), or from rank 0's result (every rank must agree) in native
// mode. ratio = detcoll busbw / MPI_Allreduce busbw. -C FILE appends the table's rows to a CSV
// file as well (rank 0; tests/bench/bench_csv.h), for scripts/plot_bench.py.
//
// Below 64 KiB -n and -w are minimums: such sizes run at least kSmallCalls iterations after
// kSmallWarmup, since a call takes about a microsecond and a block of a few calls would time the
// barrier's skew between the ranks (about as long) rather than the calls.

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective/transport/mpi_communicator.h"
#include "detcoll.h"
#include "kernels/fixed_point.h"
#include "tests/bench/bench_csv.h"
#include "tests/support/reference.h"

namespace {

constexpr size_t kSmallBytes = 64 << 10;
constexpr int kSmallCalls = 2000;
constexpr int kSmallWarmup = 200;

using detcoll::DataType;
using detcoll::ReduceOp;

struct Options {
  size_t minBytes = 8;
  size_t maxBytes = 64 << 20;
  double factor = 2;
  int iterations = 20;
  int warmup = 5;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  detcoll_mode_t mode = DETCOLL_MODE_ORDERED;
  bool check = true;
  std::string csv;  // -C: the CSV file the rows are appended to
};

size_t parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: detcoll_allreduce_perf [-b minbytes] [-e maxbytes] [-f factor] "
               "[-n iters] [-w warmup] [-d float|double|half|bfloat16|int32|int64] "
               "[-o sum|avg|min|max] [-m ordered|native|invariant] [-c 0|1] [-C csv_file]\n",
               message);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const char* v = argv[++i];
    if (flag == "-b")
      o.minBytes = parseSize(v);
    else if (flag == "-e")
      o.maxBytes = parseSize(v);
    else if (flag == "-f")
      o.factor = std::atof(v);
    else if (flag == "-n")
      o.iterations = std::atoi(v);
    else if (flag == "-w")
      o.warmup = std::atoi(v);
    else if (flag == "-c")
      o.check = std::atoi(v) != 0;
    else if (flag == "-C")
      o.csv = v;
    else if (flag == "-d") {
      const std::string d = v;
      if (d == "float")
        o.type = DataType::kFloat32;
      else if (d == "double")
        o.type = DataType::kFloat64;
      else if (d == "half")
        o.type = DataType::kFloat16;
      else if (d == "bfloat16")
        o.type = DataType::kBFloat16;
      else if (d == "int32")
        o.type = DataType::kInt32;
      else if (d == "int64")
        o.type = DataType::kInt64;
      else
        usage(("unknown dtype " + d).c_str());
    } else if (flag == "-o") {
      const std::string d = v;
      if (d == "sum")
        o.op = ReduceOp::kSum;
      else if (d == "avg")
        o.op = ReduceOp::kAverage;
      else if (d == "min")
        o.op = ReduceOp::kMin;
      else if (d == "max")
        o.op = ReduceOp::kMax;
      else
        usage(("unknown op " + d).c_str());
    } else if (flag == "-m") {
      const std::string d = v;
      if (d == "ordered")
        o.mode = DETCOLL_MODE_ORDERED;
      else if (d == "native")
        o.mode = DETCOLL_MODE_NATIVE;
      else if (d == "invariant")
        o.mode = DETCOLL_MODE_INVARIANT;
      else
        usage(("unknown mode " + d).c_str());
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.factor <= 1 || o.iterations < 1 || o.minBytes == 0 || o.maxBytes < o.minBytes) {
    usage("need factor > 1, iterations >= 1, 0 < minbytes <= maxbytes");
  }
  return o;
}

// Mean seconds per call of the slowest rank.
template <typename Fn>
double timeCalls(int calls, Fn fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < calls; ++i) fn();
  double elapsed = (MPI_Wtime() - start) / calls;
  double slowest = 0;
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

void check(detcoll_status_t s) {
  if (s != DETCOLL_SUCCESS) {
    std::fprintf(stderr, "detcoll call failed: %s\n", detcoll_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

std::string formatSize(size_t bytes) {
  return std::to_string(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const Options o = parse(argc, argv);
  check(detcoll_init());
  check(detcoll_set_mode(o.mode));
  const int rank = detcoll_rank();
  const int p = detcoll_size();
  const size_t es = detcoll::dataTypeSize(o.type);
  const size_t maxCount = std::max<size_t>(1, o.maxBytes / es);

  std::vector<uint8_t> input = detcoll::testing::randomBuffer(o.type, maxCount, 1000 + rank);
  std::vector<uint8_t> ours(maxCount * es), peer(maxCount * es);
  std::vector<uint8_t> gathered(rank == 0 ? maxCount * es * p : 0), expected(maxCount * es);

  // MPI has no 16-bit float types: for those the peer is detcoll's native mode (MPI_Allreduce
  // with user-defined operations).
  const bool mpiKnowsType = o.type != DataType::kFloat16 && o.type != DataType::kBFloat16;
  const MPI_Datatype peerType =
      mpiKnowsType ? detcoll::collective::transport::mpiDataType(o.type) : MPI_DATATYPE_NULL;
  const char* peerName = peerType == MPI_DATATYPE_NULL ? "detcoll-native" : "MPI_Allreduce";
  const char* modeName = o.mode == DETCOLL_MODE_ORDERED  ? "ordered"
                         : o.mode == DETCOLL_MODE_NATIVE ? "native"
                                                         : "invariant";
  const std::string typeName = detcoll::dataTypeName(o.type);
  const std::string opName = detcoll::reduceOpName(o.op);
  detcoll::bench::CsvFile csv;
  if (rank == 0 && !o.csv.empty()) {
    std::string error;
    if (!csv.open(o.csv,
                  "dtype,op,mode,ranks,bytes,count,ours_us,ours_algbw,ours_busbw,wrong,peer_name,"
                  "peer_us,peer_algbw,peer_busbw,ratio",
                  &error)) {
      usage(error.c_str());
    }
  }
  if (rank == 0) {
    std::printf(
        "# detcoll_allreduce_perf: %d ranks, dtype %s, op %s, mode %s, %d iterations, "
        "%d warmup (below %zu KiB at least %d and %d), out of place\n",
        p, typeName.c_str(), opName.c_str(), modeName, o.iterations, o.warmup, kSmallBytes >> 10,
        kSmallCalls, kSmallWarmup);
    std::printf("# peer: %s on the same buffers, timed alternately in the same run\n", peerName);
    std::printf("#%11s %12s %8s %7s | %10s %8s %8s %7s | %10s %8s %8s | %6s\n", "size", "count",
                "type", "redop", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw",
                "busbw", "ratio");
    std::printf("#%11s %12s %8s %7s | %-37s | %-28s |\n", "(B)", "", "", "", "  detcoll (GB/s)",
                peerName);
  }

  double sumOurs = 0, sumPeer = 0;
  int sizes = 0;
  for (double bytesD = static_cast<double>(o.minBytes);
       bytesD <= static_cast<double>(o.maxBytes) * 1.0001; bytesD *= o.factor) {
    const size_t count = std::max<size_t>(1, static_cast<size_t>(bytesD) / es);
    const size_t bytes = count * es;
    auto runOurs = [&] {
      check(detcoll_allreduce(input.data(), ours.data(), count,
                              static_cast<detcoll_dtype_t>(o.type), static_cast<detcoll_op_t>(o.op),
                              "bench"));
    };
    auto runPeer = [&] {
      if (peerType == MPI_DATATYPE_NULL) {
        check(detcoll_set_mode(DETCOLL_MODE_NATIVE));
        check(detcoll_allreduce(input.data(), peer.data(), count,
                                static_cast<detcoll_dtype_t>(o.type),
                                static_cast<detcoll_op_t>(o.op), "bench"));
        check(detcoll_set_mode(o.mode));
      } else {
        MPI_Allreduce(input.data(), peer.data(), static_cast<int>(count), peerType,
                      detcoll::collective::transport::mpiReduceOp(o.op), MPI_COMM_WORLD);
      }
    };
    const bool small = bytes < kSmallBytes;
    const int iterations = small ? std::max(o.iterations, kSmallCalls) : o.iterations;
    const int warmup = small ? std::max(o.warmup, kSmallWarmup) : o.warmup;
    for (int i = 0; i < warmup; ++i) {
      runOurs();
      runPeer();
    }
    // Alternate in blocks so that drift in machine state hits both alike.
    const int blocks = std::min(iterations, 5);
    double tOurs = 0, tPeer = 0;
    int done = 0;
    for (int b = 0; b < blocks; ++b) {
      const int calls = (iterations - done) / (blocks - b);
      tOurs += timeCalls(calls, runOurs) * calls;
      tPeer += timeCalls(calls, runPeer) * calls;
      done += calls;
    }
    tOurs /= iterations;
    tPeer /= iterations;

    long wrong = 0;
    if (o.check) {
      // Reference: rank 0 folds the gathered inputs in rank order (ordered), or reduces them as
      // one process holding every leaf (invariant: the np = 1 result every world size must give);
      // in native mode rank 0's result.
      if (o.mode != DETCOLL_MODE_NATIVE) {
        MPI_Gather(input.data(), static_cast<int>(bytes), MPI_BYTE, gathered.data(),
                   static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
          std::vector<const void*> in(p);
          for (int j = 0; j < p; ++j) in[j] = gathered.data() + j * bytes;
          if (o.mode == DETCOLL_MODE_ORDERED) {
            detcoll::testing::referenceFold(expected.data(), in, count, o.type, o.op, p);
          } else {
            detcoll::kernels::invariantReduceLocal(expected.data(), in.data(), p, count, o.type,
                                                   o.op);
          }
        }
      } else if (rank == 0) {
        std::memcpy(expected.data(), ours.data(), bytes);
      }
      MPI_Bcast(expected.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
      long mine = 0;
      for (size_t i = 0; i < count; ++i) {
        if (std::memcmp(ours.data() + i * es, expected.data() + i * es, es) != 0) ++mine;
      }
      MPI_Allreduce(&mine, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    }

    const double busFactor = p > 1 ? 2.0 * (p - 1) / p : 1.0;
    const double algOurs = bytes / tOurs / 1e9, algPeer = bytes / tPeer / 1e9;
    const double busOurs = algOurs * busFactor, busPeer = algPeer * busFactor;
    sumOurs += busOurs;
    sumPeer += busPeer;
    ++sizes;
    if (rank == 0) {
      std::printf("%12s %12zu %8s %7s | %10.2f %8.3f %8.3f %7ld | %10.2f %8.3f %8.3f | %6.2f\n",
                  formatSize(bytes).c_str(), count, typeName.c_str(), opName.c_str(), tOurs * 1e6,
                  algOurs, busOurs, o.check ? wrong : -1L, tPeer * 1e6, algPeer, busPeer,
                  busOurs / busPeer);
      std::fflush(stdout);
      csv.row("%s,%s,%s,%d,%zu,%zu,%.6g,%.6g,%.6g,%ld,%s,%.6g,%.6g,%.6g,%.6g", typeName.c_str(),
              opName.c_str(), modeName, p, bytes, count, tOurs * 1e6, algOurs, busOurs,
              o.check ? wrong : -1L, peerName, tPeer * 1e6, algPeer, busPeer, busOurs / busPeer);
    }
  }
  if (rank == 0) {
    std::printf("# Avg bus bandwidth    : detcoll %.3f GB/s, %s %.3f GB/s, ratio %.2f\n",
                sumOurs / sizes, peerName, sumPeer / sizes, sumOurs / sumPeer);
  }
  detcoll_finalize();
  MPI_Finalize();
  return 0;
}
