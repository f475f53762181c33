// The collective trace (DETCOLL_TRACE; fusion/trace.h) through the C API under mpirun (np 3):
//   detcoll_trace_check
// Rank 0 makes a temporary directory; every rank points DETCOLL_TRACE at a directory two levels
// below it, which init must create, and runs: blocking allreduce (named, and unnamed in place),
// allreduce_leaves, broadcast, allgather, a call its own check refuses (no record), one that fails
// across ranks (recorded with its error), asynchronous allreduces enqueued together (fused, as the
// engine plans them), a grouped allreduce (one fused batch), an asynchronous broadcast and
// reduce-scatter, a blocking allreduce, then an asynchronous allreduce in a process set of ranks 0
// and 1; then detcoll_finalize. Each rank then reads every rank's file and checks, against what it
// computed itself before and after each call: the header (rank, size, mode, every DETCOLL_* and
// HOROVOD_* variable but the observers), each record's seq, kind, name, set, mode, dtype, op,
// count, leaves, the fingerprints of its inputs (taken before the call: the in-place call
// overwrites its input) and of its expected result, the batches and their members, the end record;
// and across ranks: the same records in the same order, with the same results. Exits 0 when every
// rank passed; always finalizes MPI; removes the directory.

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fingerprint.h"
#include "detcoll.h"

