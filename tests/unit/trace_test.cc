// The collective trace's writer (fusion/trace.h) and the engine's records in it: DETCOLL_TRACE
// read as the directory; the header and records as the format says, "batch" and "members", device
// records, names that are not UTF-8 or carry a stage or a process set; directories made where
// missing, and those that cannot be refused with DETCOLL_TRACE, the path and the reason; records on
// disk while the trace is still open and after the process is killed, with the end record only at
// a complete close. Then the engine on 3 ranks as threads: a group of in-place allreduces is one
// fused batch whose records hold the fingerprints of the inputs before the call and of the
// results, in the same order on every rank.

#include "fusion/trace.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collective/transport/thread_communicator.h"
#include "common/fingerprint.h"
#include "fusion/engine.h"
#include "fusion/settings.h"

namespace detcoll {
namespace {

using fusion::Trace;
using fusion::TraceRecord;
using Json = nlohmann::json;
namespace fs = std::filesystem;

// A fresh directory under the system's temporary one, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "detcoll_trace_test.XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<Json> readLines(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(Json::parse(line));
  return lines;
}

TraceRecord record(const std::string& name, uint64_t input, uint64_t output) {
  TraceRecord r;
  r.kind = "allreduce";
  r.name = name;
  r.type = DataType::kFloat64;
  r.op = ReduceOp::kAverage;
  r.count = 12;
  r.inputs = {input};
  r.output = output;
  return r;
}

TEST(TraceTest, WritesHeaderRecordsBatchesAndEndRecord) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a/b";  // neither exists
  Trace trace;
  ASSERT_TRUE(
      trace.open(dir, 2, 4, Mode::kInvariant, {{"DETCOLL_TRACE", dir}, {"HOROVOD_X", ""}}).isOk());
  EXPECT_EQ(trace.path(), dir + "/collectives.rank2.jsonl");
  trace.append(record("first", 0x0123456789abcdefULL, 1));
  TraceRecord device = record("on.device", 5, 6);
  device.device = true;
  device.op.reset();
  device.kind = "broadcast";
  trace.append(device);
  std::vector<TraceRecord> batch = {record("b.1", 2, 3), record("b.2", 4, 5)};
  batch[1].async = batch[0].async = true;
  trace.appendBatch(batch);
  TraceRecord alone = record("alone", 7, 8);
  alone.async = true;
  trace.appendBatch({alone});
  trace.close(true);
  trace.close(true);  // nothing more

  const std::vector<Json> lines = readLines(trace.path());
  ASSERT_EQ(lines.size(), 7u);
  std::string header;  // the fields in the format's order
  std::ifstream file(trace.path());
  std::getline(file, header);
  EXPECT_EQ(header,
            R"({"detcoll_trace":1,"source":"collectives","rank":2,"size":4,"mode":"invariant",)"
            R"("settings":{"DETCOLL_TRACE":")" +
                dir + R"(","HOROVOD_X":""}})");
  EXPECT_EQ(lines[1], Json::parse(R"({"seq":0,"kind":"allreduce","name":"first","set":0,
      "mode":"ordered","dtype":"float64","op":"average","count":12,"leaves":1,
      "inputs":["0123456789abcdef"],"output":"0000000000000001","async":false})"));
  EXPECT_EQ(lines[2], Json::parse(R"({"seq":1,"kind":"broadcast","name":"on.device","set":0,
      "mode":"ordered","dtype":"float64","op":null,"count":12,"leaves":1,"inputs":null,
      "output":null,"device":true,"async":false})"));
  EXPECT_EQ(lines[3]["batch"], 2);
  EXPECT_EQ(lines[4]["batch"], 2);
  EXPECT_EQ(lines[3]["members"], Json::parse(R"(["b.1","b.2"])"));
  EXPECT_FALSE(lines[4].contains("members"));  // listed once, on the batch's first record
  EXPECT_EQ(lines[4]["seq"], 3);
  EXPECT_EQ(lines[4]["inputs"], Json::parse(R"(["0000000000000004"])"));
  EXPECT_EQ(lines[5]["batch"], 4);
  EXPECT_FALSE(lines[5].contains("members"));
  EXPECT_FALSE(lines[1].contains("batch"));
  EXPECT_EQ(lines[6], Json::parse(R"({"end":true,"records":5})"));
}

