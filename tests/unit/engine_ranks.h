#pragma once

// Fusion engines on ranks as threads (fusion/engine.h), for the unit tests: each rank's engine
// over a duplicate of its communicator, requests and their checks, and the blocking collective
// as the reference. Every run has a deadline: a hang aborts with the test's name instead of
// blocking (runRanks, tests/unit/unit_test_util.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective/collectives.h"
#include "collective/transport/thread_communicator.h"
#include "fusion/engine.h"
#include "tests/support/reference.h"
#include "tests/unit/unit_test_util.h"

namespace detcoll::testing::engines {

using collective::transport::Communicator;
using collective::transport::ThreadCommunicator;
using fusion::Clock;
using fusion::Engine;
using fusion::EngineOptions;
using fusion::RequestKind;
using fusion::RequestPtr;
using fusion::RequestSpec;
using testing::runRanks;  // on ranks as threads, with a deadline (unit_test_util.h)

inline constexpr DataType kF32 = DataType::kFloat32;
inline constexpr size_t kTail = 16;  // sentinel bytes after each output, which must stay untouched

// Success, or the status in the failure message.
inline ::testing::AssertionResult ok(const Status& s) {
  if (s.isOk()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << s.toString();
}

// An engine over a duplicate of comm (the engine's alone), started.
struct RankEngine {
  RankEngine(Communicator& comm, const EngineOptions& options)
      : comm(static_cast<ThreadCommunicator&>(comm).duplicate()),
        engine(std::make_unique<Engine>(*this->comm, options)) {
    EXPECT_TRUE(ok(engine->start()));
  }
  std::unique_ptr<ThreadCommunicator> comm;
  std::unique_ptr<Engine> engine;
};

// Runs fn with a started engine, then shuts it down.
inline void withEngine(Communicator& comm, const EngineOptions& options,
                       const std::function<void(Engine&)>& fn) {
  RankEngine e(comm, options);
  fn(*e.engine);
  e.engine->shutdown();
}

// The request's status once done; one that never completes fails here instead of blocking.
inline Status waitFor(const RequestPtr& request, double seconds = 20) {
  if (!request) return Status::internal("test: not enqueued");
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(seconds));
  while (!request->done()) {
    if (Clock::now() > deadline) {
      return Status::internal("test: '" + request->name() + "' did not complete within " +
                              std::to_string(seconds) + " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return request->wait();
}

inline RequestSpec spec(RequestKind kind, const std::string& name, DataType type, size_t count,
                        const void* send, void* recv, ReduceOp op = ReduceOp::kSum,
                        Mode mode = Mode::kOrdered, int root = 0) {
  RequestSpec s;
  s.name = name;
  s.descriptor.kind = kind;
  s.descriptor.type = type;
  s.descriptor.op = op;
  s.descriptor.mode = mode;
  s.descriptor.root = root;
  s.descriptor.count = count;
  s.send = send;
  s.recv = recv;
  return s;
}

inline RequestSpec allreduce(const std::string& name, DataType type, size_t count, const void* send,
                             void* recv, ReduceOp op = ReduceOp::kSum, Mode mode = Mode::kOrdered) {
  return spec(RequestKind::kAllreduce, name, type, count, send, recv, op, mode);
}

inline RequestPtr enqueueOk(Engine& engine, RequestSpec s,
                            fusion::Request::Callback callback = {}) {
  RequestPtr request;
  const std::string name = s.name;
  EXPECT_TRUE(ok(engine.enqueue(std::move(s), std::move(callback), &request))) << name;
  EXPECT_TRUE(request != nullptr) << name;
  return request;
}

inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// A failure with this code whose message holds every needle.
inline void expectFailure(const Status& s, StatusCode code,
                          const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), code) << s.toString();
  for (const std::string& n : needles) EXPECT_TRUE(contains(s.message(), n)) << s.message();
}

inline Buffer output(size_t bytes) {
  return Buffer(bytes + kTail, kSentinel);
}

inline bool tailUntouched(const Buffer& b, size_t bytes) {
  return std::all_of(b.begin() + bytes, b.end(), [](uint8_t x) { return x == kSentinel; });
}

// The reference: the blocking checked allreduce of one tensor on the rank's own communicator.
inline Buffer blockingAllreduce(Communicator& comm, Mode mode, const Buffer& in, size_t count,
                                DataType type, ReduceOp op, const std::string& name) {
  collective::Collectives c(comm);
  Buffer out = output(count * dataTypeSize(type));
  EXPECT_TRUE(ok(c.allreduce(mode, in.data(), out.data(), count, static_cast<int>(type),
                             static_cast<int>(op), name.c_str())));
  return out;
}

}  // namespace detcoll::testing::engines
