#include "collective/collectives.h"

#include <cstdint>
#include <vector>

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

bool overlapsPartially(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (a == b || aBytes == 0 || bBytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bBytes && y < x + aBytes;
}

void checkDtype(LocalChecks& checks, int dtype, size_t count, size_t factor) {
  checks.require(isValidDataType(dtype), [&] { return "unknown dtype " + std::to_string(dtype); });
  if (!checks.status().isOk()) return;
  const size_t es = dataTypeSize(static_cast<DataType>(dtype));
  checks.require(count <= SIZE_MAX / es / factor, [&] {
    return "count " + std::to_string(count) + " overflows the size of a buffer";
  });
}

}  // namespace

Status Collectives::allreduce(Mode mode, const void* send, void* recv, size_t count, int dtype,
                              int op, const char* name, const Status& precheck) {
  LocalChecks checks(precheck);
  checkDtype(checks, dtype, count, 1);
  checks.require(isValidReduceOp(op), [&] { return "unknown reduction op " + std::to_string(op); });
  checks.require(count == 0 || send != nullptr,
                 [&] { return "sendbuf is null while count is " + std::to_string(count); });
  checks.require(count == 0 || recv != nullptr,
                 [&] { return "recvbuf is null while count is " + std::to_string(count); });
  const size_t bytes =
      checks.status().isOk() ? count * dataTypeSize(static_cast<DataType>(dtype)) : 0;
  checks.require(!overlapsPartially(send, bytes, recv, bytes),
                 [&] { return "sendbuf and recvbuf overlap without being the same buffer"; });

  CallDescription call{
      CallKind::kAllreduce, name ? name : "", static_cast<int>(mode), dtype, op, 0, count,
      checks.status()};
  const bool inlined = mode != Mode::kNative && bytes <= CallAgreement::kInlineBytes;
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, send, inlined ? bytes : 0));
  if (count == 0) return Status::ok();

  const auto type = static_cast<DataType>(dtype);
  const auto reduceOp = static_cast<ReduceOp>(op);
  const int p = comm_.size();
  if (mode == Mode::kNative) return comm_.nativeAllreduce(send, recv, count, type, reduceOp);
  if (inlined) {
    // Every rank holds every input: each folds them all, in rank order, to the same bits.
    inputs_.resize(p);
    for (int j = 0; j < p; ++j) inputs_[j] = j == comm_.rank() ? send : agreement_.payload(j);
    kernels::foldRankOrder(recv, inputs_.data(), p, count, type, reduceOp, p);
    return Status::ok();
  }
  return orderedAllreduce(comm_, send, recv, count, type, reduceOp, ordered_);
}

Status Collectives::broadcast(void* data, size_t count, int dtype, int root, const char* name,
                              const Status& precheck) {
  LocalChecks checks(precheck);
  checkDtype(checks, dtype, count, 1);
  checks.require(count == 0 || data != nullptr,
                 [&] { return "buf is null while count is " + std::to_string(count); });
  checks.require(root >= 0 && root < comm_.size(), [&] {
    return "root " + std::to_string(root) + " is not a rank of a world of " +
           std::to_string(comm_.size());
  });
  CallDescription call{CallKind::kBroadcast, name ? name : "", 0, dtype, 0, root, count,
                       checks.status()};
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, nullptr, 0));
  if (count == 0) return Status::ok();
  return comm_.broadcast(data, count * dataTypeSize(static_cast<DataType>(dtype)), root);
}

Status Collectives::allgather(const void* send, void* recv, size_t count, int dtype,
                              const char* name, const Status& precheck) {
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
  CallDescription call{CallKind::kAllgather, name ? name : "", 0, dtype, 0, 0, count,
                       checks.status()};
  DETCOLL_RETURN_IF_ERROR(agreement_.agree(comm_, call, nullptr, 0));
  if (count == 0) return Status::ok();
  return comm_.allgather(send, recv, count * dataTypeSize(static_cast<DataType>(dtype)));
}

Status Collectives::agreeOnInit(Mode mode, const Status& local) {
  CallDescription call{CallKind::kInit, "", static_cast<int>(mode), 0, 0, 0, 0, local};
  return agreement_.agree(comm_, call, nullptr, 0);
}

}  // namespace detcoll::collective
