// detcoll_rs_alltoall_perf: nccl-tests style reduce-scatter and alltoall benchmark, detcoll's
// blocking calls (detcoll_enqueue + detcoll_wait, through the fusion engine) beside
// MPI_Reduce_scatter_block and MPI_Alltoall.
//
//   mpirun -np 2 detcoll_rs_alltoall_perf -b 64K -e 64M -f 4 -n 20 -w 3 -r 5 -m ordered,invariant
//
// Sizes are the bytes of each rank's send buffer (total_bytes in nccl-tests' terms): a
// reduce-scatter of float32 sum into P equal blocks, an alltoall of float32 into P equal blocks.
// For each size and collective, detcoll and MPI run alternately, a block of -n calls each, -r
// times; time is the median over the repetitions of the slowest rank's mean time per call.
// algbw = bytes / time, busbw = algbw * (P-1)/P for both collectives (nccl-tests' definitions),
// ratio = detcoll busbw / MPI busbw. #wrong (-c 1, the default) counts elements of detcoll's
// result whose bits differ, on any rank, from the reference: the rank-order fold of every rank's
// input (ordered), the inputs reduced by one process (invariant), the blocks each rank sent
// (alltoall); each rank regenerates every rank's input from its seed. -C FILE appends the
// table's rows to a CSV file as well (rank 0; tests/bench/bench_csv.h).

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "detcoll.h"
#include "kernels/fixed_point.h"
#include "tests/bench/bench_csv.h"
#include "tests/support/reference.h"

