#include "collective/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collective/allgather.h"
#include "collective/allreduce.h"
#include "collective/broadcast.h"
#include "collective/call_checks.h"
#include "common/names.h"
#include "kernels/fixed_point.h"

namespace detcoll::collective {
namespace {

// The local checks of a call: the caller's own failure if it found one, else checkCall's verdict,
// then (device buffers) whether they are on the device path's device.
Status localChecks(const Status& precheck, const CallArguments& call, int device,
                   Collectives& collectives) {
  if (!precheck.isOk()) return precheck;
  transport::Communicator& comm = collectives.communicator();
  DETCOLL_RETURN_IF_ERROR(checkCall(call, comm.rank(), comm.size()));
  if (device >= 0) return collectives.devicePath().checkDevice(device);
  return Status::ok();
}

}  // namespace

Status Collectives::allreduce(Mode mode, const void* send, void* recv, size_t count, int dtype,
                              int op, const char* name, const Status& precheck, int device) {
  const void* leaves[1] = {send};
  return settle(reduce(mode, leaves, 1, recv, count, dtype, op, name, precheck, true, device),
                "allreduce", name);
}

Status Collectives::allreduceLeaves(Mode mode, const void* const* leaves, int nleaves, void* recv,
                                    size_t count, int dtype, int op, const char* name,
                                    const Status& precheck, int device) {
  return settle(
      reduce(mode, leaves, nleaves, recv, count, dtype, op, name, precheck, false, device),
      "allreduce", name);
}

Status Collectives::reduce(Mode mode, const void* const* leaves, int nleaves, void* recv,
                           size_t count, int dtype, int op, const char* name,
                           const Status& precheck, bool single, int device) {
  const CallArguments args = reductionCall(leaves, nleaves, single, recv, count, dtype, op);
  const Status local = localChecks(precheck, args, device, *this);
  const int n = local.isOk() ? nleaves : 0;
  const size_t bytes = local.isOk() ? count * dataTypeSize(static_cast<DataType>(dtype)) : 0;

  // Small calls carry this rank's leaves inline with the call description, so that every rank
  // holds every leaf after the agreement and reduces them locally. Device memory never does: it
  // is not readable here; native mode neither: the backend's allreduce is its point.
  const bool inlined = local.isOk() && device < 0 && reducesGatheredLeaves(mode) &&
                       n * bytes <= CallAgreement::kInlineBytes;
  DETCOLL_RETURN_IF_ERROR(agree(args, name, static_cast<int>(mode), std::max(n, 1), local, device,
                                inlined ? leaves : nullptr, inlined ? n : 0, bytes));
  const int p = comm_.size();
  int64_t total = 0;
  for (int j = 0; j < p; ++j) total += agreement_.leaves(j);
  if (Status counted = checkTotalLeaves(mode, total); !counted.isOk()) {
    return counted.prefixed("allreduce " + quotedName(name ? name : ""));
  }
  if (count == 0) return Status::ok();
  AllreduceOptions o;
  o.mode = mode;
  o.leaves = leaves;
  o.nleaves = n;
  o.recv = recv;
  o.count = count;
  o.type = static_cast<DataType>(dtype);
  o.op = static_cast<ReduceOp>(op);
  o.totalLeaves = total;
  o.segmentBytes = segmentBytes_;
  o.invariantTransport = invariantTransport_;
  if (device >= 0) return devicePath().allreduce(o, device);
  bool allInline = inlined;
  for (int j = 0; j < p && allInline; ++j) {
    allInline = agreement_.payloadBytes(j) == agreement_.leaves(j) * bytes;
  }
  if (allInline) {
    gathered_.leaves.clear();
    gathered_.counts.clear();
    for (int j = 0; j < p; ++j) {
      const char* base = static_cast<const char*>(agreement_.payload(j));
      gathered_.counts.push_back(agreement_.leaves(j));
      for (int l = 0; l < agreement_.leaves(j); ++l) {
        // This rank's own leaves are read where the caller keeps them.
        gathered_.leaves.push_back(j == comm_.rank() ? leaves[l] : base + l * bytes);
      }
    }
    o.gathered = &gathered_;
  }
  return collective::allreduce(comm_, o);
}

Status Collectives::broadcast(void* data, size_t count, int dtype, int root, const char* name,
                              const Status& precheck, int device) {
  return settle(runBroadcast(data, count, dtype, root, name, precheck, device), "broadcast", name);
}

Status Collectives::runBroadcast(void* data, size_t count, int dtype, int root, const char* name,
                                 const Status& precheck, int device) {
  const CallArguments args = broadcastCall(data, count, dtype, root);
  DETCOLL_RETURN_IF_ERROR(
      agree(args, name, 0, 1, localChecks(precheck, args, device, *this), device));
  if (count == 0) return Status::ok();
  const size_t bytes = count * dataTypeSize(static_cast<DataType>(dtype));
  if (device >= 0) return devicePath().broadcast(data, bytes, root, device);
  BroadcastOptions o;
  o.data = data;
  o.bytes = bytes;
  o.root = root;
  return collective::broadcast(comm_, o);
}

Status Collectives::allgather(const void* send, void* recv, size_t count, int dtype,
                              const char* name, const Status& precheck, int device) {
  return settle(runAllgather(send, recv, count, dtype, name, precheck, device), "allgather", name);
}

Status Collectives::runAllgather(const void* send, void* recv, size_t count, int dtype,
                                 const char* name, const Status& precheck, int device) {
  const CallArguments args = allgatherCall(send, recv, count, dtype);
  DETCOLL_RETURN_IF_ERROR(
      agree(args, name, 0, 1, localChecks(precheck, args, device, *this), device));
  if (count == 0) return Status::ok();
  const size_t bytes = count * dataTypeSize(static_cast<DataType>(dtype));
  if (device >= 0) return devicePath().allgather(send, recv, bytes, device);
  AllgatherOptions o;
  o.send = send;
  o.recv = recv;
  o.bytes = bytes;
  return collective::allgather(comm_, o);
}

Status Collectives::agree(const CallArguments& args, const char* name, int mode, int leaves,
                          const Status& local, int device, const void* const* inlined, int ninlined,
                          size_t leafBytes) {
  DETCOLL_RETURN_IF_ERROR(comm_.health());
  CallDescription call;
  call.kind = args.kind;
  call.name = name ? name : "";
  call.mode = mode;
  call.dtype = args.dtype;
  call.op = args.op;
  call.root = args.root;
  call.leaves = leaves;
  call.count = args.count;
  call.device = device >= 0;
  call.local = local;
  return agreement_.agree(comm_, call, inlined, ninlined, leafBytes);
}

Status Collectives::settle(const Status& status, const char* kind, const char* name) {
  // A call that succeeded here still fails when a rank gave up meanwhile: this rank may have
  // completed it from messages that rank sent before it left (docs/design.md, "Failures").
  const Status s = status.isOk() ? comm_.health() : status;
  if (s.code() != StatusCode::kTimeout) return s;
  return s.prefixed(std::string(kind) +
                    (name != nullptr && *name != 0 ? " " + quotedName(name) : std::string()));
}

void Collectives::setCudaStream(void* stream) {
  stream_ = stream;
  if (device_) device_->setStream(stream);
}

DevicePath& Collectives::devicePath() {
  if (!device_) {
    device_ = std::make_unique<DevicePath>(comm_, gpuTransport_);
    device_->setStream(stream_);
  }
  return *device_;
}

Status Collectives::agreeOnInit(Mode mode, const Status& local) {
  CallDescription call;
  call.kind = CallKind::kInit;
  call.mode = static_cast<int>(mode);
  call.local = local;
  return settle(agreement_.agree(comm_, call, nullptr, 0), "init", nullptr);
}

Status Collectives::agreeOnValue(const std::string& callName, const std::string& what,
                                 const Status& local, const AgreedValue& mine,
                                 const std::function<std::string(const AgreedValue&)>& describe,
                                 std::vector<AgreedValue>* all) {
  CallDescription call;
  call.kind = CallKind::kValue;
  call.name = callName;
  call.count = 1;
  call.local = local;
  DETCOLL_RETURN_IF_ERROR(
      settle(agreement_.agree(comm_, call, &mine, sizeof mine), callName.c_str(), nullptr));
  std::vector<AgreedValue> values(comm_.size());
  for (int r = 0; r < comm_.size(); ++r) {
    if (agreement_.payloadBytes(r) != sizeof(AgreedValue)) {
      return Status::internal("rank " + std::to_string(r) + " sent a value of " +
                              std::to_string(agreement_.payloadBytes(r)) + " bytes");
    }
    std::memcpy(&values[r], agreement_.payload(r), sizeof(AgreedValue));
  }
  DETCOLL_RETURN_IF_ERROR(compareValues(what, values, describe));
  if (all != nullptr) *all = std::move(values);
  return Status::ok();
}

}  // namespace detcoll::collective