TEST(TraceTest, DetcollTraceIsTheDirectoryAndAnEmptyValueIsUnset) {
  std::map<std::string, std::string> variables = {{"DETCOLL_TRACE", "/runs/7"}};
  const auto lookup = [&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  };
  fusion::EngineOptions options;
  Environment env(lookup);
  ASSERT_TRUE(fusion::loadEngineSettings(env, &options).isOk());
  EXPECT_EQ(options.traceDir, "/runs/7");
  EXPECT_EQ(env.setVariables(), std::vector<std::string>{"DETCOLL_TRACE=/runs/7"});
  variables["DETCOLL_TRACE"] = "";
  fusion::EngineOptions unset;
  Environment empty(lookup);
  ASSERT_TRUE(fusion::loadEngineSettings(empty, &unset).isOk());
  EXPECT_EQ(unset.traceDir, "");
}

TEST(TraceTest, NamesAreShownAsGivenAndInvalidUtf8IsReplaced) {
  EXPECT_EQ(fusion::traceName("w"), "w");
  EXPECT_EQ(fusion::traceName(std::string("w\0"
                                          "3",
                                          3)),
            "w");
  EXPECT_EQ(fusion::traceName(std::string("w\x1f"
                                          "rows\0"
                                          "3",
                                          9)),
            "w (rows)");
  TempDir tmp;
  Trace trace;
  ASSERT_TRUE(trace.open(tmp.path(), 0, 1, Mode::kOrdered, {}).isOk());
  trace.append(record("bad\xff\"name", 1, 2));
  trace.close(true);
  const std::vector<Json> lines = readLines(trace.path());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["name"], "bad\xef\xbf\xbd\"name");
}

TEST(TraceTest, ABadDirectoryIsAnErrorNamingTheVariableThePathAndTheReason) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "x";
  Trace trace;
  Status s = trace.open(file + "/trace", 0, 1, Mode::kOrdered, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "DETCOLL_TRACE: cannot create the directory '" + file + "/trace': Not a directory");
  s = trace.open(file, 0, 1, Mode::kOrdered, {});
  EXPECT_EQ(s.message(), "DETCOLL_TRACE: '" + file + "' exists and is not a directory");
  if (geteuid() != 0) {  // root writes anywhere
    const std::string locked = tmp.path() + "/locked";
    fs::create_directory(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    s = trace.open(locked, 0, 1, Mode::kOrdered, {});
    EXPECT_EQ(s.message(), "DETCOLL_TRACE: cannot write '" + locked +
                               "/collectives.rank0.jsonl.partial': Permission denied");
  }
  // Nothing was opened: a close does nothing.
  trace.close(true);
}

TEST(TraceTest, RecordsReachTheFileWhileOpenAndSurviveAKill) {
  TempDir tmp;
  const std::string path = tmp.path() + "/collectives.rank0.jsonl";
  // A child process opens a trace, appends three records, waits past the flush interval and is
  // killed without closing.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Trace trace;
    if (!trace.open(tmp.path(), 0, 1, Mode::kOrdered, {}).isOk()) _exit(3);
    for (int i = 0; i < 3; ++i) trace.append(record("r" + std::to_string(i), i, i));
    std::this_thread::sleep_for(Trace::kFlushInterval * 5);
    raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  std::vector<Json> lines = readLines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3]["seq"], 2);
  EXPECT_EQ(lines[3]["name"], "r2");

  // In this process: a record reaches the disk before any close (the writer flushes it within
  // the interval; the test waits up to 30 s, for loaded machines); no end record after an
  // incomplete close.
  Trace trace;
  ASSERT_TRUE(trace.open(tmp.path(), 0, 1, Mode::kOrdered, {}).isOk());
  trace.append(record("soon", 1, 1));
  const auto start = std::chrono::steady_clock::now();
  while (readLines(path).size() < 2 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  lines = readLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["name"], "soon");
  trace.close(false);
  lines = readLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines.back().contains("end"));
}