namespace {

using detcoll::DataType;
using detcoll::ReduceOp;

struct Options {
  size_t minBytes = 64 << 10;
  size_t maxBytes = 64 << 20;
  double factor = 4;
  int iterations = 20;
  int warmup = 3;
  int repetitions = 5;
  std::vector<std::string> collectives = {"ordered", "invariant", "alltoall"};
  bool check = true;
  std::string csv;  // -C: the CSV file the rows are appended to
};

size_t parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: detcoll_rs_alltoall_perf [-b minbytes] [-e maxbytes] [-f factor] "
               "[-n iters] [-w warmup] [-r repetitions] [-m ordered,invariant,alltoall] "
               "[-c 0|1] [-C csv_file]\n",
               message);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const char* v = argv[++i];
    if (flag == "-b") {
      o.minBytes = parseSize(v);
    } else if (flag == "-e") {
      o.maxBytes = parseSize(v);
    } else if (flag == "-f") {
      o.factor = std::atof(v);
    } else if (flag == "-n") {
      o.iterations = std::atoi(v);
    } else if (flag == "-w") {
      o.warmup = std::atoi(v);
    } else if (flag == "-r") {
      o.repetitions = std::atoi(v);
    } else if (flag == "-c") {
      o.check = std::atoi(v) != 0;
    } else if (flag == "-C") {
      o.csv = v;
    } else if (flag == "-m") {
      o.collectives = split(v);
      for (const std::string& c : o.collectives) {
        if (c != "ordered" && c != "invariant" && c != "alltoall") {
          usage(("unknown collective " + c).c_str());
        }
      }
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.factor <= 1 || o.iterations < 1 || o.repetitions < 1 || o.minBytes == 0 ||
      o.maxBytes < o.minBytes) {
    usage("need factor > 1, iterations >= 1, repetitions >= 1, 0 < minbytes <= maxbytes");
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void check(detcoll_status_t s) {
  if (s != DETCOLL_SUCCESS) {
    std::fprintf(stderr, "detcoll call failed: %s\n", detcoll_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// One blocking request: enqueue, then wait.
void run(const detcoll_request_desc_t& r) {
  detcoll_handle_t h = nullptr;
  check(detcoll_enqueue(&r, &h));
  check(detcoll_wait(h));
}

std::vector<uint8_t> inputOf(int rank, size_t count) {
  return detcoll::testing::randomBuffer(DataType::kFloat32, count, 7000 + rank);
}

}  // namespace

int main(int argc, char** argv) {
  // The fusion engine's thread calls MPI beside this one.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const Options o = parse(argc, argv);
  check(detcoll_init());
  const int rank = detcoll_rank();
  const int p = detcoll_size();
  constexpr size_t es = 4;  // float32
  // Every rank's buffer is a whole number of blocks: P equal blocks of maxBytes / P.
  const size_t maxCount = std::max<size_t>(p, o.maxBytes / es / p * p);
  const std::vector<uint8_t> input = inputOf(rank, maxCount);
  std::vector<uint8_t> ours(maxCount * es), peer(maxCount * es), expected(maxCount * es);

  detcoll::bench::CsvFile csv;
  if (rank == 0 && !o.csv.empty()) {
    std::string error;
    if (!csv.open(o.csv,
                  "collective,dtype,op,mode,ranks,bytes,count,ours_us,ours_algbw,ours_busbw,wrong,"
                  "peer_name,peer_us,peer_algbw,peer_busbw,ratio",
                  &error)) {
      usage(error.c_str());
    }
  }
  if (rank == 0) {
    std::printf(
        "# detcoll_rs_alltoall_perf: %d ranks, float32, sum, %d calls x %d repetitions (median), "
        "%d warmup\n",
        p, o.iterations, o.repetitions, o.warmup);
    std::printf(
        "# detcoll: detcoll_enqueue + detcoll_wait; peer: MPI_Reduce_scatter_block / "
        "MPI_Alltoall, alternating\n");
    std::printf("# busbw = size / time * (P-1)/P; size: the bytes each rank sends\n");
    std::printf("#%14s %11s %11s | %10s %8s %8s %7s | %10s %8s %8s | %6s\n", "collective",
                "size(B)", "count", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw",
                "busbw", "ratio");
    std::printf("#%14s %11s %11s | %-37s | %-28s |\n", "", "", "", "  detcoll (GB/s)",
                "  MPI (GB/s)");
  }

  const double busFactor = p > 1 ? static_cast<double>(p - 1) / p : 1.0;
  for (const std::string& collective : o.collectives) {
    const bool alltoall = collective == "alltoall";
    check(detcoll_set_mode(collective == "invariant" ? DETCOLL_MODE_INVARIANT
                                                     : DETCOLL_MODE_ORDERED));
    const std::string label = alltoall ? "alltoall" : "rs " + collective;
    double sumOurs = 0, sumPeer = 0;
    int sizes = 0;
    for (double bytesD = static_cast<double>(o.minBytes);
         bytesD <= static_cast<double>(o.maxBytes) * 1.0001; bytesD *= o.factor) {
      const size_t block = std::max<size_t>(1, static_cast<size_t>(bytesD) / es / p);
      const size_t count = block * p;
      const size_t bytes = count * es;
      const std::vector<size_t> counts(p, block);
      detcoll_request_desc_t r{};
      r.kind = alltoall ? DETCOLL_REQUEST_ALLTOALL : DETCOLL_REQUEST_REDUCESCATTER;
      r.sendbuf = input.data();
      r.recvbuf = ours.data();
      r.counts = counts.data();
      r.recvcounts = alltoall ? counts.data() : nullptr;
      r.dtype = DETCOLL_FLOAT32;
      r.op = DETCOLL_SUM;
      r.name = "bench";
      auto runOurs = [&] { run(r); };
      auto runPeer = [&] {
        if (alltoall) {
          MPI_Alltoall(input.data(), static_cast<int>(block), MPI_FLOAT, peer.data(),
                       static_cast<int>(block), MPI_FLOAT, MPI_COMM_WORLD);
        } else {
          MPI_Reduce_scatter_block(input.data(), peer.data(), static_cast<int>(block), MPI_FLOAT,
                                   MPI_SUM, MPI_COMM_WORLD);
        }
      };
      for (int i = 0; i < o.warmup; ++i) {
        runOurs();
        runPeer();
      }
      // Alternate ours and MPI's, block by block, so that drift in machine state hits both alike.
      std::vector<double> tOurs, tPeer;
      for (int rep = 0; rep < o.repetitions; ++rep) {
        tOurs.push_back(timeCalls(o.iterations, runOurs));
        tPeer.push_back(timeCalls(o.iterations, runPeer));
      }
      const double timeOurs = median(tOurs), timePeer = median(tPeer);

      long wrong = 0;
      if (o.check) {
        // Every rank's input, regenerated here, and this rank's share of the reference.
        std::vector<std::vector<uint8_t>> all;
        for (int j = 0; j < p; ++j) all.push_back(inputOf(j, count));
        size_t n = block;
        if (alltoall) {
          for (int j = 0; j < p; ++j) {
            std::memcpy(expected.data() + j * block * es, all[j].data() + rank * block * es,
                        block * es);
          }
          n = count;
        } else {
          std::vector<const void*> mine;
          for (int j = 0; j < p; ++j) mine.push_back(all[j].data() + rank * block * es);
          if (collective == "ordered") {
            detcoll::testing::referenceFold(expected.data(), mine, block, DataType::kFloat32,
                                            ReduceOp::kSum, p);
          } else {
            detcoll::kernels::invariantReduceLocal(expected.data(), mine.data(), p, block,
                                                   DataType::kFloat32, ReduceOp::kSum);
          }
        }
        long mineWrong = 0;
        for (size_t i = 0; i < n; ++i) {
          if (std::memcmp(ours.data() + i * es, expected.data() + i * es, es) != 0) ++mineWrong;
        }
        MPI_Allreduce(&mineWrong, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      }

      const double algOurs = bytes / timeOurs / 1e9, algPeer = bytes / timePeer / 1e9;
      const double busOurs = algOurs * busFactor, busPeer = algPeer * busFactor;
      sumOurs += busOurs;
      sumPeer += busPeer;
      ++sizes;
      if (rank == 0) {
        std::printf("%15s %11zu %11zu | %10.2f %8.3f %8.3f %7ld | %10.2f %8.3f %8.3f | %6.2f\n",
                    label.c_str(), bytes, count, timeOurs * 1e6, algOurs, busOurs,
                    o.check ? wrong : -1L, timePeer * 1e6, algPeer, busPeer, busOurs / busPeer);
        std::fflush(stdout);
        // The alltoall reduces nothing: no op, and no mode.
        csv.row("%s,float32,%s,%s,%d,%zu,%zu,%.6g,%.6g,%.6g,%ld,%s,%.6g,%.6g,%.6g,%.6g",
                alltoall ? "alltoall" : "reduce_scatter", alltoall ? "" : "sum",
                alltoall ? "" : collective.c_str(), p, bytes, count, timeOurs * 1e6, algOurs,
                busOurs, o.check ? wrong : -1L,
                alltoall ? "MPI_Alltoall" : "MPI_Reduce_scatter_block", timePeer * 1e6, algPeer,
                busPeer, busOurs / busPeer);
      }
    }
    if (rank == 0) {
      std::printf("# %s: avg busbw detcoll %.3f GB/s, MPI %.3f GB/s, ratio %.2f\n", label.c_str(),
                  sumOurs / sizes, sumPeer / sizes, sumOurs / sumPeer);
    }
  }
  detcoll_finalize();
  MPI_Finalize();
  return 0;
}
