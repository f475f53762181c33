// The C API's asynchronous requests, served by the fusion engine (fusion/engine.h): allreduce,
// grouped allreduce, broadcast and allgather enqueued by name, polled and waited for.

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/runtime.h"
#include "collective/agreement.h"
#include "common/names.h"

struct detcoll_request {
  detcoll::fusion::RequestPtr request;
};

namespace detcoll::bindings::c {
namespace {

// The engine, or why there is none.
Status engineFor(const char* call, fusion::Engine** engine) {
  if (!g_runtime) return notInitialized(call);
  if (!g_runtime->engine) {
    return Status::invalidArgument(std::string(call) + ": " + g_runtime->noEngine);
  }
  *engine = g_runtime->engine.get();
  return Status::ok();
}

bool unnamed(const char* name) {
  return name == nullptr || name[0] == '\0';
}

// The most dimensions a request's shape may have.
constexpr int kMaxDims = 64;

// Where a request runs: its process set, and this rank's rank in it and its size.
struct Placement {
  uint32_t set = 0;
  int rank = 0;
  int size = 1;
  std::shared_ptr<const std::vector<int>> members;  // of a set other than 0
};

Placement world() {
  Placement p;
  p.rank = g_runtime->comm->rank();
  p.size = g_runtime->comm->size();
  return p;
}

// The placement in process set `id`, or why this rank cannot make a request there (it fails at
// once, on this rank alone: the members do not wait for a rank that is not one).
Status placementIn(int id, const char* call, Placement* placement) {
  *placement = world();
  if (id == 0) return Status::ok();
  const auto members = id > 0 && g_runtime->engine
                           ? g_runtime->engine->processSetMembers(static_cast<uint32_t>(id))
                           : nullptr;
  if (!members) {
    return Status::invalidArgument(std::string(call) + ": process set " + std::to_string(id) +
                                   " does not exist (detcoll_process_set_add makes sets)");
  }
  const auto at = std::find(members->begin(), members->end(), placement->rank);
  if (at == members->end()) {
    return Status::invalidArgument(std::string(call) + ": rank " + std::to_string(placement->rank) +
                                   " is not a member of process set " + std::to_string(id) + " (" +
                                   collective::describeRanks(*members) + ")");
  }
  placement->set = static_cast<uint32_t>(id);
  placement->rank = static_cast<int>(at - members->begin());
  placement->size = static_cast<int>(members->size());
  placement->members = members;
  return Status::ok();
}

// What a kind adds to the spec before it is checked (counts, a shape); an error text, or "".
using SpecExtras = std::function<std::string(fusion::RequestSpec&, const Placement&)>;

// A request's spec from the caller's raw values; what is wrong with them goes into localError,
// so that the request still fails on every rank (of its process set).
fusion::RequestSpec makeSpec(fusion::RequestKind kind, const void* send, void* recv, size_t count,
                             int dtype, int op, int root, const char* name,
                             const SpecExtras& extras = nullptr,
                             const Placement& placement = world()) {
  fusion::RequestSpec spec;
  spec.name = qualifiedName(
      unnamed(name) ? "detcoll.noname." + std::to_string(g_runtime->unnamed++) : std::string(name),
      placement.set);
  spec.send = send;
  spec.recv = recv;
  fusion::Descriptor& d = spec.descriptor;
  d.kind = kind;
  d.count = count;
  d.root = root;
  d.mode = currentMode();
  d.processSet = placement.set;
  std::string extrasError = extras ? extras(spec, placement) : std::string();
  if (placement.members && kind == fusion::RequestKind::kBroadcast) {
    // The root is a rank of the world; the set runs with its rank in the set.
    const auto& m = *placement.members;
    const auto at = std::find(m.begin(), m.end(), root);
    if (at == m.end()) {
      if (extrasError.empty()) {
        extrasError = "root " + std::to_string(root) + " is not a member of process set " +
                      std::to_string(placement.set) + " (" + collective::describeRanks(m) + ")";
      }
    } else {
      d.root = static_cast<int32_t>(at - m.begin());
    }
  }
  // The raw dtype and op through the one check of a call's arguments (a descriptor holds valid
  // values only), so the engine need not check again.
  spec.localError =
      collective::checkCall(fusion::callArguments(spec, dtype, op), placement.rank, placement.size)
          .message();
  spec.checked = true;
  if (!extrasError.empty()) spec.localError = extrasError;
  if (isValidDataType(dtype)) d.type = static_cast<DataType>(dtype);
  const bool reduces =
      kind == fusion::RequestKind::kAllreduce || kind == fusion::RequestKind::kReducescatter;
  if (reduces && isValidReduceOp(op)) {
    d.op = static_cast<ReduceOp>(op);
  }
  // Host memory, or memory of one CUDA device (fusion/device_batches.h): the device request's
  // work starts after the work on the calling thread's stream (detcoll_set_cuda_stream).
  BufferPlace place;
  Status memory = place.add(send, "sendbuf");
  if (memory.isOk()) {
    memory = place.add(recv, kind == fusion::RequestKind::kBroadcast ? "buf" : "recvbuf");
  }
  if (memory.isOk() && place.device() >= 0) {
    d.device = true;
    if (placement.set != 0) {
      memory = Status::invalidArgument(
          "device memory runs in process set 0 (every rank) only; this request is in process "
          "set " +
          std::to_string(placement.set));
    } else {
      memory = fusion::DeviceMarks::make(place.device(), callingThreadCudaStream(), &spec.marks);
    }
  }
  if (!memory.isOk() && spec.localError.empty()) spec.localError = memory.message();
  return spec;
}

// Enqueues n requests, spec(i) built once the runtime is known to exist, as one group;
// handles[i] for each, all NULL on error. `unnamed`: some of them have no name.
detcoll_status_t enqueue(const char* call, size_t n,
                         const std::function<fusion::RequestSpec(size_t)>& spec, bool unnamed,
                         detcoll_handle_t* handles) {
  const Status rejected = takeRejection();
  fusion::Engine* engine = nullptr;
  if (Status s = engineFor(call, &engine); !s.isOk()) return finish(s);
  // An unnamed request is named by its order on this rank: only one thread's order is the same on
  // every rank.
  if (unnamed) {
    if (Status s = callingThreadMayPairByOrder(call); !s.isOk()) return finish(s);
  }
  std::vector<fusion::RequestSpec> specs;
  for (size_t i = 0; i < n; ++i) {
    specs.push_back(spec(i));
    if (!rejected.isOk()) specs.back().localError = rejected.message();
  }
  std::vector<fusion::RequestPtr> requests;
  const Status status = engine->enqueueGroup(std::move(specs), nullptr, &requests);
  if (!status.isOk()) return finish(status.prefixed(call));
  for (size_t i = 0; i < n; ++i) handles[i] = new detcoll_request{requests[i]};
  return DETCOLL_SUCCESS;
}

// One asynchronous request of the C API.
detcoll_status_t enqueueOne(const char* call, fusion::RequestKind kind, const void* send,
                            void* recv, size_t count, int dtype, int op, int root, const char* name,
                            detcoll_handle_t* handle) {
  if (handle == nullptr) {
    static_cast<void>(
        takeRejection());  // the call fails here, on this rank; the rejection is spent
    return finish(Status::invalidArgument(std::string(call) + ": handle is null"));
  }
  *handle = nullptr;
  return enqueue(
      call, 1, [&](size_t) { return makeSpec(kind, send, recv, count, dtype, op, root, name); },
      unnamed(name), handle);
}

// What detcoll_enqueue's descriptor adds to a spec: a reduce-scatter's blocks, an alltoall's
// counts, the shape.
SpecExtras extrasOf(const detcoll_request_desc_t& r) {
  return [&r](fusion::RequestSpec& spec, const Placement& placement) {
    const size_t p = static_cast<size_t>(placement.size);
    auto list = [&](const size_t* counts) {
      return counts == nullptr ? std::vector<uint64_t>()
                               : std::vector<uint64_t>(counts, counts + p);
    };
    fusion::Descriptor& d = spec.descriptor;
    if (r.kind == DETCOLL_REQUEST_REDUCESCATTER) {
      d.blocks = list(r.counts);
      uint64_t total = 0;
      for (uint64_t b : d.blocks) total += b;  // an overflow is the local check's to report
      d.count = total;
    } else if (r.kind == DETCOLL_REQUEST_ALLTOALL) {
      spec.sendCounts = list(r.counts);
      spec.recvCounts = list(r.recvcounts);
      d.count = 0;
    }
    if (r.shape == nullptr) return std::string();
    if (r.ndim < 0 || r.ndim > kMaxDims) {
      return "ndim is " + std::to_string(r.ndim) + "; a shape has 0 to " +
             std::to_string(kMaxDims) + " dimensions";
    }
    d.ndim = r.ndim;
    d.shape.assign(r.shape, r.shape + r.ndim);
    return std::string();
  };
}

}  // namespace
}  // namespace detcoll::bindings::c

