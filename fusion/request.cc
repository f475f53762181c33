#include "fusion/request.h"

#include <algorithm>

#include "common/names.h"

namespace detcoll::fusion {

const char* requestKindName(RequestKind kind) {
  switch (kind) {
    case RequestKind::kAllreduce:
      return "allreduce";
    case RequestKind::kBroadcast:
      return "broadcast";
    case RequestKind::kAllgather:
      return "allgather";
    case RequestKind::kReducescatter:
      return "reducescatter";
    case RequestKind::kAlltoall:
      return "alltoall";
    case RequestKind::kJoin:
      return "join";
  }
  return "unknown request";
}

std::string describeRequest(const std::string& name, const Descriptor& d) {
  std::string what = std::string(requestKindName(d.kind)) + " " + quotedName(name);
  if (d.processSet != 0) what += " in process set " + std::to_string(d.processSet);
  return what;
}

std::string describe(const Descriptor& d) {
  std::string text = std::string(requestKindName(d.kind)) + " " + dataTypeName(d.type);
  if (d.kind != RequestKind::kAlltoall) text += "[" + std::to_string(d.count) + "]";
  if (d.ndim >= 0) {
    // Allgather and alltoall carry the dimensions beyond the first.
    const bool rows = d.kind == RequestKind::kAllgather || d.kind == RequestKind::kAlltoall;
    text += rows ? " rows of shape (" : " shape (";
    for (size_t i = 0; i < d.shape.size(); ++i) {
      text += (i > 0 ? ", " : "") + std::to_string(d.shape[i]);
    }
    text += d.shape.size() == 1 ? ",)" : ")";
  }
  if (d.kind == RequestKind::kReducescatter) {
    text += " in blocks of";
    for (size_t i = 0; i < d.blocks.size(); ++i) {
      text += (i > 0 ? ", " : " ") + std::to_string(d.blocks[i]);
    }
  }
  if (d.kind == RequestKind::kAllreduce || d.kind == RequestKind::kReducescatter) {
    text += " " + reduceOpName(d.op) + " " + modeName(d.mode);
  }
  if (d.kind == RequestKind::kBroadcast) text += " root " + std::to_string(d.root);
  if (d.processSet != 0) text += " in process set " + std::to_string(d.processSet);
  if (d.device) text += " on a CUDA device";
  if (d.groupSize > 1) text += " in a group of " + std::to_string(d.groupSize);
  return text;
}

bool Request::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) polled_.store(true);
  return done_;
}

Status Request::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_) {
    waiting_.fetch_add(1);
    cv_.wait(lock, [&] { return done_; });
    waiting_.fetch_sub(1);
  }
  return status_;
}

bool Request::settle(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completing_) return false;
    completing_ = true;
    status_ = std::move(status);
    // Without a callback it is done now; release() only wakes the waiters.
    if (!callback_) done_ = true;
  }
  // The callback runs before waiters wake, so that a binding's callback has finished with the
  // request's buffers when wait() returns.
  if (callback_) callback_(status_);
  return true;
}

void Request::release() {
  if (callback_) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  // A waiter that saw done_ false under the lock is asleep on cv_ by now, or will see it true.
  cv_.notify_all();
}

collective::CallArguments callArguments(const RequestSpec& spec, int dtype, int op) {
  const Descriptor& d = spec.descriptor;
  collective::CallArguments call;
  switch (d.kind) {
    case RequestKind::kAllreduce:
      call.kind = collective::CallKind::kAllreduce;
      break;
    case RequestKind::kBroadcast:
      call.kind = collective::CallKind::kBroadcast;
      break;
    case RequestKind::kAllgather:
      call.kind = collective::CallKind::kAllgather;
      break;
    case RequestKind::kReducescatter:
      call.kind = collective::CallKind::kReducescatter;
      call.counts = d.blocks.data();
      call.ncounts = d.blocks.size();
      break;
    case RequestKind::kJoin:
      call.kind = collective::CallKind::kBroadcast;  // nothing to check: no buffers, root 0
      call.count = 0;
      return call;
    case RequestKind::kAlltoall:
      call.kind = collective::CallKind::kAlltoall;
      call.counts = spec.sendCounts.data();
      call.recvCounts = spec.recvCounts.data();
      // Both lists must have one entry per rank: a shorter one is checked as missing entries.
      call.ncounts = std::min(spec.sendCounts.size(), spec.recvCounts.size());
      if (spec.sendCounts.size() != spec.recvCounts.size()) call.recvCounts = nullptr;
      break;
  }
  call.leaves = &spec.send;
  call.send = spec.send;
  call.recv = spec.recv;
  call.count = d.count;
  call.dtype = dtype;
  call.op = op;
  call.root = d.root;
  return call;
}

}  // namespace detcoll::fusion
