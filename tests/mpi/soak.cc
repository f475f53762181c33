// A soak of mixed calls through the C API, every result checked against an independent reference:
//   detcoll_soak CALLS [SEED]
// Blocking allreduce, allreduce of leaves, broadcast and allgather; asynchronous allreduce,
// broadcast and allgather, several in flight at once; grouped allreduce; in every mode, in
// float32, float64, bfloat16 and int32, with every op the mode's reference covers; with random
// delays on every rank. Every rank draws the same schedule from SEED and its own data and delays.
// The references (tests/support) are written apart from the library: the rank-order fold of the
// ordered mode, the MPFR sum of the invariant mode, exact integer and min/max results for native.
//
// Prints a line per 10% with the calls so far, mismatches and the resident set size, and ends
// with "soak: CALLS calls, M mismatches, F failures, SECONDS s, RSS a -> b KiB". Exits 1 on any
// mismatch or failure, or when the resident set grew by more than 32 MiB after the first 10%.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "detcoll.h"
#include "tests/support/exact_reference.h"
#include "tests/support/reference.h"

namespace {

using detcoll::DataType;
using detcoll::ReduceOp;
using Bytes = std::vector<uint8_t>;

// Requests are named from a pool, as a training step's tensors are: names recur with other
// descriptors (the response cache updates in place), and memory must stay flat.
constexpr uint64_t kNames = 1000;

int g_rank = 0;
int g_size = 1;
long g_mismatches = 0;
long g_failures = 0;

long residentKiB() {
  long pages = 0;
  long resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// Rank r's leaf l of call c.
Bytes data(DataType type, size_t count, uint64_t call, int r, int l = 0) {
  return detcoll::testing::randomBuffer(type, count, call * 1000003 + r * 131 + l * 7 + 1);
}

std::vector<const void*> pointers(const std::vector<Bytes>& buffers) {
  std::vector<const void*> p;
  for (const Bytes& b : buffers) p.push_back(b.data());
  return p;
}

// One allreduce's description, the same on every rank.
struct Call {
  uint64_t id;
  detcoll_mode_t mode;
  DataType type;
  ReduceOp op;
  size_t count;
  std::vector<int> leaves;  // per rank (allreduce of leaves), else 1 each
};

// The expected result of an allreduce (every rank's leaves of call c).
Bytes expected(const Call& c) {
  const size_t es = detcoll::dataTypeSize(c.type);
  std::vector<Bytes> all;
  std::vector<Bytes> perRank;
  int total = 0;
  for (int r = 0; r < g_size; ++r) {
    std::vector<Bytes> mine;
    for (int l = 0; l < c.leaves[r]; ++l) mine.push_back(data(c.type, c.count, c.id, r, l));
    total += c.leaves[r];
    // Ordered and native: each rank first folds its own leaves in order (sum, min, max).
    Bytes folded(c.count * es);
    detcoll::testing::referenceFold(folded.data(), pointers(mine), c.count, c.type,
                                    c.op == ReduceOp::kAverage ? ReduceOp::kSum : c.op, 1);
    perRank.push_back(mine.size() == 1 ? mine[0] : folded);
    for (Bytes& b : mine) all.push_back(std::move(b));
  }
  Bytes out(c.count * es);
  if (c.mode == DETCOLL_MODE_INVARIANT) {
    detcoll::testing::exactInvariantReference(out.data(), pointers(all), c.count, c.type, c.op);
  } else {
    detcoll::testing::referenceFold(out.data(), pointers(perRank), c.count, c.type, c.op, total);
  }
  return out;
}

void check(detcoll_status_t s, const char* what, uint64_t id, const void* got, const Bytes& want,
           DataType type, size_t count) {
  if (s != DETCOLL_SUCCESS) {
    ++g_failures;
    std::printf("rank %d: %s call %llu failed: %s\n", g_rank, what,
                static_cast<unsigned long long>(id), detcoll_last_error());
    return;
  }
  const long i = detcoll::testing::firstDifference(got, want.data(), count, type);
  if (i >= 0) {
    ++g_mismatches;
    std::printf("rank %d: %s call %llu: element %ld is %s, expected %s\n", g_rank, what,
                static_cast<unsigned long long>(id), i,
                detcoll::testing::describeElement(got, i, type).c_str(),
                detcoll::testing::describeElement(want.data(), i, type).c_str());
  }
}

detcoll_dtype_t cType(DataType t) {
  return static_cast<detcoll_dtype_t>(static_cast<int>(t));
}
detcoll_op_t cOp(ReduceOp op) {
  return static_cast<detcoll_op_t>(static_cast<int>(op));
}

// A call's mode, dtype, op and size, drawn from the schedule. Native mode promises no order:
// its calls are ones whose bits do not depend on it (integers, min and max).
Call draw(std::mt19937_64& schedule, uint64_t id, bool withLeaves) {
  Call c;
  c.id = id;
  const detcoll_mode_t modes[] = {DETCOLL_MODE_ORDERED, DETCOLL_MODE_INVARIANT,
                                  DETCOLL_MODE_NATIVE};
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16,
                            DataType::kInt32};
  c.mode = modes[schedule() % 3];
  c.type = types[schedule() % 4];
  c.op = detcoll::testing::kAllOps[schedule() % 4];
  if (c.mode == DETCOLL_MODE_NATIVE) {
    if (c.type != DataType::kInt32 && (c.op == ReduceOp::kSum || c.op == ReduceOp::kAverage)) {
      c.op = schedule() % 2 ? ReduceOp::kMin : ReduceOp::kMax;
    }
    if (c.type == DataType::kInt32 && c.op == ReduceOp::kAverage) c.op = ReduceOp::kSum;
  }
  // Mostly small (the latency path, inline in the agreement), sometimes past the segment size.
  const size_t sizes[] = {1, 7, 64, 1000, 4096, 70000};
  c.count = sizes[schedule() % 6];
  if (c.count == 70000 && schedule() % 4 != 0) c.count = 333;
  c.leaves.assign(g_size, 1);
  if (withLeaves) {
    for (int& n : c.leaves) n = 1 + static_cast<int>(schedule() % 3);
    // The ordered mode folds a rank's leaves with its op; its average is that of the sums.
    if (c.mode != DETCOLL_MODE_INVARIANT && c.op == ReduceOp::kAverage) c.op = ReduceOp::kSum;
  }
  return c;
}

void blockingAllreduce(const Call& c) {
  detcoll_set_mode(c.mode);
  const size_t es = detcoll::dataTypeSize(c.type);
  std::vector<Bytes> mine;
  for (int l = 0; l < c.leaves[g_rank]; ++l) mine.push_back(data(c.type, c.count, c.id, g_rank, l));
  Bytes out(c.count * es);
  const std::string name = "soak." + std::to_string(c.id);
  detcoll_status_t s;
  if (mine.size() == 1 && c.leaves == std::vector<int>(g_size, 1)) {
    s = detcoll_allreduce(mine[0].data(), out.data(), c.count, cType(c.type), cOp(c.op),
                          name.c_str());
  } else {
    const std::vector<const void*> p = pointers(mine);
    s = detcoll_allreduce_leaves(p.data(), static_cast<int>(p.size()), out.data(), c.count,
                                 cType(c.type), cOp(c.op), name.c_str());
  }
  check(s, "allreduce", c.id, out.data(), expected(c), c.type, c.count);
}

void blockingBroadcastOrAllgather(std::mt19937_64& schedule, uint64_t id) {
  const size_t count = 1 + schedule() % 2000;
  const DataType type = DataType::kFloat64;
  if (schedule() % 2) {
    const int root = static_cast<int>(schedule() % g_size);
    Bytes buf = data(type, count, id, g_rank);
    check(detcoll_broadcast(buf.data(), count, cType(type), root, nullptr), "broadcast", id,
          buf.data(), data(type, count, id, root), type, count);
  } else {
    Bytes out(count * 8 * g_size);
    Bytes want;
    for (int r = 0; r < g_size; ++r) {
      const Bytes d = data(type, count, id, r);
      want.insert(want.end(), d.begin(), d.end());
    }
    const Bytes mine = data(type, count, id, g_rank);
    check(detcoll_allgather(mine.data(), out.data(), count, cType(type), nullptr), "allgather", id,
          out.data(), want, type, count * g_size);
  }
}

// Several asynchronous requests in flight, some grouped, waited for in a random order.
void asyncBatch(std::mt19937_64& schedule, std::mt19937_64& local, uint64_t* id) {
  struct Pending {
    Call call;
    Bytes in, out, want;
    detcoll_handle_t handle = nullptr;
    detcoll_status_t posted = DETCOLL_SUCCESS;
    const char* what = "async allreduce";
  };
  const int n = 1 + static_cast<int>(schedule() % 6);
  std::vector<Pending> pending(n);
  // One mode per batch: the mode is the caller's setting at enqueue time.
  Call first = draw(schedule, *id, false);
  detcoll_set_mode(first.mode);
  const bool grouped = schedule() % 3 == 0;
  for (int i = 0; i < n; ++i) {
    Pending& p = pending[i];
    p.call = i == 0 ? first : draw(schedule, *id + i, false);
    p.call.id = *id + i;
    p.call.mode = first.mode;
    if (p.call.mode == DETCOLL_MODE_NATIVE) p.call = first, p.call.id = *id + i;
    const size_t es = detcoll::dataTypeSize(p.call.type);
    p.in = data(p.call.type, p.call.count, p.call.id, g_rank);
    p.out.assign(p.call.count * es, 0);
    if (!grouped && schedule() % 5 == 0) {
      // A broadcast or allgather among the allreduces.
      p.call.type = DataType::kFloat32;
      p.in = data(p.call.type, p.call.count, p.call.id, g_rank);
      if (schedule() % 2) {
        const int root = static_cast<int>(schedule() % g_size);
        p.out = p.in;
        p.want = data(p.call.type, p.call.count, p.call.id, root);
        p.what = "async broadcast";
        const std::string name = "soak.b." + std::to_string(p.call.id % kNames);
        p.posted = detcoll_broadcast_async(p.out.data(), p.call.count, cType(p.call.type), root,
                                           name.c_str(), &p.handle);
      } else {
        p.out.assign(p.call.count * 4 * g_size, 0);
        for (int r = 0; r < g_size; ++r) {
          const Bytes d = data(p.call.type, p.call.count, p.call.id, r);
          p.want.insert(p.want.end(), d.begin(), d.end());
        }
        p.what = "async allgather";
        const std::string name = "soak.g." + std::to_string(p.call.id % kNames);
        p.posted = detcoll_allgather_async(p.in.data(), p.out.data(), p.call.count,
                                           cType(p.call.type), name.c_str(), &p.handle);
      }
      continue;
    }
    p.want = expected(p.call);
    if (!grouped) {
      const std::string name = "soak.a." + std::to_string(p.call.id % kNames);
      p.posted =
          detcoll_allreduce_async(p.in.data(), p.out.data(), p.call.count, cType(p.call.type),
                                  cOp(p.call.op), name.c_str(), &p.handle);
    }
  }
  if (grouped) {
    // A group shares one dtype and op.
    std::vector<const void*> sends;
    std::vector<void*> recvs;
    std::vector<size_t> counts;
    std::vector<std::string> names;
    std::vector<const char*> namePointers;
    std::vector<detcoll_handle_t> handles(n);
    for (Pending& p : pending) {
      p.call.type = first.type;
      p.call.op = first.op;
      const size_t es = detcoll::dataTypeSize(p.call.type);
      p.in = data(p.call.type, p.call.count, p.call.id, g_rank);
      p.out.assign(p.call.count * es, 0);
      p.want = expected(p.call);
      p.what = "grouped allreduce";
      sends.push_back(p.in.data());
      recvs.push_back(p.out.data());
      counts.push_back(p.call.count);
      names.push_back("soak.grp." + std::to_string(p.call.id % kNames));
    }
    for (const std::string& s : names) namePointers.push_back(s.c_str());
    const detcoll_status_t s = detcoll_grouped_allreduce_async(
        n, sends.data(), recvs.data(), counts.data(), cType(first.type), cOp(first.op),
        namePointers.data(), handles.data());
    for (int i = 0; i < n; ++i) {
      pending[i].posted = s;
      pending[i].handle = handles[i];
    }
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), local);
  for (int i : order) {
    Pending& p = pending[i];
    detcoll_status_t s = p.posted;
    if (s == DETCOLL_SUCCESS) {
      if (local() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(local() % 300));
      s = detcoll_wait(p.handle);
    }
    const size_t count = p.want.size() / detcoll::dataTypeSize(p.call.type);
    check(s, p.what, p.call.id, p.out.data(), p.want, p.call.type, count);
  }
  *id += n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CALLS [SEED]\n", argv[0]);
    return 2;
  }
  const long calls = std::atol(argv[1]);
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261125;
  if (detcoll_init() != DETCOLL_SUCCESS) {
    std::fprintf(stderr, "detcoll_init failed: %s\n", detcoll_last_error());
    return 1;
  }
  g_rank = detcoll_rank();
  g_size = detcoll_size();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::mt19937_64 schedule(seed);                                    // the same on every rank
  std::mt19937_64 local(seed * 31 + static_cast<uint64_t>(g_rank));  // this rank's delays
  const auto start = std::chrono::steady_clock::now();
  long rssAfterWarmup = -1;
  long rssPeak = 0;
  uint64_t id = 0;
  long made = 0;
  long nextReport = calls / 10;
  while (made < calls) {
    if (local() % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(local() % 500));
    const uint64_t before = id;
    switch (schedule() % 5) {
      case 0:
        blockingAllreduce(draw(schedule, id++, false));
        break;
      case 1:
        blockingAllreduce(draw(schedule, id++, true));
        break;
      case 2:
        blockingBroadcastOrAllgather(schedule, id++);
        break;
      default:
        asyncBatch(schedule, local, &id);
        break;
    }
    made += static_cast<long>(id - before);
    if (made >= nextReport) {
      nextReport += calls / 10;
      const long rss = residentKiB();
      if (rssAfterWarmup < 0) rssAfterWarmup = rss;
      rssPeak = std::max(rssPeak, rss);
      if (g_rank == 0) {
        std::printf("soak: %ld calls, %ld mismatches, %ld failures, RSS %ld KiB\n", made,
                    g_mismatches, g_failures, rss);
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long rssEnd = residentKiB();
  const bool flat = rssAfterWarmup < 0 || rssEnd - rssAfterWarmup <= 32 * 1024;
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer the resident set also holds the allocator's quarantine (freed blocks
  // kept back to catch later uses, up to 256 MiB), which fills as the soak runs: growth is
  // reported, not failed, there (scripts/sanitize.sh).
  constexpr bool kBoundRss = false;
#else
  constexpr bool kBoundRss = true;
#endif
  std::printf(
      "soak: rank %d: %ld calls, %ld mismatches, %ld failures, %.1f s, RSS %ld -> %ld KiB "
      "(peak %ld)%s\n",
      g_rank, made, g_mismatches, g_failures, seconds, rssAfterWarmup, rssEnd,
      std::max(rssPeak, rssEnd), flat ? "" : " GREW");
  detcoll_finalize();
  return g_mismatches == 0 && g_failures == 0 && (flat || !kBoundRss) ? 0 : 1;
}