namespace {

using Json = nlohmann::json;

int g_rank = 0;
int g_size = 1;
std::vector<std::string> g_failures;

void expect(bool ok, const std::string& what) {
  if (!ok) g_failures.push_back(what);
}

template <typename T>
std::string hexOf(const std::vector<T>& data) {
  return detcoll::fingerprintHex(detcoll::fingerprint(data.data(), data.size() * sizeof(T)));
}

// What a record must say, as this rank computed it. Records of one block (the requests the engine
// runs from one wait) may come in any order the engine chose, the same on every rank.
struct Expected {
  std::string kind;
  std::string name;
  std::string dtype;
  std::optional<std::string> op;
  uint64_t count = 0;
  int leaves = 1;
  std::vector<std::string> inputs;
  std::string output;
  bool async = false;
  int block = -1;  // engine requests enqueued together; -1: in call order
  int set = 0;
  std::string error;  // a failed call's: its record has the error and no output
};
std::vector<Expected> g_expected;

void ok(detcoll_status_t status, const std::string& call) {
  expect(status == DETCOLL_SUCCESS, call + " failed: " + detcoll_last_error());
}

void waitAll(std::vector<detcoll_handle_t>& handles, const std::string& what) {
  for (detcoll_handle_t h : handles) ok(detcoll_wait(h), "detcoll_wait (" + what + ")");
  handles.clear();
}

// The calls, each with its expected record.
void runCalls() {
  const int r = g_rank;
  const int p = g_size;
  {  // blocking allreduce: small integers, so any order of the sum gives these bits
    std::vector<float> send(1000), recv(1000), want(1000);
    for (int i = 0; i < 1000; ++i) {
      send[i] = static_cast<float>((r + 1) * (i % 97));
      want[i] = static_cast<float>(p * (p + 1) / 2 * (i % 97));
    }
    const std::string in = hexOf(send);
    ok(detcoll_allreduce(send.data(), recv.data(), 1000, DETCOLL_FLOAT32, DETCOLL_SUM,
                         "blocking.sum"),
       "allreduce");
    expect(recv == want, "allreduce result");
    g_expected.push_back(
        {"allreduce", "blocking.sum", "float32", "sum", 1000, 1, {in}, hexOf(want)});
  }
  {  // unnamed, in place: the input's fingerprint is the buffer's before the call
    std::vector<int64_t> buf(64), want(64);
    for (int i = 0; i < 64; ++i) {
      buf[i] = r * 1000 + i;
      want[i] = 1000 * p * (p - 1) / 2 + p * i;
    }
    const std::string in = hexOf(buf);
    ok(detcoll_allreduce(buf.data(), buf.data(), 64, DETCOLL_INT64, DETCOLL_SUM, nullptr),
       "in-place allreduce");
    expect(buf == want, "in-place allreduce result");
    expect(in != hexOf(buf), "the in-place input differs from the result");
    g_expected.push_back({"allreduce", "", "int64", "sum", 64, 1, {in}, hexOf(want)});
  }
  {  // leaves: two per rank
    std::vector<double> a(257), b(257), recv(257), want(257, 0.0);
    for (int i = 0; i < 257; ++i) {
      a[i] = (2 * r + 1) * i;
      b[i] = (2 * r + 2) * i;
      for (int q = 0; q < 2 * p; ++q) want[i] += (q + 1) * i;
    }
    const void* leaves[2] = {a.data(), b.data()};
    ok(detcoll_allreduce_leaves(leaves, 2, recv.data(), 257, DETCOLL_FLOAT64, DETCOLL_SUM,
                                "blocking.leaves"),
       "allreduce_leaves");
    expect(recv == want, "allreduce_leaves result");
    g_expected.push_back({"allreduce_leaves",
                          "blocking.leaves",
                          "float64",
                          "sum",
                          257,
                          2,
                          {hexOf(a), hexOf(b)},
                          hexOf(want)});
  }
  {  // broadcast from rank 1: the others' buffers are only written, so they have no input
    std::vector<int32_t> buf(100), want(100);
    for (int i = 0; i < 100; ++i) {
      want[i] = 7 * i + 3;
      buf[i] = r == 1 ? want[i] : -r;
    }
    const std::string in = hexOf(buf);
    ok(detcoll_broadcast(buf.data(), 100, DETCOLL_INT32, 1, "blocking.bcast"), "broadcast");
    expect(buf == want, "broadcast result");
    g_expected.push_back({"broadcast", "blocking.bcast", "int32", std::nullopt, 100, 1,
                          r == 1 ? std::vector<std::string>{in} : std::vector<std::string>{},
                          hexOf(want)});
  }
  {  // allgather: the output is every rank's count elements
    std::vector<double> send(10), recv(10 * p), want(10 * p);
    for (int i = 0; i < 10; ++i) send[i] = r + i * 0.5;
    for (int q = 0; q < p; ++q) {
      for (int i = 0; i < 10; ++i) want[q * 10 + i] = q + i * 0.5;
    }
    ok(detcoll_allgather(send.data(), recv.data(), 10, DETCOLL_FLOAT64, "blocking.gather"),
       "allgather");
    expect(recv == want, "allgather result");
    g_expected.push_back({"allgather",
                          "blocking.gather",
                          "float64",
                          std::nullopt,
                          10,
                          1,
                          {hexOf(send)},
                          hexOf(want)});
  }
  {  // a call refused by its own check (before any record): no record
    float x = 1, y = 0;
    expect(detcoll_allreduce(&x, &y, 1, static_cast<detcoll_dtype_t>(99), DETCOLL_SUM,
                             "blocking.bad") != DETCOLL_SUCCESS,
           "an allreduce of dtype 99 succeeded");
  }
  {  // a call that fails across ranks (another count on the last rank): recorded with its error
    const uint64_t n = r == p - 1 ? 5 : 4;
    std::vector<double> send(n, 0.25 * (r + 1)), recv(n);
    const std::string in = hexOf(send);
    expect(detcoll_allreduce(send.data(), recv.data(), n, DETCOLL_FLOAT64, DETCOLL_SUM,
                             "blocking.mismatch") != DETCOLL_SUCCESS,
           "an allreduce of counts that differ across ranks succeeded");
    Expected e{"allreduce", "blocking.mismatch", "float64", "sum", n, 1, {in}, ""};
    e.error = detcoll_last_error();
    expect(!e.error.empty(), "no error message for the mismatched allreduce");
    g_expected.push_back(e);
  }
  {  // asynchronous allreduces enqueued together: the engine fuses those ready in one cycle.
    // Ranks 1.. enqueue first and rank 0 last, so that they are likely ready together.
    constexpr int kTensors = 4;
    std::vector<std::vector<float>> send(kTensors), recv(kTensors);
    std::vector<detcoll_handle_t> handles(kTensors);
    for (int t = 0; t < kTensors; ++t) {
      const int n = 100 + 10 * t;
      send[t].resize(n);
      recv[t].resize(n);
      std::vector<float> want(n);
      for (int i = 0; i < n; ++i) {
        send[t][i] = static_cast<float>((r + t) * i);
        want[i] = 0;
        for (int q = 0; q < p; ++q) want[i] += static_cast<float>((q + t) * i);
      }
      g_expected.push_back({"allreduce",
                            "async." + std::to_string(t),
                            "float32",
                            "sum",
                            static_cast<uint64_t>(n),
                            1,
                            {hexOf(send[t])},
                            hexOf(want),
                            true,
                            1});
    }
    if (r == 0) MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 0; t < kTensors; ++t) {
      const std::string name = "async." + std::to_string(t);
      ok(detcoll_allreduce_async(send[t].data(), recv[t].data(), send[t].size(), DETCOLL_FLOAT32,
                                 DETCOLL_SUM, name.c_str(), &handles[t]),
         "allreduce_async " + name);
    }
    if (r != 0) MPI_Barrier(MPI_COMM_WORLD);
    waitAll(handles, "async");
    for (int t = 0; t < kTensors; ++t) {
      expect(hexOf(recv[t]) == g_expected[g_expected.size() - kTensors + t].output,
             "async." + std::to_string(t) + " result");
    }
  }
  {  // a group: negotiated together, one fused batch
    const char* names[3] = {"group.a", "group.b", "group.c"};
    std::vector<std::vector<int32_t>> send(3), recv(3);
    const void* sends[3];
    void* recvs[3];
    size_t counts[3];
    for (int g = 0; g < 3; ++g) {
      const int n = 50 + 10 * g;
      send[g].resize(n);
      recv[g].resize(n);
      std::vector<int32_t> want(n);
      for (int i = 0; i < n; ++i) {
        send[g][i] = (i % 2 == 0 ? r : -r) * (g + 1) + i;
        want[i] = (i % 2 == 0 ? p - 1 : 0) * (g + 1) + i;
      }
      sends[g] = send[g].data();
      recvs[g] = recv[g].data();
      counts[g] = static_cast<size_t>(n);
      g_expected.push_back({"allreduce",
                            names[g],
                            "int32",
                            "max",
                            static_cast<uint64_t>(n),
                            1,
                            {hexOf(send[g])},
                            hexOf(want),
                            true,
                            2});
    }
    std::vector<detcoll_handle_t> handles(3);
    ok(detcoll_grouped_allreduce_async(3, sends, recvs, counts, DETCOLL_INT32, DETCOLL_MAX, names,
                                       handles.data()),
       "grouped_allreduce_async");
    waitAll(handles, "group");
    for (int g = 0; g < 3; ++g) {
      expect(hexOf(recv[g]) == g_expected[g_expected.size() - 3 + g].output,
             std::string(names[g]) + " result");
    }
  }
  {  // asynchronous broadcast from the last rank
    std::vector<float> buf(33), want(33);
    for (int i = 0; i < 33; ++i) {
      want[i] = 0.25f * i;
      buf[i] = r == p - 1 ? want[i] : 100.0f + r;
    }
    const std::string in = hexOf(buf);
    std::vector<detcoll_handle_t> handles(1);
    ok(detcoll_broadcast_async(buf.data(), 33, DETCOLL_FLOAT32, p - 1, "async.bcast",
                               handles.data()),
       "broadcast_async");
    waitAll(handles, "async.bcast");
    expect(buf == want, "async.bcast result");
    g_expected.push_back({"broadcast", "async.bcast", "float32", std::nullopt, 33, 1,
                          r == p - 1 ? std::vector<std::string>{in} : std::vector<std::string>{},
                          hexOf(want), true, 3});
  }
  {  // reduce-scatter: rank j receives counts[j] elements of the sum
    std::vector<size_t> counts(p);
    size_t total = 0;
    for (int q = 0; q < p; ++q) total += counts[q] = static_cast<size_t>(q + 2);
    std::vector<float> send(total), recv(counts[r]), want(counts[r]);
    for (size_t k = 0; k < total; ++k) send[k] = static_cast<float>((r + 1) * k);
    size_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[q];
    for (size_t k = 0; k < counts[r]; ++k) {
      want[k] = static_cast<float>(p * (p + 1) / 2 * (offset + k));
    }
    detcoll_request_desc_t d;
    std::memset(&d, 0, sizeof d);
    d.kind = DETCOLL_REQUEST_REDUCESCATTER;
    d.sendbuf = send.data();
    d.recvbuf = recv.data();
    d.counts = counts.data();
    d.dtype = DETCOLL_FLOAT32;
    d.op = DETCOLL_SUM;
    d.name = "async.rs";
    std::vector<detcoll_handle_t> handles(1);
    ok(detcoll_enqueue(&d, handles.data()), "enqueue reducescatter");
    waitAll(handles, "async.rs");
    expect(recv == want, "async.rs result");
    g_expected.push_back({"reducescatter",
                          "async.rs",
                          "float32",
                          "sum",
                          total,
                          1,
                          {hexOf(send)},
                          hexOf(want),
                          true,
                          4});
  }
  {  // a blocking call after the engine's
    std::vector<float> send(5, static_cast<float>(r)), recv(5),
        want(5, static_cast<float>(p * (p - 1) / 2));
    ok(detcoll_allreduce(send.data(), recv.data(), 5, DETCOLL_FLOAT32, DETCOLL_SUM,
                         "blocking.last"),
       "last allreduce");
    g_expected.push_back(
        {"allreduce", "blocking.last", "float32", "sum", 5, 1, {hexOf(send)}, hexOf(want)});
  }
  {  // a process set of ranks 0 and 1: recorded on its members alone, under its set id
    const int members[2] = {0, 1};
    int id = 0;
    ok(detcoll_process_set_add(members, 2, &id), "process_set_add");
    if (r <= 1) {
      std::vector<double> send(8, r + 1.0), recv(8), want(8, 3.0);
      detcoll_request_desc_t d;
      std::memset(&d, 0, sizeof d);
      d.kind = DETCOLL_REQUEST_ALLREDUCE;
      d.sendbuf = send.data();
      d.recvbuf = recv.data();
      d.count = 8;
      d.dtype = DETCOLL_FLOAT64;
      d.op = DETCOLL_SUM;
      d.name = "set.x";
      d.process_set = id;
      std::vector<detcoll_handle_t> handles(1);
      ok(detcoll_enqueue(&d, handles.data()), "enqueue in a process set");
      waitAll(handles, "set.x");
      expect(recv == want, "set.x result");
      Expected e{"allreduce", "set.x", "float64", "sum", 8, 1, {hexOf(send)}, hexOf(want), true, 5};
      e.set = id;
      g_expected.push_back(e);
    }
    ok(detcoll_process_set_remove(id), "process_set_remove");
  }
}

