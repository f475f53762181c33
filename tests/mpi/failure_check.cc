// Bad schedules through the C API, one per run, for tests/python/test_failures.py, which launches
// it under mpirun and reads what every rank reports:
//   detcoll_failure_check SCENARIO [ARG]
// Every rank reports on standard output, one line per event, each written with one write() so
// that lines of different ranks do not mix:
//   @@ rank=R event=NAME key=value ... msg="detcoll_last_error()"
// A result that some call returned as success is checked against a reference computed here from
// every rank's inputs (the rank-order sum in float32, the ordered mode's definition), and a wrong
// one is reported as event=WRONG. The run's outcome is judged by the driver, not here.
//
// Scenarios (the late rank is the last rank; the limit is DETCOLL_STALL_SHUTDOWN_SECONDS):
//   stall_resume    an asynchronous loop in which the late rank sleeps ARG seconds at step 5 and
//                   carries on; every rank loops until 4 * limit seconds have passed
//   stall_exit      the same, with a late rank that never comes back; the others finalize as soon
//                   as their step fails
//   threads         the init thread and a second thread make ARG blocking allreduces each, with
//                   one name ("equal") or none ("missing"; ARG2)
//   wedged_blocking the late rank sleeps in its own code; the others make a blocking allreduce
//   wedged_engine   the same, with an asynchronous allreduce
//   stopped         the late rank stops (SIGSTOP, engine thread and all); the others make an
//                   asynchronous, then a blocking allreduce
//   killed          the late rank dies (SIGKILL; mpirun kept alive with --enable-recovery); the
//                   others make an asynchronous, then a blocking allreduce
//   stopped_finalize the late rank stops; the others finalize at once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "detcoll.h"
#include "status_name.h"