TEST(TraceTest, FailedAndJoinedCallsAreMarked) {
  TempDir tmp;
  Trace trace;
  ASSERT_TRUE(trace.open(tmp.path(), 0, 1, Mode::kOrdered, {}).isOk());
  TraceRecord failed = record("f", 3, 4);
  failed.error = "allreduce 'f': count 12 here, 13 on rank 2";
  trace.append(failed);
  TraceRecord joined = record("j", 5, 6);
  joined.async = joined.joined = true;
  trace.appendBatch({joined});
  trace.close(true);
  const std::vector<Json> lines = readLines(trace.path());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1]["error"], failed.error);
  EXPECT_EQ(lines[1]["output"], nullptr);  // a failed call's output is not its result
  EXPECT_EQ(lines[1]["inputs"], Json::array({"0000000000000003"}));
  EXPECT_FALSE(lines[1].contains("joined"));
  EXPECT_EQ(lines[2]["joined"], true);
  EXPECT_EQ(lines[2]["output"], "0000000000000006");
  EXPECT_FALSE(lines[2].contains("error"));
}

TEST(TraceTest, AnAbandonedOpeningLeavesTheEarlierTraceAndLaterSessionsHaveTheirOwnFiles) {
  TempDir tmp;
  const std::string path = tmp.path() + "/collectives.rank1.jsonl";
  {
    Trace first;
    ASSERT_TRUE(first.open(tmp.path(), 1, 2, Mode::kOrdered, {}).isOk());
    first.append(record("kept", 1, 2));
    first.close(true);
  }
  const std::vector<Json> before = readLines(path);
  ASSERT_EQ(before.size(), 3u);
  {
    // Init fails after the directory was checked: the earlier trace stays, the new file goes.
    Trace failed;
    ASSERT_TRUE(failed.prepare(tmp.path(), 1).isOk());
    EXPECT_TRUE(fs::exists(path + ".partial"));
    failed.abandon();
    EXPECT_FALSE(fs::exists(path + ".partial"));
    Trace destroyed;  // destroyed unstarted, as a failed init's runtime is
    ASSERT_TRUE(destroyed.prepare(tmp.path(), 1).isOk());
  }
  EXPECT_FALSE(fs::exists(path + ".partial"));
  EXPECT_EQ(readLines(path), before);
  // A second session in the same process.
  Trace second;
  ASSERT_TRUE(second.prepare(tmp.path(), 1, 2).isOk());
  ASSERT_TRUE(second.start(2, Mode::kInvariant, {}).isOk());
  second.close(true);
  EXPECT_EQ(second.path(), tmp.path() + "/collectives.rank1.session2.jsonl");
  EXPECT_EQ(readLines(second.path())[0]["mode"], "invariant");
  EXPECT_EQ(readLines(path), before);
}

TEST(TraceTest, RankZeroRemovesTheFilesOfRanksTheRunDoesNotHave) {
  TempDir tmp;
  for (const char* name :
       {"collectives.rank1.jsonl", "collectives.rank2.jsonl", "collectives.rank7.jsonl",
        "collectives.rank2.session2.jsonl", "training.rank5.jsonl"}) {
    std::ofstream(tmp.path() + "/" + name) << "{}\n";
  }
  Trace trace;
  ASSERT_TRUE(trace.open(tmp.path(), 0, 2, Mode::kOrdered, {}).isOk());
  trace.close(true);
  EXPECT_TRUE(fs::exists(tmp.path() + "/collectives.rank1.jsonl"));  // a rank of this run
  EXPECT_FALSE(fs::exists(tmp.path() + "/collectives.rank2.jsonl"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/collectives.rank7.jsonl"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/collectives.rank2.session2.jsonl"));  // another session
  EXPECT_TRUE(fs::exists(tmp.path() + "/training.rank5.jsonl"));              // the recorder's own
}

