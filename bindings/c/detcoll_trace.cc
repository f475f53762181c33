// The C API's part of the collective trace (fusion/trace.h; docs/design.md, "The debugger"):
// opening it at init, and the records of the blocking collectives. The fusion engine records its
// own requests (fusion/engine_trace.cc).

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings/c/runtime.h"
#include "collective/call_checks.h"
#include "common/fingerprint.h"
#include "common/logging.h"

namespace detcoll::bindings::c {
namespace {

// Variables that only say where to write what is observed: two runs traced to other directories
// have the same settings (detcoll/debug's OBSERVERS).
constexpr const char* kObservers[] = {"DETCOLL_DEBUG_RECORD", "DETCOLL_TRACE",
                                      "DETCOLL_TIMELINE",     "DETCOLL_LOG",
                                      "HOROVOD_TIMELINE",     "HOROVOD_LOG"};

// Every DETCOLL_* and HOROVOD_* variable of the environment but the observers, by name.
std::vector<std::pair<std::string, std::string>> traceSettings() {
  std::vector<std::pair<std::string, std::string>> settings;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t equals = text.find('=');
    if (equals == std::string::npos) continue;
    if (text.rfind("DETCOLL_", 0) != 0 && text.rfind("HOROVOD_", 0) != 0) continue;
    const auto observer = [&](const char* prefix) { return text.rfind(prefix, 0) == 0; };
    if (std::any_of(std::begin(kObservers), std::end(kObservers), observer)) continue;
    settings.emplace_back(text.substr(0, equals), text.substr(equals + 1));
  }
  std::sort(settings.begin(), settings.end());
  return settings;
}

// The record of a call whose arguments pass the call's own check (else the call fails and has
// none), before its buffers are read: kind, name, mode, dtype, count and the place of its buffers.
TracedCall begin(const char* kind, const collective::CallArguments& args, const char* name,
                 int device) {
  TracedCall call;
  if (!collective::checkCall(args, g_runtime->comm->rank(), g_runtime->comm->size()).isOk()) {
    return call;
  }
  fusion::TraceRecord r;
  r.kind = kind;
  r.name = name != nullptr ? name : "";
  r.mode = currentMode();
  r.type = static_cast<DataType>(args.dtype);
  r.count = args.count;
  r.device = device >= 0;
  call.record = std::move(r);
  call.output = args.recv;
  return call;
}

size_t bytesOf(const fusion::TraceRecord& r, size_t elements) {
  return elements * dataTypeSize(r.type);
}

}  // namespace

namespace {
int g_traceSessions = 0;  // traces started in this process (an init after finalize starts another)
}  // namespace

Status prepareTrace(Runtime& runtime) {
  const std::string& dir = runtime.config.engine.traceDir;
  if (dir.empty()) return Status::ok();
  auto trace = std::make_shared<fusion::Trace>();
  DETCOLL_RETURN_IF_ERROR(trace->prepare(dir, runtime.comm->rank(), g_traceSessions + 1));
  runtime.trace = trace;
  runtime.config.engine.trace = std::move(trace);
  return Status::ok();
}

void startTrace(Runtime& runtime, Mode mode) {
  if (!runtime.trace) return;
  const Status started = runtime.trace->start(runtime.comm->size(), mode, traceSettings());
  if (started.isOk()) {
    ++g_traceSessions;
    return;
  }
  // The directory was writable a moment ago (prepareTrace): the job runs, untraced, and says so.
  DETCOLL_LOG(kWarn) << started.message() << "; this run is not traced";
}

TracedCall traceReduction(const void* const* leaves, int nleaves, bool single, void* recv,
                          size_t count, int dtype, int op, const char* name, int device) {
  const collective::CallArguments args =
      collective::reductionCall(leaves, nleaves, single, recv, count, dtype, op);
  TracedCall call = begin(single ? "allreduce" : "allreduce_leaves", args, name, device);
  if (!call.record) return call;
  fusion::TraceRecord& r = *call.record;
  r.op = static_cast<ReduceOp>(op);
  r.leaves = nleaves;
  call.outputBytes = bytesOf(r, count);
  if (!r.device) {
    for (int l = 0; l < nleaves; ++l) r.inputs.push_back(fingerprint(leaves[l], call.outputBytes));
  }
  return call;
}

TracedCall traceBroadcast(void* buf, size_t count, int dtype, int root, const char* name,
                          int device) {
  TracedCall call =
      begin("broadcast", collective::broadcastCall(buf, count, dtype, root), name, device);
  if (!call.record) return call;
  call.outputBytes = bytesOf(*call.record, count);
  // Off the root, buf is only written: it has no input.
  if (!call.record->device && root == g_runtime->comm->rank()) {
    call.record->inputs.push_back(fingerprint(buf, call.outputBytes));
  }
  return call;
}

TracedCall traceAllgather(const void* send, void* recv, size_t count, int dtype, const char* name,
                          int device) {
  TracedCall call =
      begin("allgather", collective::allgatherCall(send, recv, count, dtype), name, device);
  if (!call.record) return call;
  const size_t bytes = bytesOf(*call.record, count);
  call.outputBytes = bytes * static_cast<size_t>(g_runtime->comm->size());
  if (!call.record->device) call.record->inputs.push_back(fingerprint(send, bytes));
  return call;
}

void appendTraced(TracedCall& call, const Status& status) {
  if (!g_runtime || !g_runtime->trace) return;
  if (!status.isOk()) {
    call.record->error = status.message();
  } else if (!call.record->device) {
    call.record->output = fingerprint(call.output, call.outputBytes);
  }
  g_runtime->trace->append(std::move(*call.record));
}

}  // namespace detcoll::bindings::c
