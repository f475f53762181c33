// The fusion engine's batches (engine.h): the collectives a cycle's batches run (or a bucket's,
// on the fast path), their trace records and timeline phases, and the completion of their
// requests.

#include <cctype>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "collective/allgather.h"
#include "collective/allreduce.h"
#include "collective/alltoall.h"
#include "collective/broadcast.h"
#include "collective/reduce_scatter.h"
#include "common/names.h"
#include "fusion/engine.h"

namespace detcoll::fusion {
namespace {

using collective::transport::Communicator;

std::string kibibytes(size_t bytes) {
  return std::to_string(bytes / 1024) + " KiB";
}

}  // namespace

DeviceBatches& Engine::deviceBatches() {
  if (!device_) {
    DeviceBatches::Options o;
    o.gpuTransport = options_.gpuTransport;
    o.segmentBytes = options_.segmentBytes;
    o.invariantTransport = options_.invariantTransport;
    device_ = std::make_unique<DeviceBatches>(comm_, o);
  }
  return *device_;
}

Status Engine::allreduce(Communicator& comm, const Descriptor& d, const void* const* send,
                         void* recv, size_t count) {
  collective::AllreduceOptions o;
  o.mode = d.mode;
  o.leaves = send;
  o.recv = recv;
  o.count = count;
  o.type = d.type;
  o.op = d.op;
  o.segmentBytes = options_.segmentBytes;
  o.invariantTransport = options_.invariantTransport;
  return collective::allreduce(comm, o);
}

void Engine::execute(const std::vector<RequestPtr>& ready, size_t fusionThresholdBytes) {
  PlanOptions plan;
  plan.fusionThresholdBytes = fusionThresholdBytes;
  plan.directBytes = options_.directBytes;
  runBatches(planBatches(ready, plan));
}

Status Engine::didNotComplete(const Request& request, const Status& why) {
  return Status(why.code(), std::string(requestKindName(request.descriptor().kind)) + " " +
                                quotedName(request.name()) + " did not complete: " + why.message());
}

Status Engine::stoppedBy(const std::string& what) {
  return Status::internal("the fusion engine stopped: " + what);
}

void Engine::runBatches(const std::vector<Batch>& batches) {
  size_t next = 0;
  try {
    for (; next < batches.size(); ++next) runAndFinish(batches[next]);
  } catch (...) {
    std::string what = "an exception that is not a std::exception";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    const Status why = stoppedBy(what);  // loop() stops the engine with it
    for (; next < batches.size(); ++next) {
      for (const RequestPtr& request : batches[next].requests) {
        try {
          finish({request}, didNotComplete(*request, why));  // a request done already is left
        } catch (...) {
          // Its callback threw again: it is complete all the same (finish), and so are the rest.
        }
      }
    }
    throw;
  }
}

void Engine::runAndFinish(const Batch& batch) {
  // The collective trace (docs/design.md, "The debugger"): in-place requests overwrite inputs.
  // Device batches are not fingerprinted: that would read device memory from the host.
  const bool fingerprinted = options_.trace && !batch.requests[0]->descriptor().device;
  std::vector<TraceRecord> traced = fingerprinted ? traceInputs(batch) : std::vector<TraceRecord>();
  const Status status = runBatch(batch);
  if (fingerprinted) traceOutputs(batch, std::move(traced), status);
  if (status.code() != StatusCode::kTimeout) {
    finish(batch.requests, status);
    return;
  }
  // A failure of the job during the collective: each request says which it was.
  const std::string fused =
      batch.requests.size() > 1
          ? " (fused with " + std::to_string(batch.requests.size() - 1) + " others)"
          : std::string();
  for (const RequestPtr& request : batch.requests) {
    finish({request}, status.prefixed(std::string(requestKindName(request->descriptor().kind)) +
                                      " " + quotedName(request->name()) + fused));
  }
}

Status Engine::runBatch(const Batch& batch) {
  const RequestPtr& lead = batch.requests[0];
  const Descriptor& d = lead->descriptor();
  const RequestSpec& spec = lead->spec();
  const Clock::time_point begin = Clock::now();
  Communicator* comm = communicatorOf(d.processSet);
  if (comm == nullptr) {
    return Status::internal("this rank runs a request of process set " +
                            std::to_string(d.processSet) + ", which it is not a member of");
  }
  Status status;
  if (d.device) {
    status = deviceBatches().run(batch, joinDevice_.load());
    if (timeline_.active()) {
      const std::string detail =
          "on a CUDA device" + (batch.requests.size() > 1
                                    ? ", fused with " + std::to_string(batch.requests.size() - 1) +
                                          " others, " + kibibytes(batch.bytes)
                                    : ", " + kibibytes(d.bytes()));
      for (const RequestPtr& request : batch.requests) {
        timeline_.phase(request->name(), "DEVICE_QUEUED", begin, Clock::now(), detail);
      }
    }
    return status;
  }
  if (d.kind == RequestKind::kJoin) {
    // Every rank has joined: the join returns the last of them, and this rank trains again.
    *static_cast<int32_t*>(spec.recv) = lastJoined_;
    joined_.store(false);
    return Status::ok();
  }
  if (d.kind == RequestKind::kBroadcast) {
    collective::BroadcastOptions o;
    o.data = spec.recv;
    o.bytes = d.bytes();
    o.root = d.root;
    status = collective::broadcast(*comm, o);
  } else if (d.kind == RequestKind::kAllgather) {
    collective::AllgatherOptions o;
    o.send = spec.send;
    o.recv = spec.recv;
    o.bytes = d.bytes();
    status = collective::allgather(*comm, o);
  } else if (d.kind == RequestKind::kReducescatter) {
    collective::ReduceScatterOptions o;
    o.mode = d.mode;
    o.send = spec.send;
    o.recv = spec.recv;
    o.blocks.assign(d.blocks.begin(), d.blocks.end());
    o.type = d.type;
    o.op = d.op;
    o.segmentBytes = options_.segmentBytes;
    status = collective::reduceScatter(*comm, o);
  } else if (d.kind == RequestKind::kAlltoall) {
    collective::AlltoallOptions o;
    o.send = spec.send;
    o.recv = spec.recv;
    o.sendCounts = spec.sendCounts;
    o.recvCounts = spec.recvCounts;
    o.elementBytes = dataTypeSize(d.type);
    status = collective::alltoall(*comm, o);
  } else if (!batch.fused) {
    status = allreduce(*comm, d, &spec.send, spec.recv, d.count);
  } else {
    if (fusionBuffer_.size() < batch.bytes) fusionBuffer_.resize(batch.bytes);
    char* buffer = fusionBuffer_.data();
    size_t offset = 0;
    for (const RequestPtr& request : batch.requests) {
      const size_t bytes = request->descriptor().bytes();
      std::memcpy(buffer + offset, request->spec().send, bytes);
      offset += bytes;
    }
    const Clock::time_point copiedIn = Clock::now();
    const void* fused = buffer;
    status = allreduce(*comm, d, &fused, buffer, batch.bytes / dataTypeSize(d.type));
    const Clock::time_point reduced = Clock::now();
    if (status.isOk()) {
      offset = 0;
      for (const RequestPtr& request : batch.requests) {
        const size_t bytes = request->descriptor().bytes();
        std::memcpy(request->spec().recv, buffer + offset, bytes);
        offset += bytes;
      }
    }
    if (timeline_.active()) {
      const Clock::time_point end = Clock::now();
      const std::string detail = "fused with " + std::to_string(batch.requests.size() - 1) +
                                 " others, " + kibibytes(batch.bytes);
      for (const RequestPtr& request : batch.requests) {
        timeline_.phase(request->name(), "COPY_IN", begin, copiedIn, detail);
        timeline_.phase(request->name(), "ALLREDUCE", copiedIn, reduced, detail);
        timeline_.phase(request->name(), "COPY_OUT", reduced, end, detail);
      }
    }
    return status;
  }
  if (timeline_.active()) {
    std::string phase = requestKindName(d.kind);
    for (char& c : phase) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    timeline_.phase(lead->name(), phase.c_str(), begin, Clock::now(), kibibytes(d.bytes()));
  }
  return status;
}

}  // namespace detcoll::fusion
