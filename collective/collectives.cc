#include "collective/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collective/allgather.h"
#include "collective/broadcast.h"
#include "collective/buffers.h"
#include "collective/invariant_allreduce.h"
#include "collective/mode_allreduce.h"
#include "kernels/fixed_point.h"
#include "kernels/fold.h"

namespace detcoll::collective {
namespace {

// Checks one rank can make on its own; the first failure wins. The message is built only on
// failure: these checks run on every call, small ones included.
class LocalChecks {
 public:
  explicit LocalChecks(const Status& precheck) : status_(precheck) {}
  template <typename Message>
  void require(bool condition, Message message) {
    if (status_.isOk() && !condition) status_ = Status::invalidArgument(message());
  }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

void checkDtype(LocalChecks& checks, int dtype, size_t count, size_t factor) {
  checks.require(isValidDataType(dtype), [&] { return "unknown dtype " + std::to_string(dtype); });
  if (!checks.status().isOk()) return;
  const size_t es = dataTypeSize(static_cast<DataType>(dtype));
  checks.require(count <= SIZE_MAX / es / factor, [&] {
    return "count " + std::to_string(count) + " overflows the size of a buffer";
  });
}

// Device buffers must be on the device of the device path.
void checkDevice(LocalChecks& checks, int device, Collectives& collectives) {
  if (device < 0 || !checks.status().isOk()) return;
  const Status onDevice = collectives.devicePath().checkDevice(device);
  checks.require(onDevice.isOk(), [&] { return onDevice.message(); });
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
  LocalChecks checks(precheck);
  checkDtype(checks, dtype, count, 1);
  checks.require(isValidReduceOp(op), [&] { return "unknown reduction op " + std::to_string(op); });
  checks.require(leaves != nullptr, [&] { return "leaves is null"; });
  checks.require(nleaves >= 1 && nleaves <= kMaxLeavesPerRank, [&] {
    return "nleaves is " + std::to_string(nleaves) + "; a rank contributes 1 to " +
           std::to_string(kMaxLeavesPerRank) + " leaves";
  });
  const int n = checks.status().isOk() ? nleaves : 0;
  auto leafName = [&](int l) {
    return single ? std::string("sendbuf") : "leaves[" + std::to_string(l) + "]";
  };
  for (int l = 0; l < n; ++l) {
    checks.require(count == 0 || leaves[l] != nullptr, [&] {
      return leafName(l) + " is null while count is " + std::to_string(count);
    });
  }
  checks.require(count == 0 || recv != nullptr,
                 [&] { return "recvbuf is null while count is " + std::to_string(count); });
  const size_t bytes =
      checks.status().isOk() ? count * dataTypeSize(static_cast<DataType>(dtype)) : 0;
  for (int l = 0; l < n; ++l) {
    checks.require(!overlapsPartially(leaves[l], bytes, recv, bytes), [&] {
      return leafName(l) + " and recvbuf overlap without being the same buffer";
    });
  }
  checkDevice(checks, device, *this);
  const auto type = static_cast<DataType>(dtype);
  const auto reduceOp = static_cast<ReduceOp>(op);

  // What travels inline with the call description: in ordered mode this rank's contribution
  // (its leaves folded first when it has several), in invariant mode all its leaves. Device
  // memory never does: it is not readable here.
  const void* payload = nullptr;
  size_t payloadBytes = 0;
  const bool ok = checks.status().isOk() && device < 0;
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
  call.local = checks.status();
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
  LocalChecks checks(precheck);
  checkDtype(checks, dtype, count, 1);
  checks.require(count == 0 || data != nullptr,
                 [&] { return "buf is null while count is " + std::to_string(count); });
  checks.require(root >= 0 && root < comm_.size(), [&] {
    return "root " + std::to_string(root) + " is not a rank of a world of " +
           std::to_string(comm_.size());
  });
  checkDevice(checks, device, *this);
  CallDescription call;
  call.kind = CallKind::kBroadcast;
  call.name = name ? name : "";
  call.dtype = dtype;
  call.root = root;
  call.count = count;
  call.device = device >= 0;
  call.local = checks.status();
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
  LocalChecks checks(precheck);
  const size_t p = static_cast<size_t>(comm_.size());
  checkDtype(checks, dtype, count, p);
  checks.require(count == 0 || send != nullptr,
                 [&] { return "sendbuf is null while count is " + std::to_string(count); });
  checks.require(count == 0 || recv != nullptr,
                 [&] { return "recvbuf is null while count is " + std::to_string(count); });
  if (checks.status().isOk() && count > 0) {
    const size_t bytes = count * dataTypeSize(static_cast<DataType>(dtype));
    const char* slot = static_cast<const char*>(recv) + comm_.rank() * bytes;
    checks.require(send == slot || !overlapsPartially(send, bytes, recv, bytes * p),
                   [&] { return "sendbuf overlaps recvbuf other than at this rank's slot"; });
  }
  checkDevice(checks, device, *this);
  CallDescription call;
  call.kind = CallKind::kAllgather;
  call.name = name ? name : "";
  call.dtype = dtype;
  call.count = count;
  call.device = device >= 0;
  call.local = checks.status();
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
