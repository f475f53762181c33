#include "collective/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collective/allgather.h"
#include "collective/broadcast.h"
#include "collective/call_checks.h"
#include "collective/invariant_allreduce.h"
#include "collective/mode_allreduce.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"

namespace detcoll::collective {
namespace {

// The local checks of a call: the caller's own failure if it found one, else checkCall's verdict,
// then (device buffers) whether they are on the device path's device.
Status localChecks(const Status& precheck, const CallArguments& call, int device,
                   Collectives& collectives) {
  if (!precheck.isOk()) return precheck;
  Communicator& comm = collectives.communicator();
  DETCOLL_RETURN_IF_ERROR(checkCall(call, comm.rank(), comm.size()));
  if (device >= 0) return collectives.devicePath().checkDevice(device);
  return Status::ok();
}

}  // namespace

Status Collectives::allreduce(Mode mode, const void* send, void* recv, size_t count, int dtype,
                              int op, const char* name, const Status& precheck, int device) {
  const void* leaves[1] = {send};
  return reduce(mode, leaves, 1, recv, count, dtype, op, name, precheck, true, device);
}

Status Collectives::allreduceLeaves(Mode mode, const void* const* leaves, int nleaves, void* recv,
                                    size_t count, int dtype, int op, const char* name,
                                    const Status& precheck, int device) {
  return reduce(mode, leaves, nleaves, recv, count, dtype, op, name, precheck, false, device);
}

Status Collectives::reduce(Mode mode, const void* const* leaves, int nleaves, void* recv,
                           size_t count, int dtype, int op, const char* name,
                           const Status& precheck, bool single, int device) {
  CallArguments args;
  args.leaves = leaves;
  args.nleaves = nleaves;
  args.namedLeaves = !single;
  args.recv = recv;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  const Status local = localChecks(precheck, args, device, *this);
  const int n = local.isOk() ? nleaves : 0;
  const size_t bytes = local.isOk() ? count * dataTypeSize(static_cast<DataType>(dtype)) : 0;
  const auto type = static_cast<DataType>(dtype);
  const auto reduceOp = static_cast<ReduceOp>(op);

  // What travels inline with the call description: in ordered mode this rank's contribution
  // (its leaves folded first when it has several), in invariant mode all its leaves. Device
  // memory never does: it is not readable here.
  const void* payload = nullptr;
  size_t payloadBytes = 0;
  const bool ok = local.isOk() && device < 0;
  if (ok && mode == Mode::kOrdered && bytes <= CallAgreement::kInlineBytes) {
    payload = contribution(leaves, n, count, type, reduceOp);
    payloadBytes = bytes;
  } else if (ok && mode == Mode::kInvariant && n * bytes <= CallAgreement::kInlineBytes) {
    staged_.resize(n * bytes);
    for (int l = 0; l < n; ++l) std::memcpy(staged_.data() + l * bytes, leaves[l], bytes);
    payload = staged_.data();
    payloadBytes = n * bytes;
  }
  CallDescription call;
  call.kind = CallKind::kAllreduce;
  call.name = name ? name : "";
  call.mode = static_cast<int>(mode);
  call.dtype = dtype;
  call.op = op;
  call.leaves = std::max(n, 1);
  call.count = count;
  call.device = device >= 0;
  call.local = local;
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, payload, payloadBytes));
  const int p = comm_.size();
  int64_t total = 0;
  for (int j = 0; j < p; ++j) total += agreement_.leaves(j);
  if (mode == Mode::kInvariant && total > kernels::kMaxLeaves) {
    return Status::invalidArgument("allreduce '" + std::string(name ? name : "") +
                                   "': " + std::to_string(total) +
                                   " leaves in total; the invariant mode sums at most " +
                                   std::to_string(kernels::kMaxLeaves) + " exactly");
  }
  if (count == 0) return Status::ok();
  if (device >= 0) {
    return devicePath().allreduce(mode, leaves, n, recv, count, type, reduceOp, total, device,
                                  [&](const void* const* hostLeaves, void* hostRecv) {
                                    return reduceHost(mode, hostLeaves, n, hostRecv, count, type,
                                                      reduceOp, total, nullptr);
                                  });
  }
  return reduceHost(mode, leaves, n, recv, count, type, reduceOp, total, payload);
}