using namespace detcoll;
using namespace detcoll::bindings::c;

extern "C" {

detcoll_status_t detcoll_allreduce_async(const void* sendbuf, void* recvbuf, size_t count,
                                         detcoll_dtype_t dtype, detcoll_op_t op, const char* name,
                                         detcoll_handle_t* handle) {
  std::shared_lock<std::shared_mutex> lock(g_runtimeMutex);
  return enqueueOne("detcoll_allreduce_async", fusion::RequestKind::kAllreduce, sendbuf, recvbuf,
                    count, static_cast<int>(dtype), static_cast<int>(op), 0, name, handle);
}

detcoll_status_t detcoll_grouped_allreduce_async(int n, const void* const* sendbufs,
                                                 void* const* recvbufs, const size_t* counts,
                                                 detcoll_dtype_t dtype, detcoll_op_t op,
                                                 const char* const* names,
                                                 detcoll_handle_t* handles) {
  std::shared_lock<std::shared_mutex> lock(g_runtimeMutex);
  const char* call = "detcoll_grouped_allreduce_async";
  if (handles == nullptr || n < 1 || sendbufs == nullptr || recvbufs == nullptr ||
      counts == nullptr) {
    static_cast<void>(
        takeRejection());  // the call fails below, on this rank; the rejection is spent
  }
  if (handles == nullptr)
    return finish(Status::invalidArgument(std::string(call) + ": handles is null"));
  if (n < 1) {
    return finish(Status::invalidArgument(std::string(call) + ": n is " + std::to_string(n) +
                                          "; a group needs at least one request"));
  }
  for (int i = 0; i < n; ++i) handles[i] = nullptr;
  if (sendbufs == nullptr || recvbufs == nullptr || counts == nullptr) {
    return finish(Status::invalidArgument(std::string(call) +
                                          ": sendbufs, recvbufs and counts must not be null"));
  }
  return enqueue(
      call, static_cast<size_t>(n),
      [&](size_t i) {
        return makeSpec(fusion::RequestKind::kAllreduce, sendbufs[i], recvbufs[i], counts[i],
                        static_cast<int>(dtype), static_cast<int>(op), 0,
                        names != nullptr ? names[i] : nullptr);
      },
      names == nullptr || std::any_of(names, names + n, [](const char* s) { return unnamed(s); }),
      handles);
}

detcoll_status_t detcoll_broadcast_async(void* buf, size_t count, detcoll_dtype_t dtype, int root,
                                         const char* name, detcoll_handle_t* handle) {
  std::shared_lock<std::shared_mutex> lock(g_runtimeMutex);
  return enqueueOne("detcoll_broadcast_async", fusion::RequestKind::kBroadcast, nullptr, buf, count,
                    static_cast<int>(dtype), 0, root, name, handle);
}

detcoll_status_t detcoll_allgather_async(const void* sendbuf, void* recvbuf, size_t count,
                                         detcoll_dtype_t dtype, const char* name,
                                         detcoll_handle_t* handle) {
  std::shared_lock<std::shared_mutex> lock(g_runtimeMutex);
  return enqueueOne("detcoll_allgather_async", fusion::RequestKind::kAllgather, sendbuf, recvbuf,
                    count, static_cast<int>(dtype), 0, 0, name, handle);
}

detcoll_status_t detcoll_enqueue(const detcoll_request_desc_t* request, detcoll_handle_t* handle) {
  std::shared_lock<std::shared_mutex> lock(g_runtimeMutex);
  const char* call = "detcoll_enqueue";
  if (handle == nullptr || request == nullptr) {
    static_cast<void>(takeRejection());  // the call fails here, on this rank
    return finish(Status::invalidArgument(std::string(call) + ": " +
                                          (handle == nullptr ? "handle" : "request") + " is null"));
  }
  *handle = nullptr;
  const detcoll_request_desc_t& r = *request;
  const int kind = static_cast<int>(r.kind);
  if (kind < DETCOLL_REQUEST_ALLREDUCE || kind > DETCOLL_REQUEST_ALLTOALL) {
    static_cast<void>(takeRejection());
    return finish(Status::invalidArgument(std::string(call) + ": unknown request kind " +
                                          std::to_string(kind)));
  }
  Placement placement;
  if (!g_runtime) {
    static_cast<void>(takeRejection());
    return finish(notInitialized(call));
  }
  if (Status s = placementIn(r.process_set, call, &placement); !s.isOk()) {
    static_cast<void>(takeRejection());
    return finish(s);
  }
  return enqueue(
      call, 1,
      [&](size_t) {
        // The C kinds are the engine's, one apart.
        return makeSpec(static_cast<fusion::RequestKind>(kind + 1), r.sendbuf, r.recvbuf, r.count,
                        static_cast<int>(r.dtype), static_cast<int>(r.op), r.root, r.name,
                        extrasOf(r), placement);
      },
      unnamed(r.name), handle);
}

detcoll_status_t detcoll_poll(detcoll_handle_t handle, int* done) {
  if (handle == nullptr || done == nullptr) {
    return finish(Status::invalidArgument("detcoll_poll: handle and done must not be null"));
  }
  *done = handle->request->done() ? 1 : 0;
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_wait(detcoll_handle_t handle) {
  if (handle == nullptr) return finish(Status::invalidArgument("detcoll_wait: handle is null"));
  Status status = handle->request->wait();
  // A device request: the calling thread's stream waits for its result (or the host, with none).
  // A failed one may have left work queued (a failure after the collective): the host waits for
  // it, so that its buffers are free when this returns.
  const auto& marks = handle->request->spec().marks;
  if (marks) {
    const Status waited = marks->waitFor(status.isOk() ? callingThreadCudaStream() : nullptr);
    if (status.isOk()) status = waited;
  }
  delete handle;
  return finish(status);
}

}  // extern "C"