// The DETCOLL_* and HOROVOD_* variables but DETCOLL_TRACE itself and the other observers, which
// only say where to write what is observed (HOROVOD_TIMELINE_MARK_CYCLES is set for them).
std::map<std::string, std::string> environmentSettings() {
  std::map<std::string, std::string> settings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string text(*e);
    const size_t equals = text.find('=');
    if (text.rfind("DETCOLL_", 0) == 0 || text.rfind("HOROVOD_", 0) == 0) {
      settings[text.substr(0, equals)] = text.substr(equals + 1);
    }
  }
  expect(settings.erase("DETCOLL_TRACE") == 1, "DETCOLL_TRACE is set");
  expect(settings.erase("HOROVOD_TIMELINE_MARK_CYCLES") == 1, "an observer is set");
  return settings;
}

// The lines of a rank's file, parsed; a line that is not JSON is a failure.
std::vector<Json> readTrace(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  expect(in.good(), "cannot read " + path);
  std::string line;
  while (std::getline(in, line)) {
    try {
      lines.push_back(Json::parse(line));
    } catch (const std::exception& e) {
      expect(false, path + ": a line that is not JSON: " + line);
    }
  }
  return lines;
}

std::string at(const std::string& path, size_t seq) {
  return path + " record " + std::to_string(seq) + ": ";
}

