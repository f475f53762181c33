// The fusion engine on device memory (fusion/device_batches.h), ranks as threads on one GPU: each
// rank's engine over a duplicate of its communicator, the device path staged through host memory
// (NCCL cannot run several ranks on one GPU), and at one rank over NCCL. Device requests, fused
// and alone, enqueued in a different order on every rank on each rank's own stream, give the bits
// of the same requests on host memory; so do device reduce-scatters and alltoalls; a rank whose
// request is on host memory while the others' are on a device fails every rank with a mismatch.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/transport/thread_communicator.h"
#include "fusion/device_batches.h"
#include "fusion/engine.h"
#include "tests/gpu/gpu_test.h"
#include "tests/support/reference.h"

namespace detcoll {
namespace {

using collective::GpuTransport;
using collective::transport::Communicator;
using collective::transport::ThreadCommunicator;
using fusion::Engine;
using fusion::EngineOptions;
using fusion::RequestKind;
using fusion::RequestPtr;
using fusion::RequestSpec;

::testing::AssertionResult ok(const Status& s) {
  if (s.isOk()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << s.toString();
}

::testing::AssertionResult cudaOk(cudaError_t e) {
  if (e == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << cudaGetErrorString(e);
}

// Runs fn on p ranks as threads; a run past two minutes aborts, naming the test.
void runRanks(int p, const std::function<void(Communicator&)>& fn) {
  std::promise<Status> result;
  std::future<Status> done = result.get_future();
  std::thread ranks([&] { result.set_value(collective::transport::spawn(p, fn)); });
  if (done.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    std::fprintf(stderr, "%s: still running after 120 s (hung)\n",
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::abort();
  }
  ranks.join();
  ASSERT_TRUE(ok(done.get()));
}

// A device copy of host bytes, freed at the end of the scope.
struct DeviceBytes {
  explicit DeviceBytes(size_t n) : bytes(n) { EXPECT_TRUE(cudaOk(cudaMalloc(&data, n + 1))); }
  DeviceBytes(const std::vector<uint8_t>& host) : DeviceBytes(host.size()) {
    EXPECT_TRUE(cudaOk(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice)));
  }
  ~DeviceBytes() { cudaFree(data); }
  std::vector<uint8_t> host() const {
    std::vector<uint8_t> out(bytes);
    EXPECT_TRUE(cudaOk(cudaMemcpy(out.data(), data, bytes, cudaMemcpyDeviceToHost)));
    return out;
  }
  void* data = nullptr;
  size_t bytes;
};

RequestSpec makeSpec(RequestKind kind, const std::string& name, DataType type, size_t count,
                     const void* send, void* recv, Mode mode) {
  RequestSpec s;
  s.name = name;
  s.descriptor.kind = kind;
  s.descriptor.type = type;
  s.descriptor.mode = mode;
  s.descriptor.count = count;
  s.send = send;
  s.recv = recv;
  return s;
}

// The spec on device memory: marked, its `ready` recorded on `stream`.
RequestSpec onDevice(RequestSpec s, cudaStream_t stream) {
  s.descriptor.device = true;
  EXPECT_TRUE(ok(fusion::DeviceMarks::make(0, stream, &s.marks)));
  return s;
}

Status enqueue(Engine& engine, RequestSpec s, RequestPtr* request) {
  return engine.enqueue(std::move(s), nullptr, request);
}

struct RankEngine {
  RankEngine(Communicator& comm, const EngineOptions& options)
      : comm(static_cast<ThreadCommunicator&>(comm).duplicate()),
        engine(std::make_unique<Engine>(*this->comm, options)) {
    EXPECT_TRUE(ok(engine->start()));
  }
  ~RankEngine() { engine->shutdown(); }
  std::unique_ptr<ThreadCommunicator> comm;
  std::unique_ptr<Engine> engine;
};

EngineOptions options(GpuTransport transport, size_t threshold = 64 << 20) {
  EngineOptions o;
  o.gpuTransport = transport;
  o.fusionThresholdBytes = threshold;
  o.cycleTimeMs = 1;
  o.stallShutdownSeconds = 60;
  return o;
}

// Allreduces of `counts` elements in `type` and `mode`, on host memory and on device memory
// (each rank enqueueing in its own order, on its own stream): the same bits.
void allreducesMatchHost(int p, GpuTransport transport, DataType type, Mode mode,
                         const std::vector<size_t>& counts, size_t threshold) {
  runRanks(p, [&](Communicator& comm) {
    ASSERT_TRUE(cudaOk(cudaSetDevice(0)));
    cudaStream_t stream = nullptr;
    ASSERT_TRUE(cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
    const int rank = comm.rank();
    const size_t n = counts.size();
    std::vector<std::vector<uint8_t>> inputs, host;
    std::vector<std::unique_ptr<DeviceBytes>> device;
    for (size_t i = 0; i < n; ++i) {
      inputs.push_back(testing::randomBuffer(type, counts[i], 1000 * i + 17 * rank + 5));
      host.push_back(inputs.back());
      device.push_back(std::make_unique<DeviceBytes>(inputs.back()));
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(rank) + 1));
    {
      RankEngine e(comm, options(transport, threshold));
      std::vector<RequestPtr> requests(2 * n);
      for (size_t i : order) {
        ASSERT_TRUE(ok(enqueue(*e.engine,
                               makeSpec(RequestKind::kAllreduce, "h" + std::to_string(i), type,
                                        counts[i], host[i].data(), host[i].data(), mode),
                               &requests[i])));
        ASSERT_TRUE(
            ok(enqueue(*e.engine,
                       onDevice(makeSpec(RequestKind::kAllreduce, "d" + std::to_string(i), type,
                                         counts[i], device[i]->data, device[i]->data, mode),
                                stream),
                       &requests[n + i])));
      }
      for (size_t i = 0; i < 2 * n; ++i) {
        ASSERT_TRUE(ok(requests[i]->wait())) << requests[i]->name();
        if (i >= n) ASSERT_TRUE(ok(requests[i]->spec().marks->waitFor(stream)));
      }
      ASSERT_TRUE(cudaOk(cudaStreamSynchronize(stream)));
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(device[i]->host(), host[i])
          << "rank " << rank << " tensor " << i << " of " << counts[i] << " elements";
      if (p > 1) EXPECT_NE(host[i], inputs[i]) << "the host allreduce left tensor " << i;
    }
    cudaStreamDestroy(stream);
  });
}

TEST(EngineGpu, FusedAndLoneAllreducesEqualTheHostBitsOverStagedRanks) {
  DETCOLL_SKIP_WITHOUT_GPU("the engine's device batches");
  const std::vector<size_t> counts = {1000, 3, 70000, 5, 300000, 1 << 21, 17};
  for (Mode mode : {Mode::kOrdered, Mode::kInvariant}) {
    for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64}) {
      allreducesMatchHost(3, GpuTransport::kMpi, type, mode, counts, 64 << 20);
    }
  }
  // A threshold that splits the small ones over several fusion buffers.
  allreducesMatchHost(3, GpuTransport::kMpi, DataType::kFloat32, Mode::kInvariant, counts,
                      64 << 10);
}

#if DETCOLL_GPU_TEST_NCCL
TEST(EngineGpu, FusedAndLoneAllreducesEqualTheHostBitsOverNcclAtOneRank) {
  DETCOLL_SKIP_WITHOUT_GPU("the engine's device batches over NCCL");
  const std::vector<size_t> counts = {1000, 3, 70000, 5, 300000, 1 << 21, 17};
  for (Mode mode : {Mode::kOrdered, Mode::kInvariant}) {
    allreducesMatchHost(1, GpuTransport::kNccl, DataType::kFloat32, mode, counts, 64 << 20);
  }
}
#endif

TEST(EngineGpu, ReduceScatterAlltoallBroadcastAllgatherEqualTheHostBits) {
  DETCOLL_SKIP_WITHOUT_GPU("the engine's device reduce-scatter and alltoall");
  const int p = 3;
  runRanks(p, [&](Communicator& comm) {
    ASSERT_TRUE(cudaOk(cudaSetDevice(0)));
    cudaStream_t stream = nullptr;
    ASSERT_TRUE(cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
    const int rank = comm.rank();
    const DataType f32 = DataType::kFloat32;
    RankEngine e(comm, options(GpuTransport::kMpi));
    // Reduce-scatter of blocks 5, 7, 9.
    const std::vector<uint64_t> blocks = {5, 7, 9};
    const auto rsIn = testing::randomBuffer(f32, 21, 300 + rank);
    std::vector<uint8_t> rsHost(blocks[rank] * 4);
    DeviceBytes rsSend(rsIn), rsRecv(rsHost.size());
    // Alltoall: rank r sends r + j + 1 elements to rank j.
    std::vector<uint64_t> sendCounts(p), recvCounts(p);
    uint64_t sent = 0, received = 0;
    for (int j = 0; j < p; ++j) {
      sendCounts[j] = rank + j + 1;
      recvCounts[j] = j + rank + 1;
      sent += sendCounts[j];
      received += recvCounts[j];
    }
    const auto aaIn = testing::randomBuffer(f32, sent, 400 + rank);
    std::vector<uint8_t> aaHost(received * 4);
    DeviceBytes aaSend(aaIn), aaRecv(aaHost.size());
    // Broadcast from rank 1 and an allgather.
    auto bcHost = testing::randomBuffer(f32, 1000, 500 + rank);
    DeviceBytes bc(bcHost);
    const auto agIn = testing::randomBuffer(f32, 333, 600 + rank);
    std::vector<uint8_t> agHost(agIn.size() * p);
    DeviceBytes agSend(agIn), agRecv(agHost.size());

    auto rs = [&](const std::string& name, const void* s, void* r) {
      RequestSpec spec = makeSpec(RequestKind::kReducescatter, name, f32, 21, s, r, Mode::kOrdered);
      spec.descriptor.blocks = blocks;
      return spec;
    };
    auto aa = [&](const std::string& name, const void* s, void* r) {
      RequestSpec spec = makeSpec(RequestKind::kAlltoall, name, f32, 0, s, r, Mode::kOrdered);
      spec.sendCounts = sendCounts;
      spec.recvCounts = recvCounts;
      return spec;
    };
    auto broadcast = [&](const std::string& name, void* buf) {
      RequestSpec spec =
          makeSpec(RequestKind::kBroadcast, name, f32, 1000, nullptr, buf, Mode::kOrdered);
      spec.descriptor.root = 1;
      return spec;
    };
    std::vector<RequestPtr> r(8);
    ASSERT_TRUE(ok(enqueue(*e.engine, rs("rs.h", rsIn.data(), rsHost.data()), &r[0])));
    ASSERT_TRUE(
        ok(enqueue(*e.engine, onDevice(rs("rs.d", rsSend.data, rsRecv.data), stream), &r[1])));
    ASSERT_TRUE(ok(enqueue(*e.engine, aa("aa.h", aaIn.data(), aaHost.data()), &r[2])));
    ASSERT_TRUE(
        ok(enqueue(*e.engine, onDevice(aa("aa.d", aaSend.data, aaRecv.data), stream), &r[3])));
    ASSERT_TRUE(ok(enqueue(*e.engine, broadcast("bc.h", bcHost.data()), &r[4])));
    ASSERT_TRUE(ok(enqueue(*e.engine, onDevice(broadcast("bc.d", bc.data), stream), &r[5])));
    ASSERT_TRUE(ok(enqueue(*e.engine,
                           makeSpec(RequestKind::kAllgather, "ag.h", f32, 333, agIn.data(),
                                    agHost.data(), Mode::kOrdered),
                           &r[6])));
    ASSERT_TRUE(ok(enqueue(*e.engine,
                           onDevice(makeSpec(RequestKind::kAllgather, "ag.d", f32, 333, agSend.data,
                                             agRecv.data, Mode::kOrdered),
                                    stream),
                           &r[7])));
    for (size_t i = 0; i < r.size(); ++i) {
      ASSERT_TRUE(ok(r[i]->wait())) << r[i]->name();
      if (r[i]->spec().marks) ASSERT_TRUE(ok(r[i]->spec().marks->waitFor(stream)));
    }
    ASSERT_TRUE(cudaOk(cudaStreamSynchronize(stream)));
    EXPECT_EQ(rsRecv.host(), rsHost);
    EXPECT_EQ(aaRecv.host(), aaHost);
    EXPECT_EQ(bc.host(), bcHost);
    EXPECT_EQ(agRecv.host(), agHost);
    EXPECT_EQ(bcHost, testing::randomBuffer(f32, 1000, 501)) << "not rank 1's buffer";
    cudaStreamDestroy(stream);
  });
}

TEST(EngineGpu, AJoinedRankAddsDeviceZerosToGrowingFusedBatches) {
  DETCOLL_SKIP_WITHOUT_GPU("a joined rank's device stand-ins");
  // Rank 2 joins; ranks 0 and 1 then allreduce tensors of growing sizes on the device and on the
  // host in one cycle: the joined rank's part is zeros on both, whatever buffers grew meanwhile.
  const std::vector<size_t> counts = {10, 1000, 70000, 300000};
  runRanks(3, [&](Communicator& comm) {
    ASSERT_TRUE(cudaOk(cudaSetDevice(0)));
    const int rank = comm.rank();
    RankEngine e(comm, options(GpuTransport::kMpi));
    int32_t last = -1;
    auto join = [&](RequestPtr* request) {
      RequestSpec spec;
      spec.name = fusion::kJoinName;
      spec.descriptor.kind = RequestKind::kJoin;
      spec.recv = &last;
      spec.checked = true;
      return enqueue(*e.engine, std::move(spec), request);
    };
    RequestPtr joined;
    if (rank == 2) {
      ASSERT_TRUE(ok(join(&joined)));
      ASSERT_TRUE(ok(joined->wait()));
      EXPECT_GE(last, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 2 has joined
    std::vector<std::vector<uint8_t>> inputs, host;
    std::vector<std::unique_ptr<DeviceBytes>> device;
    std::vector<RequestPtr> requests;
    for (size_t i = 0; i < counts.size(); ++i) {
      inputs.push_back(testing::randomBuffer(DataType::kFloat32, counts[i], 900 + 10 * i + rank));
      host.push_back(inputs.back());
      device.push_back(std::make_unique<DeviceBytes>(inputs.back()));
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      requests.emplace_back();
      ASSERT_TRUE(
          ok(enqueue(*e.engine,
                     makeSpec(RequestKind::kAllreduce, "jh" + std::to_string(i), DataType::kFloat32,
                              counts[i], host[i].data(), host[i].data(), Mode::kInvariant),
                     &requests.back())));
      requests.emplace_back();
      ASSERT_TRUE(ok(enqueue(
          *e.engine,
          onDevice(makeSpec(RequestKind::kAllreduce, "jd" + std::to_string(i), DataType::kFloat32,
                            counts[i], device[i]->data, device[i]->data, Mode::kInvariant),
                   nullptr),
          &requests.back())));
    }
    for (const RequestPtr& r : requests) {
      ASSERT_TRUE(ok(r->wait())) << r->name();
      if (r->spec().marks) ASSERT_TRUE(ok(r->spec().marks->waitFor(nullptr)));
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      EXPECT_EQ(device[i]->host(), host[i]) << "rank " << rank << " tensor " << i;
      EXPECT_NE(host[i], inputs[i]) << "tensor " << i << " was not reduced";
    }
    ASSERT_TRUE(ok(join(&joined)));
    ASSERT_TRUE(ok(joined->wait()));
  });
}

TEST(EngineGpu, HostOnOneRankDeviceOnTheOthersIsAMismatchEverywhere) {
  DETCOLL_SKIP_WITHOUT_GPU("the engine's device descriptor");
  runRanks(3, [&](Communicator& comm) {
    ASSERT_TRUE(cudaOk(cudaSetDevice(0)));
    const int rank = comm.rank();
    const auto in = testing::randomBuffer(DataType::kFloat32, 64, 700 + rank);
    std::vector<uint8_t> host = in;
    DeviceBytes device(in);
    RankEngine e(comm, options(GpuTransport::kMpi));
    RequestSpec s =
        makeSpec(RequestKind::kAllreduce, "mixed", DataType::kFloat32, 64,
                 rank == 1 ? static_cast<const void*>(host.data()) : device.data,
                 rank == 1 ? static_cast<void*>(host.data()) : device.data, Mode::kOrdered);
    RequestPtr request;
    ASSERT_TRUE(ok(enqueue(*e.engine, rank == 1 ? s : onDevice(s, nullptr), &request)));
    const Status status = request->wait();
    EXPECT_EQ(status.code(), StatusCode::kMismatch) << status.toString();
    EXPECT_NE(status.message().find("on a CUDA device"), std::string::npos) << status.message();
    EXPECT_EQ(host, in) << "the host buffer was written";
    EXPECT_EQ(device.host(), in) << "the device buffer was written";
  });
}

}  // namespace
}  // namespace detcoll