namespace {

int g_rank = -1;
int g_size = 0;

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One line, one write.
void report(const std::string& event, const std::string& fields, const char* message = nullptr) {
  std::string line = "@@ rank=" + std::to_string(g_rank) + " event=" + event +
                     " t=" + std::to_string(now()) + (fields.empty() ? "" : " " + fields);
  if (message != nullptr) {
    std::string m = message;
    for (char& c : m) {
      if (c == '"' || c == '\n') c = '\'';
    }
    line += " msg=\"" + m + "\"";
  }
  line += "\n";
  ssize_t written = write(1, line.data(), line.size());
  (void)written;
}

// Rank r's input of call `call`: non-integer values over a wide range of exponents, both signs.
std::vector<float> input(int r, uint64_t call, size_t n) {
  std::mt19937_64 gen(call * 1000003 + static_cast<uint64_t>(r) * 7919 + 11);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> x(n);
  for (float& v : x) {
    const double m = mantissa(gen) * ((gen() & 1) ? -1 : 1);
    v = static_cast<float>(std::ldexp(m, exponent(gen)));
  }
  return x;
}

// The ordered mode's sum: every rank's input folded in rank order, in float32.
std::vector<float> reference(uint64_t call, size_t n) {
  std::vector<float> sum = input(0, call, n);
  for (int r = 1; r < g_size; ++r) {
    const std::vector<float> x = input(r, call, n);
    for (size_t i = 0; i < n; ++i) sum[i] = sum[i] + x[i];
  }
  return sum;
}

// Reports a call's outcome; a success with other bits than the reference is WRONG. Returns the
// status.
detcoll_status_t judge(detcoll_status_t s, const std::string& what, uint64_t call,
                       const std::vector<float>& out, double began) {
  const std::string fields =
      what + " status=" + statusName(s) + " elapsed=" + std::to_string(now() - began);
  if (s != DETCOLL_SUCCESS) {
    report("call", fields, detcoll_last_error());
    return s;
  }
  const std::vector<float> ref = reference(call, out.size());
  const bool same = std::memcmp(ref.data(), out.data(), out.size() * sizeof(float)) == 0;
  report(same ? "call" : "WRONG", fields);
  return s;
}

detcoll_status_t asyncAllreduce(uint64_t call, size_t n, const char* name,
                                std::vector<float>* out) {
  const std::vector<float> in = input(g_rank, call, n);
  out->assign(n, 0.0f);
  detcoll_handle_t h = nullptr;
  detcoll_status_t s =
      detcoll_allreduce_async(in.data(), out->data(), n, DETCOLL_FLOAT32, DETCOLL_SUM, name, &h);
  if (s != DETCOLL_SUCCESS) return s;
  return detcoll_wait(h);
}

detcoll_status_t blockingAllreduce(uint64_t call, size_t n, const char* name,
                                   std::vector<float>* out) {
  const std::vector<float> in = input(g_rank, call, n);
  out->assign(n, 0.0f);
  return detcoll_allreduce(in.data(), out->data(), n, DETCOLL_FLOAT32, DETCOLL_SUM, name);
}

double stallLimit() {
  const char* text = std::getenv("DETCOLL_STALL_SHUTDOWN_SECONDS");
  return text != nullptr ? std::atof(text) : 600;
}

void finalize() {
  report("finalizing", "");
  const detcoll_status_t s = detcoll_finalize();
  report("finalized", std::string("status=") + statusName(s));
}

// The asynchronous loop of a training step: one named gradient per step.
int stall(bool comesBack, double sleepSeconds) {
  const int late = g_size - 1;
  const double limit = stallLimit();
  const double start = now();
  const double until = start + 4 * limit;
  const size_t n = 1000;
  for (uint64_t step = 0;; ++step) {
    if (now() > until) break;
    if (g_rank == late && step == 5) {
      report("sleeping", "seconds=" + std::to_string(comesBack ? sleepSeconds : 3600.0));
      std::this_thread::sleep_for(std::chrono::duration<double>(comesBack ? sleepSeconds : 3600));
    }
    std::vector<float> out;
    const double began = now();
    const detcoll_status_t s = asyncAllreduce(step, n, "grad", &out);
    judge(s, "step=" + std::to_string(step), step, out, began);
    if (s != DETCOLL_SUCCESS && !comesBack) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (comesBack) {
    // Blocking calls still work among ranks that all answer. Everyone reports before anyone
    // finalizes (a process that exits without MPI_Finalize ends the job): the second call
    // completes only once every rank has made it, which each does after its report.
    std::vector<float> out;
    const double began = now();
    judge(blockingAllreduce(1000000, 4, "before finalize", &out), "step=end", 1000000, out, began);
    blockingAllreduce(1000001, 4, "reported", &out);
  }
  finalize();
  return 0;
}

// Both threads make blocking calls; the second thread also makes named asynchronous requests
// (which pair by name, from any thread) between them.
int threads(int calls, bool named) {
  std::atomic<int> wrong{0};
  int asyncOk = 0;
  auto loop = [&](int thread, int* ok, int* refused) {
    for (int i = 0; i < calls; ++i) {
      const uint64_t call = static_cast<uint64_t>(thread) * 1000000 + i;
      std::vector<float> out;
      if (thread == 1) {
        const uint64_t asyncCall = 3000000 + i;
        const std::string name = "thread1." + std::to_string(i);
        if (asyncAllreduce(asyncCall, 16, name.c_str(), &out) == DETCOLL_SUCCESS) {
          const std::vector<float> ref = reference(asyncCall, 16);
          if (std::memcmp(ref.data(), out.data(), sizeof(float) * 16) == 0) {
            ++asyncOk;
          } else {
            ++wrong;
            report("WRONG", "thread=1 async=" + std::to_string(i));
          }
        } else if (asyncOk == 0) {
          report("async_failed", "thread=1", detcoll_last_error());
        }
      }
      const detcoll_status_t s = blockingAllreduce(call, 16, named ? "same" : nullptr, &out);
      if (s == DETCOLL_SUCCESS) {
        const std::vector<float> ref = reference(call, 16);
        if (std::memcmp(ref.data(), out.data(), sizeof(float) * 16) != 0) {
          ++wrong;
          report("WRONG", "thread=" + std::to_string(thread) + " call=" + std::to_string(i));
        } else {
          ++*ok;
        }
      } else {
        ++*refused;
        if (*refused == 1) {
          report("refused", "thread=" + std::to_string(thread) + " status=" + statusName(s),
                 detcoll_last_error());
        }
      }
    }
  };
  int ok[2] = {0, 0};
  int refused[2] = {0, 0};
  std::thread second([&] { loop(1, &ok[1], &refused[1]); });
  loop(0, &ok[0], &refused[0]);
  second.join();
  for (int t = 0; t < 2; ++t) {
    report("threads", "thread=" + std::to_string(t) + " ok=" + std::to_string(ok[t]) +
                          " refused=" + std::to_string(refused[t]) +
                          " async_ok=" + std::to_string(t == 1 ? asyncOk : 0) +
                          " wrong=" + std::to_string(wrong.load()));
  }
  finalize();
  return 0;
}

// The others' calls while the late rank is away (asleep, stopped or dead).
int away(const std::string& how) {
  const int late = g_size - 1;
  // Every rank is here before the late one goes away.
  std::vector<float> out;
  double began = now();
  judge(blockingAllreduce(1, 8, "before", &out), "call=before", 1, out, began);
  if (g_rank == late) {
    report("away", "how=" + how);
    if (how == "stopped" || how == "stopped_finalize") raise(SIGSTOP);
    if (how == "killed") raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(3600));
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (how == "stopped_finalize") {
    finalize();  // at once: its last negotiation must give up on the stopped rank
    return 0;
  }
  if (how == "wedged_blocking") {
    began = now();
    judge(blockingAllreduce(2, 1000, "blocking", &out), "call=blocking", 2, out, began);
  } else {
    began = now();
    judge(asyncAllreduce(3, 1000, "async", &out), "call=async", 3, out, began);
    if (how != "wedged_engine") {
      began = now();
      judge(blockingAllreduce(2, 1000, "blocking", &out), "call=blocking", 2, out, began);
    }
  }
  // The first process to exit without MPI_Finalize ends the job: the others report first.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SCENARIO [ARG]\n", argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  const detcoll_status_t s = detcoll_init();
  if (s != DETCOLL_SUCCESS) {
    std::fprintf(stderr, "detcoll_init failed: %s\n", detcoll_last_error());
    return 1;
  }
  g_rank = detcoll_rank();
  g_size = detcoll_size();
  report("started", "size=" + std::to_string(g_size));
  if (scenario == "stall_resume") return stall(true, argc > 2 ? std::atof(argv[2]) : 10);
  if (scenario == "stall_exit") return stall(false, 0);
  if (scenario == "threads") {
    return threads(argc > 2 ? std::atoi(argv[2]) : 5000,
                   argc > 3 ? std::strcmp(argv[3], "equal") == 0 : true);
  }
  if (scenario == "wedged_blocking" || scenario == "wedged_engine" || scenario == "stopped" ||
      scenario == "killed" || scenario == "stopped_finalize") {
    return away(scenario);
  }
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  detcoll_finalize();
  return 2;
}