// This rank's own file against what it computed.
void checkOwn(const std::string& path, const std::vector<Json>& lines, const std::string& mode) {
  const size_t n = g_expected.size();
  expect(lines.size() == n + 2,
         path + ": " + std::to_string(lines.size()) + " lines, expected " + std::to_string(n + 2));
  if (lines.size() != n + 2) return;
  const Json& h = lines[0];
  expect(h.value("detcoll_trace", 0) == 1 && h.value("source", "") == "collectives" &&
             h.value("rank", -1) == g_rank && h.value("size", -1) == g_size &&
             h.value("mode", "") == mode,
         path + ": header " + h.dump());
  expect(h.contains("settings") &&
             h["settings"].get<std::map<std::string, std::string>>() == environmentSettings(),
         path + ": settings " + h.value("settings", Json()).dump());
  expect(lines[n + 1] == Json({{"end", true}, {"records", n}}),
         path + ": last line " + lines[n + 1].dump());
  std::map<int, std::set<std::string>> blockNames;  // the names each block's records must have
  for (const Expected& e : g_expected) {
    if (e.block >= 0) blockNames[e.block].insert(e.name);
  }
  for (size_t s = 0; s < n; ++s) {
    const Json& j = lines[s + 1];
    expect(j.value("seq", -1) == static_cast<int64_t>(s), at(path, s) + "seq " + j.dump());
    // The expected record: the one at s, or the one of its block with this name.
    const Expected* e = &g_expected[s];
    if (e->block >= 0) {
      e = nullptr;
      for (const Expected& c : g_expected) {
        if (c.block == g_expected[s].block && c.name == j.value("name", "")) e = &c;
      }
      if (e == nullptr) {
        expect(false, at(path, s) + "a name not in its block: " + j.dump());
        continue;
      }
    }
    Json want = {{"seq", s},
                 {"kind", e->kind},
                 {"name", e->name},
                 {"set", e->set},
                 {"mode", mode},
                 {"dtype", e->dtype},
                 {"op", e->op ? Json(*e->op) : Json(nullptr)},
                 {"count", e->count},
                 {"leaves", e->leaves},
                 {"inputs", e->inputs},
                 {"output", e->output},
                 {"async", e->async}};
    if (!e->error.empty()) {
      want["output"] = nullptr;
      want["error"] = e->error;
    }
    Json got = j;
    got.erase("batch");
    got.erase("members");
    expect(got == want, at(path, s) + "got " + got.dump() + ", expected " + want.dump());
    expect(j.contains("batch") == e->async, at(path, s) + "batch " + j.dump());
  }
  // Batches: consecutive records, the first's seq as their id, members on the first only and only
  // where there are several, listing them in order.
  std::map<int64_t, std::vector<std::string>> batches;
  for (size_t s = 0; s < n; ++s) {
    const Json& j = lines[s + 1];
    if (!j.contains("batch")) continue;
    const int64_t b = j["batch"].get<int64_t>();
    batches[b].push_back(j.value("name", ""));
    expect(b <= static_cast<int64_t>(s) &&
               static_cast<int64_t>(s) - b + 1 == static_cast<int64_t>(batches[b].size()),
           at(path, s) + "not consecutive in batch " + std::to_string(b));
  }
  for (const auto& [b, names] : batches) {
    for (size_t k = 0; k < names.size(); ++k) {
      const Json& j = lines[static_cast<size_t>(b) + k + 1];
      if (names.size() == 1 || k > 0) {
        expect(!j.contains("members"),
               at(path, b + k) + "members on other than a batch's first: " + j.dump());
      } else {
        expect(j.value("members", Json()) == Json(names),
               at(path, b + k) + "members " + j.value("members", Json()).dump());
      }
    }
  }
  // The group is one fused batch of its three requests.
  bool groupFused = false;
  for (const auto& [b, names] : batches) {
    groupFused |= std::set<std::string>(names.begin(), names.end()) == blockNames[2];
  }
  expect(groupFused, path + ": the group is not one batch of its three requests");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  char top[256] = {0};
  if (g_rank == 0) {
    std::snprintf(top, sizeof top, "%s", "/tmp/detcoll_trace_check.XXXXXX");
    if (mkdtemp(top) == nullptr) top[0] = '\0';
  }
  MPI_Bcast(top, sizeof top, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (top[0] == '\0') {
    std::printf("rank %d: cannot make a temporary directory\n", g_rank);
    MPI_Finalize();
    return 1;
  }
  // Two levels that do not exist: init makes them.
  const std::string dir = std::string(top) + "/made/by_init";
  setenv("DETCOLL_TRACE", dir.c_str(), 1);
  setenv("HOROVOD_FUSION_THRESHOLD", "67108864", 0);  // a HOROVOD_ variable for the header
  setenv("HOROVOD_TIMELINE_MARK_CYCLES", "0", 0);     // an observer: not in the header
  expect(provided >= MPI_THREAD_MULTIPLE, "MPI without MPI_THREAD_MULTIPLE: no engine");
  if (detcoll_init() != DETCOLL_SUCCESS) {
    expect(false, std::string("detcoll_init failed: ") + detcoll_last_error());
  } else {
    const detcoll_mode_t mode = detcoll_get_mode();
    runCalls();
    ok(detcoll_finalize(), "detcoll_finalize");
    MPI_Barrier(MPI_COMM_WORLD);  // every rank's file is complete
    const std::string modeText = mode == DETCOLL_MODE_NATIVE      ? "native"
                                 : mode == DETCOLL_MODE_INVARIANT ? "invariant"
                                                                  : "ordered";
    std::vector<std::vector<Json>> files(g_size);
    for (int q = 0; q < g_size; ++q) {
      files[q] = readTrace(dir + "/collectives.rank" + std::to_string(q) + ".jsonl");
    }
    const std::string mine = dir + "/collectives.rank" + std::to_string(g_rank) + ".jsonl";
    checkOwn(mine, files[g_rank], modeText);
    // Across ranks: the records every rank makes (all but the process set's, the last on ranks
    // 0 and 1) in the same order, alike but for the inputs, with the same results but for the
    // reduce-scatter's blocks.
    const size_t common = g_expected.size() - (g_rank <= 1 ? 1 : 0);
    for (int q = 0; q < g_size; ++q) {
      const size_t theirs = common + (q <= 1 ? 1 : 0) + 2;
      expect(files[q].size() == theirs, "rank " + std::to_string(q) + "'s file has " +
                                            std::to_string(files[q].size()) + " lines, expected " +
                                            std::to_string(theirs));
      if (files[q].size() != theirs || files[g_rank].size() < common + 1) continue;
      for (size_t s = 0; s < common; ++s) {
        Json a = files[g_rank][s + 1];
        Json b = files[q][s + 1];
        for (Json* j : {&a, &b}) {
          j->erase("inputs");
          if (j->value("kind", "") == "reducescatter") j->erase("output");
          if (j->contains("error")) j->erase("count");  // the mismatch itself
        }
        expect(a == b, "record " + std::to_string(s) + " differs between rank " +
                           std::to_string(g_rank) + " (" + a.dump() + ") and rank " +
                           std::to_string(q) + " (" + b.dump() + ")");
      }
    }
    if (g_rank == 0 && files[0].size() > 2) {
      std::printf("rank 0's trace, %zu records:\n", files[0].size() - 2);
      for (size_t s = 1; s + 1 < files[0].size(); ++s) {
        const Json& j = files[0][s];
        std::printf("  %s\n", j.dump().c_str());
      }
    }
  }
  for (const std::string& f : g_failures) std::printf("rank %d: FAILED: %s\n", g_rank, f.c_str());
  int passed = g_failures.empty() ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&passed, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(top, ec);
    std::printf("trace check: %s\n", all ? "every rank passed" : "FAILED");
  }
  MPI_Finalize();
  return all ? 0 : 1;
}
