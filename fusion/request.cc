#include "fusion/request.h"

namespace detcoll::fusion {

const char* requestKindName(RequestKind kind) {
  switch (kind) {
    case RequestKind::kAllreduce:
      return "allreduce";
    case RequestKind::kBroadcast:
      return "broadcast";
    case RequestKind::kAllgather:
      return "allgather";
  }
  return "unknown request";
}

std::string describe(const Descriptor& d) {
  std::string text = std::string(requestKindName(d.kind)) + " " + dataTypeName(d.type) + "[" +
                     std::to_string(d.count) + "]";
  if (d.kind == RequestKind::kAllreduce) text += " " + reduceOpName(d.op) + " " + modeName(d.mode);
  if (d.kind == RequestKind::kBroadcast) text += " root " + std::to_string(d.root);
  if (d.groupSize > 1) text += " in a group of " + std::to_string(d.groupSize);
  return text;
}

bool Request::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

Status Request::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

void Request::complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completing_) return;
    completing_ = true;
    status_ = std::move(status);
  }
  // The callback runs before waiters wake, so that a binding's callback has finished with the
  // request's buffers when wait() returns.
  if (callback_) callback_(status_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
}

collective::CallArguments callArguments(const RequestSpec& spec, int dtype, int op) {
  const Descriptor& d = spec.descriptor;
  collective::CallArguments call;
  call.kind = d.kind == RequestKind::kAllreduce   ? collective::CallKind::kAllreduce
              : d.kind == RequestKind::kBroadcast ? collective::CallKind::kBroadcast
                                                  : collective::CallKind::kAllgather;
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