Status Collectives::reduceHost(Mode mode, const void* const* leaves, int n, void* recv,
                               size_t count, DataType type, ReduceOp reduceOp, int64_t total,
                               const void* payload) {
  const int p = comm_.size();
  const size_t bytes = count * dataTypeSize(type);
  switch (mode) {
    case Mode::kNative:
      return modeAllreduce(comm_, mode, contribution(leaves, n, count, type, reduceOp), recv, count,
                           type, reduceOp, ordered_, total);
    case Mode::kOrdered: {
      if (payload != nullptr) {
        // Every rank holds every contribution: each folds them all, in rank order, to the same
        // bits.
        inputs_.resize(p);
        for (int j = 0; j < p; ++j) inputs_[j] = agreement_.payload(j);
        kernels::foldRankOrder(recv, inputs_.data(), p, count, type, reduceOp, total);
        return Status::ok();
      }
      return modeAllreduce(comm_, mode, contribution(leaves, n, count, type, reduceOp), recv, count,
                           type, reduceOp, ordered_, total);
    }
    case Mode::kInvariant: {
      bool allInline = true;
      for (int j = 0; j < p; ++j) {
        allInline = allInline && agreement_.payloadBytes(j) == agreement_.leaves(j) * bytes;
      }
      if (!allInline) {
        return invariantAllreduce(comm_, leaves, n, recv, count, type, reduceOp, total,
                                  ordered_.segmentBytes);
      }
      // Every rank holds every leaf: each reduces them all locally, to the same bits.
      inputs_.clear();
      for (int j = 0; j < p; ++j) {
        const char* base = static_cast<const char*>(agreement_.payload(j));
        for (int l = 0; l < agreement_.leaves(j); ++l) inputs_.push_back(base + l * bytes);
      }
      kernels::invariantReduceLocal(recv, inputs_.data(), static_cast<int>(total), count, type,
                                    reduceOp);
      return Status::ok();
    }
  }
  return Status::internal("unknown mode " + std::to_string(static_cast<int>(mode)));
}

// This rank's contribution in ordered and native mode: its one leaf, or its leaves folded in
// order (summed for average) into a scratch buffer.
const void* Collectives::contribution(const void* const* leaves, int n, size_t count, DataType type,
                                      ReduceOp op) {
  if (n == 1) return leaves[0];
  staged_.resize(count * dataTypeSize(type));
  kernels::foldRankOrder(staged_.data(), leaves, n, count, type,
                         op == ReduceOp::kAverage ? ReduceOp::kSum : op, 1);
  return staged_.data();
}

Status Collectives::broadcast(void* data, size_t count, int dtype, int root, const char* name,
                              const Status& precheck, int device) {
  CallArguments args;
  args.kind = CallKind::kBroadcast;
  args.recv = data;
  args.count = count;
  args.dtype = dtype;
  args.root = root;
  CallDescription call;
  call.kind = CallKind::kBroadcast;
  call.name = name ? name : "";
  call.dtype = dtype;
  call.root = root;
  call.count = count;
  call.device = device >= 0;
  call.local = localChecks(precheck, args, device, *this);
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, nullptr, 0));
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
  CallArguments args;
  args.kind = CallKind::kAllgather;
  args.send = send;
  args.recv = recv;
  args.count = count;
  args.dtype = dtype;
  CallDescription call;
  call.kind = CallKind::kAllgather;
  call.name = name ? name : "";
  call.dtype = dtype;
  call.count = count;
  call.device = device >= 0;
  call.local = localChecks(precheck, args, device, *this);
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, nullptr, 0));
  if (count == 0) return Status::ok();
  const size_t bytes = count * dataTypeSize(static_cast<DataType>(dtype));
  if (device >= 0) return devicePath().allgather(send, recv, bytes, device);
  AllgatherOptions o;
  o.send = send;
  o.recv = recv;
  o.bytes = bytes;
  return collective::allgather(comm_, o);
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
  return agreement_.agree(comm_, call, nullptr, 0);
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
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, &mine, sizeof mine));
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