// The engine on 3 ranks as threads, each with its own trace: a group of in-place allreduces, one
// fused batch.
TEST(TraceTest, EngineRecordsFusedInPlaceBatchesInTheSameOrderOnEveryRank) {
  constexpr int kRanks = 3;
  TempDir tmp;
  const std::vector<std::string> names = {"g.x", "g.y", "g.z"};
  std::vector<std::vector<std::string>> inputs(kRanks, std::vector<std::string>(names.size()));
  std::vector<std::string> outputs(names.size());
  const Status ran =
      collective::transport::spawn(kRanks, [&](collective::transport::Communicator& comm) {
        const int r = comm.rank();
        auto trace = std::make_shared<Trace>();
        ASSERT_TRUE(trace->open(tmp.path(), r, kRanks, Mode::kOrdered, {}).isOk());
        fusion::EngineOptions options;
        options.trace = trace;
        auto own = static_cast<collective::transport::ThreadCommunicator&>(comm).duplicate();
        fusion::Engine engine(*own, options);
        ASSERT_TRUE(engine.start().isOk());
        std::vector<std::vector<float>> data(names.size());
        std::vector<fusion::RequestSpec> specs;
        for (size_t t = 0; t < names.size(); ++t) {
          data[t].assign(10 + t, static_cast<float>(r + t));
          inputs[r][t] =
              fingerprintHex(fingerprint(data[t].data(), data[t].size() * sizeof(float)));
          std::vector<float> sum(data[t].size(), static_cast<float>(kRanks * (kRanks - 1) / 2 +
                                                                    kRanks * static_cast<int>(t)));
          if (r == 0)
            outputs[t] = fingerprintHex(fingerprint(sum.data(), sum.size() * sizeof(float)));
          fusion::RequestSpec s;
          s.name = names[t];
          s.descriptor.count = data[t].size();
          s.send = data[t].data();
          s.recv = data[t].data();  // in place
          specs.push_back(s);
        }
        std::vector<fusion::RequestPtr> requests;
        ASSERT_TRUE(engine.enqueueGroup(specs, nullptr, &requests).isOk());
        for (const auto& request : requests) EXPECT_TRUE(request->wait().isOk());
        engine.shutdown();
        trace->close(true);
      });
  ASSERT_TRUE(ran.isOk()) << ran.toString();
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<Json> lines =
        readLines(tmp.path() + "/collectives.rank" + std::to_string(r) + ".jsonl");
    ASSERT_EQ(lines.size(), 2 + names.size()) << r;
    for (size_t s = 0; s < names.size(); ++s) {
      const Json& j = lines[s + 1];
      const size_t t = static_cast<size_t>(
          std::find(names.begin(), names.end(), j["name"].get<std::string>()) - names.begin());
      ASSERT_LT(t, names.size()) << j.dump();
      EXPECT_EQ(j["seq"], s);
      EXPECT_EQ(j["kind"], "allreduce");
      EXPECT_EQ(j["count"], 10 + t);
      EXPECT_EQ(j["async"], true);
      EXPECT_EQ(j["batch"], 0);
      EXPECT_EQ(j["inputs"], Json::array({inputs[r][t]})) << "rank " << r << ": " << j.dump();
      EXPECT_EQ(j["output"], outputs[t]) << "rank " << r << ": " << j.dump();
      EXPECT_EQ(j.contains("members"), s == 0) << j.dump();
      EXPECT_EQ(j["name"], lines[1]["members"][s]);
      EXPECT_FALSE(j.contains("joined") || j.contains("error")) << j.dump();
      // Every rank lists the same records in the same order.
      const std::vector<Json> first = readLines(tmp.path() + "/collectives.rank0.jsonl");
      EXPECT_EQ(lines[1]["members"], first[1]["members"]);
      EXPECT_EQ(j["name"], first[s + 1]["name"]);
    }
    EXPECT_EQ(lines.back(), Json::parse(R"({"end":true,"records":3})"));
  }
}

}  // namespace
}  // namespace detcoll
