// The C API's process sets and join (Horovod's), over the fusion engine (fusion/engine.h).

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bindings/c/detcoll.h"
#include "bindings/c/runtime.h"
#include "common/config.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#include "collective/agreement.h"
#include "common/hash.h"

namespace detcoll::bindings::c {
namespace {

// The engine, for a call that needs it, or why there is none.
Status engineFor(const char* call) {
  if (!g_runtime) return notInitialized(call);
  if (!g_runtime->engine) {
    return Status::invalidArgument(std::string(call) + ": " + g_runtime->noEngine);
  }
  return Status::ok();
}

// The members of a new set from the caller's list: sorted, every one a rank, no duplicates.
Status membersOf(const int* ranks, int n, int size, std::vector<int>* members) {
  if (ranks == nullptr || n < 1) {
    return Status::invalidArgument("a process set needs at least one rank (ranks is " +
                                   std::string(ranks == nullptr ? "null" : "not null") +
                                   ", nranks " + std::to_string(n) + ")");
  }
  members->assign(ranks, ranks + n);
  std::sort(members->begin(), members->end());
  for (int r : *members) {
    if (r < 0 || r >= size) {
      return Status::invalidArgument("rank " + std::to_string(r) + " is not a rank of a world of " +
                                     std::to_string(size));
    }
  }
  const auto twice = std::adjacent_find(members->begin(), members->end());
  if (twice != members->end()) {
    return Status::invalidArgument("rank " + std::to_string(*twice) + " is given twice");
  }
  return Status::ok();
}

// The agreed value of a process set call: the hash of its members and their number.
collective::AgreedValue setValue(const std::vector<int>& members) {
  collective::AgreedValue v;
  v.present = !members.empty();
  Fnv1a h;
  for (int r : members) h.add(&r, sizeof r);
  v.words[0] = h.value();
  v.words[1] = members.size();
  return v;
}

std::string describeSet(const collective::AgreedValue& v) {
  if (!v.present) return "no valid set";
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(v.words[0]));
  return "a set of " + std::to_string(v.words[1]) + " ranks (hash " + hash + ")";
}

Status addProcessSet(const int* ranks, int n, int* id) {
  const char* call = "detcoll_process_set_add";
  DETCOLL_RETURN_IF_ERROR(enterBlockingCall(call));
  Runtime& runtime = *g_runtime;
  std::vector<int> members;
  Status local = engineFor(call);
  if (local.isOk() && id == nullptr) local = Status::invalidArgument("id is null");
  if (local.isOk()) local = membersOf(ranks, n, runtime.comm->size(), &members);
  if (local.isOk()) {
    for (const auto& [other, ranksOf] : runtime.processSets) {
      if (ranksOf == members) {
        local = Status::invalidArgument("process set " + std::to_string(other) +
                                        " has these ranks already (" +
                                        collective::describeRanks(members) + ")");
      }
    }
  }
  if (!local.isOk()) members.clear();
  // Every rank, members or not, must add the same set: ranks that disagree fail together.
  DETCOLL_RETURN_IF_ERROR(runtime.collectives->agreeOnValue(
      "process set", "the ranks of the process set", local, setValue(members), describeSet));
  const uint32_t set = runtime.nextProcessSet++;
  const int me = runtime.comm->rank();
  const bool member = std::binary_search(members.begin(), members.end(), me);
  // The engine learns the members before the communicator exists (MPI_Comm_split below returns
  // nowhere before every rank has entered it), so that no rank's engine meets a request of the set
  // before it knows the set.
  DETCOLL_RETURN_IF_ERROR(runtime.engine->addProcessSet(set, members, nullptr));
  MPI_Comm split = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(runtime.comm->handle(), member ? 0 : MPI_UNDEFINED, me, &split);
  std::unique_ptr<collective::transport::MpiCommunicator> comm;
  Status made =
      rc == MPI_SUCCESS ? Status::ok() : collective::transport::mpiError("MPI_Comm_split", rc);
  if (made.isOk() && member) {
    made = collective::transport::MpiCommunicator::create(split, &comm);
    MPI_Comm_free(&split);
  }
  if (made.isOk() && comm) {
    collective::transport::Patience patience;
    patience.warnSeconds = runtime.config.engine.stallWarningSeconds;
    patience.limitSeconds = runtime.config.engine.stallShutdownSeconds;
    comm->setPatience(patience);
  }
  made = collective::agreeOnStatus(*runtime.comm, made);
  if (!made.isOk()) {
    runtime.engine->removeProcessSet(set);
    return made.prefixed(call);
  }
  if (comm) {
    // Every member made its communicator: the board is the members' collective.
    chooseAgreementTransport(*comm, runtime.config.collective.agreementTransport, "a process set");
    runtime.engine->attachCommunicator(set, std::move(comm));
  }
  runtime.processSets[set] = members;
  *id = static_cast<int>(set);
  return Status::ok();
}

Status removeProcessSet(int id) {
  const char* call = "detcoll_process_set_remove";
  DETCOLL_RETURN_IF_ERROR(enterBlockingCall(call));
  Runtime& runtime = *g_runtime;
  Status local = engineFor(call);
  const auto it = runtime.processSets.find(static_cast<uint32_t>(id));
  if (local.isOk() && (id <= 0 || it == runtime.processSets.end())) {
    local = Status::invalidArgument(
        "process set " + std::to_string(id) +
        (id == 0 ? " is every rank; it cannot be removed" : " does not exist"));
  }
  collective::AgreedValue value;
  value.present = local.isOk();
  value.words[0] = static_cast<uint64_t>(id);
  DETCOLL_RETURN_IF_ERROR(runtime.collectives->agreeOnValue(
      "process set removal", "the process set to remove", local, value,
      [](const collective::AgreedValue& v) {
        return v.present ? "set " + std::to_string(v.words[0]) : std::string("no valid set");
      }));
  runtime.engine->removeProcessSet(static_cast<uint32_t>(id));
  runtime.processSets.erase(static_cast<uint32_t>(id));
  return Status::ok();
}

}  // namespace
}  // namespace detcoll::bindings::c

using namespace detcoll;
using namespace detcoll::bindings::c;

extern "C" {

detcoll_status_t detcoll_process_set_add(const int* ranks, int nranks, int* id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::shared_lock<std::shared_mutex> runtime(g_runtimeMutex);
  return finish(leaveBlockingCall(addProcessSet(ranks, nranks, id)));
}

detcoll_status_t detcoll_process_set_remove(int id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::shared_lock<std::shared_mutex> runtime(g_runtimeMutex);
  return finish(leaveBlockingCall(removeProcessSet(id)));
}

int detcoll_process_set_rank(int id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_runtime) return -1;
  if (id == 0) return g_runtime->comm->rank();
  const auto it = g_runtime->processSets.find(static_cast<uint32_t>(id));
  if (id < 0 || it == g_runtime->processSets.end()) return -1;
  const auto& m = it->second;
  const auto at = std::find(m.begin(), m.end(), g_runtime->comm->rank());
  return at == m.end() ? -1 : static_cast<int>(at - m.begin());
}

int detcoll_process_set_size(int id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_runtime) return -1;
  if (id == 0) return g_runtime->comm->size();
  const auto it = g_runtime->processSets.find(static_cast<uint32_t>(id));
  if (id < 0 || it == g_runtime->processSets.end()) return -1;
  return static_cast<int>(it->second.size());
}

detcoll_status_t detcoll_join(int* last_rank) {
  fusion::RequestPtr request;
  int32_t last = -1;
  {
    std::shared_lock<std::shared_mutex> runtime(g_runtimeMutex);
    const char* call = "detcoll_join";
    if (Status s = engineFor(call); !s.isOk()) return finish(s);
#if DETCOLL_WITH_CUDA
    // The device of this thread: where a joined rank's part of device allreduces is made until
    // it has made a device request of its own.
    int devices = 0;
    int device = -1;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 &&
        cudaGetDevice(&device) == cudaSuccess) {
      g_runtime->engine->setJoinDevice(device);
    }
    (void)cudaGetLastError();
#endif
    fusion::RequestSpec spec;
    spec.name = fusion::kJoinName;
    spec.descriptor.kind = fusion::RequestKind::kJoin;
    spec.descriptor.mode = currentMode();
    spec.recv = &last;
    spec.checked = true;
    if (Status s = g_runtime->engine->enqueue(std::move(spec), nullptr, &request); !s.isOk()) {
      return finish(s.prefixed(call));
    }
  }
  // Waits outside the runtime lock, as detcoll_wait does.
  const Status status = request->wait();
  if (status.isOk() && last_rank != nullptr) *last_rank = last;
  return finish(status);
}

}  // extern "C"
