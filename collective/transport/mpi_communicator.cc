#include "collective/transport/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/fold.h"

namespace detcoll::collective::transport {
namespace {

// MPI counts are int: larger messages go as several, matched in order (same peer and tag).
constexpr size_t kMaxMessage = size_t{1} << 30;

// One MPI request, or several for a message above kMaxMessage.
class MpiTransfer : public Transfer {
 public:
  MpiTransfer(MpiCommunicator& comm, MpiCommunicator::Waiting what, int peer)
      : comm_(comm), what_(what), peer_(peer) {}
  void add(MPI_Request request) {
    if (count_ == 0) {
      first_ = request;
    } else {
      more_.push_back(request);
    }
    ++count_;
  }
  ~MpiTransfer() override {
    if (!done_) (void)wait(nullptr);
  }
  Status wait(size_t* bytes) override { return waitWithGrace(bytes, 0); }
  Status waitWithGrace(size_t* bytes, double graceSeconds) override {
    if (done_) return posted_;
    done_ = true;
    if (!posted_.isOk()) return posted_;
    size_t total = 0;
    const char* call = what_ == MpiCommunicator::Waiting::kSend ? "MPI_Isend" : "MPI_Irecv";
    for (size_t i = 0; i < count_; ++i) {
      MPI_Request& request = i == 0 ? first_ : more_[i - 1];
      MPI_Status status;
      // After a failure the other requests are still released (await on an abandoned
      // communicator returns at once).
      const Status s = comm_.await(&request, &status, what_, peer_, call, graceSeconds);
      if (!s.isOk()) {
        if (posted_.isOk()) posted_ = s;
        continue;
      }
      if (bytes != nullptr) {
        int received = 0;
        MPI_Get_count(&status, MPI_BYTE, &received);
        total += static_cast<size_t>(received);
      }
    }
    if (!posted_.isOk()) return posted_;
    if (bytes != nullptr) *bytes = total;
    return Status::ok();
  }
  bool test(Status* status) override {
    if (!done_ && posted_.isOk()) {
      for (size_t i = 0; i < count_; ++i) {
        MPI_Request& request = i == 0 ? first_ : more_[i - 1];
        if (request == MPI_REQUEST_NULL) continue;
        int flag = 0;
        const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          posted_ = mpiError("MPI_Test", rc);
          break;
        }
        if (!flag) return false;
      }
    }
    done_ = true;
    *status = posted_;
    return true;
  }
  void fail(Status status) { posted_ = std::move(status); }

 private:
  MpiCommunicator& comm_;
  const MpiCommunicator::Waiting what_;
  const int peer_;
  Status posted_;
  MPI_Request first_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> more_;
  size_t count_ = 0;
  bool done_ = false;
};

// inout = in op inout, for the 16-bit float types MPI does not know.
template <DataType kType, ReduceOp kOp>
void halfOp(void* in, void* inout, int* length, MPI_Datatype*) {
  const void* inputs[2] = {in, inout};
  kernels::foldRankOrder(inout, inputs, 2, static_cast<size_t>(*length), kType, kOp, 1);
}

template <DataType kType>
MPI_Op halfMpiOp(ReduceOp op) {
  static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static const bool created = [] {
    MPI_Op_create(&halfOp<kType, ReduceOp::kSum>, 1, &ops[0]);
    MPI_Op_create(&halfOp<kType, ReduceOp::kMin>, 1, &ops[1]);
    MPI_Op_create(&halfOp<kType, ReduceOp::kMax>, 1, &ops[2]);
    return true;
  }();
  (void)created;
  return op == ReduceOp::kMin ? ops[1] : op == ReduceOp::kMax ? ops[2] : ops[0];
}

}  // namespace

MPI_Datatype mpiDataType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpiReduceOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_OP_NULL;
}

Status mpiError(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status::backend(std::string(call) + " failed: " + std::string(text, length));
}

Status MpiCommunicator::create(MPI_Comm parent, std::unique_ptr<MpiCommunicator>* out) {
  MPI_Comm dup = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(parent, &dup);
  if (rc != MPI_SUCCESS) return mpiError("MPI_Comm_dup", rc);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  out->reset(new MpiCommunicator(dup));
  return Status::ok();
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // An abandoned communicator may still have operations in flight that no peer will complete: it
  // is left to the end of the process.
  if (!finalized && !isBroken_.load()) MPI_Comm_free(&comm_);
  releaseBoard();
}

Status MpiCommunicator::broken() const {
  if (!isBroken_.load(std::memory_order_acquire)) return Status::ok();
  std::lock_guard<std::mutex> lock(brokenMutex_);
  return broken_;
}

bool MpiCommunicator::setBroken(const Status& why) {
  std::lock_guard<std::mutex> lock(brokenMutex_);
  if (isBroken_.load()) return false;
  broken_ = why;
  isBroken_.store(true, std::memory_order_release);
  return true;
}

void MpiCommunicator::abandon(const Status& why) {
  if (board_) {
    // Every peer maps the board and sees the notice at once; of ranks giving up together, every
    // one takes the first reason posted, so that all name the same rank.
    setBroken(board_->postNotice(why));
    return;
  }
  if (!setBroken(why)) return;
  // The notice: the status code, then the text, which names the rank that stopped answering
  // (passed on as it is, so that every rank names that one). Its buffer lives as long as the
  // process, since the sends are not waited for (MPI_Request_free).
  auto* notice = new std::string(1, static_cast<char>(why.code()));
  *notice += why.message();
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request request;
    if (MPI_Isend(notice->data(), static_cast<int>(notice->size()), MPI_BYTE, peer, kMaxTag, comm_,
                  &request) == MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
}

Status MpiCommunicator::health() {
  if (isBroken_.load(std::memory_order_acquire)) return broken();
  if (board_) {
    // Every rank that gives up posts on the board (abandon()): one load instead of a probe.
    if (!board_->noticed()) return Status::ok();
    setBroken(board_->notice());
    return broken();
  }
  // A matched probe: of two threads that see one notice, only one receives it.
  int flag = 0;
  MPI_Message message;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, kMaxTag, comm_, &flag, &message, &status) != MPI_SUCCESS ||
      !flag) {
    return broken();
  }
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  std::string notice(static_cast<size_t>(std::max(bytes, 1)), '\0');
  MPI_Mrecv(notice.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  int code = static_cast<unsigned char>(notice[0]);
  if (code <= static_cast<int>(StatusCode::kSuccess) ||
      code > static_cast<int>(StatusCode::kInternal)) {
    code = static_cast<int>(StatusCode::kTimeout);
  }
  // Told, not giving up itself: no notice of its own (the rank that gave up told every rank).
  setBroken(Status(static_cast<StatusCode>(code), notice.substr(1)));
  return broken();
}

void MpiCommunicator::release(MPI_Request* request, Waiting what) {
  if (*request == MPI_REQUEST_NULL) return;
  switch (what) {
    case Waiting::kReceive:
      // Cancelled, so that a message arriving later is not written into the caller's buffer.
      MPI_Cancel(request);
      MPI_Request_free(request);
      break;
    case Waiting::kSend:
      MPI_Request_free(request);  // the message may still go; its buffer is not ours to hold
      break;
    case Waiting::kCollective:
      // Neither cancelled nor freed (MPI allows neither for collectives): left in flight.
      *request = MPI_REQUEST_NULL;
      break;
  }
}

Status MpiCommunicator::await(MPI_Request* request, MPI_Status* status, Waiting what, int peer,
                              const char* call, double graceSeconds) {
  if (isBroken_.load(std::memory_order_acquire)) {
    release(request, what);
    return broken();
  }
  if (patience_.limitSeconds <= 0 && patience_.warnSeconds <= 0) {
    const int rc = MPI_Wait(request, status == nullptr ? MPI_STATUS_IGNORE : status);
    return rc == MPI_SUCCESS ? Status::ok() : mpiError("MPI_Wait", rc);
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point nextLook = start + std::chrono::milliseconds(1);
  double nextWarning = patience_.warnSeconds;
  const double limit = patience_.limitSeconds > 0 ? patience_.limitSeconds + graceSeconds : 0;
  auto whom = [&] {
    switch (what) {
      case Waiting::kReceive:
        return "a message from rank " + std::to_string(peer);
      case Waiting::kSend:
        return "rank " + std::to_string(peer) + " to take a message";
      case Waiting::kCollective:
        break;
    }
    return std::string("the other ranks in ") + call;
  };
  for (unsigned polls = 1;; ++polls) {
    int done = 0;
    const int rc = MPI_Test(request, &done, status == nullptr ? MPI_STATUS_IGNORE : status);
    if (rc != MPI_SUCCESS) return mpiError("MPI_Test", rc);
    if (done) return Status::ok();
    // The clock only every 32 polls: a read can cost as much as the poll (a system call where the
    // virtual machine's clock source is not the TSC), and a small call waits a few polls only.
    if (polls % 32 != 0) continue;
    const Clock::time_point now = Clock::now();
    if (now < nextLook) continue;
    nextLook = now + std::chrono::milliseconds(1);
    const Status healthy = health();
    if (!healthy.isOk()) {
      release(request, what);
      return healthy;
    }
    const double waited = std::chrono::duration<double>(now - start).count();
    if (limit > 0 && waited >= limit) {
      const std::string who = what == Waiting::kCollective ? std::string("a rank in ") + call
                                                           : "rank " + std::to_string(peer);
      const std::string grace =
          graceSeconds > 0 ? ", and " + secondsText(graceSeconds) + " for a forwarded message" : "";
      abandon(Status::timeout(who + " stopped answering: rank " + std::to_string(rank_) +
                              " waited " + secondsText(limit) + " for " + whom() +
                              " (the stall limit, DETCOLL_STALL_SHUTDOWN_SECONDS" + grace +
                              "); detcoll stops communicating"));
      release(request, what);
      return broken();
    }
    if (patience_.warnSeconds > 0 && waited >= nextWarning) {
      nextWarning += patience_.warnSeconds;
      if (patience_.warn) {
        patience_.warn("stall: rank " + std::to_string(rank_) + " has waited " +
                       secondsText(waited) + " for " + whom());
      }
    }
  }
}

Status MpiCommunicator::started(const char* call, int rc, MPI_Request* request) {
  if (rc != MPI_SUCCESS) return mpiError(call, rc);
  return await(request, nullptr, Waiting::kCollective, -1, call);
}

std::unique_ptr<Transfer> MpiCommunicator::isend(const void* data, size_t bytes, int peer,
                                                 int tag) {
  countSend(tag);
  auto result = std::make_unique<MpiTransfer>(*this, Waiting::kSend, peer);
  if (isBroken_.load(std::memory_order_acquire)) {
    result->fail(broken());
    return result;
  }
  const char* p = static_cast<const char*>(data);
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxMessage, bytes - offset);
    MPI_Request request;
    const int rc = MPI_Isend(p + offset, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &request);
    if (rc != MPI_SUCCESS) {
      result->fail(mpiError("MPI_Isend", rc));
      break;
    }
    result->add(request);
    offset += n;
  } while (offset < bytes);
  return result;
}

std::unique_ptr<Transfer> MpiCommunicator::irecv(void* data, size_t capacity, int peer, int tag) {
  auto result = std::make_unique<MpiTransfer>(*this, Waiting::kReceive, peer);
  if (isBroken_.load(std::memory_order_acquire)) {
    result->fail(broken());
    return result;
  }
  char* p = static_cast<char*>(data);
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxMessage, capacity - offset);
    MPI_Request request;
    const int rc = MPI_Irecv(p + offset, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &request);
    if (rc != MPI_SUCCESS) {
      result->fail(mpiError("MPI_Irecv", rc));
      break;
    }
    result->add(request);
    offset += n;
  } while (offset < capacity);
  return result;
}

Status MpiCommunicator::barrier() {
  DETCOLL_RETURN_IF_ERROR(broken());
  MPI_Request request;
  return started("MPI_Barrier", MPI_Ibarrier(comm_, &request), &request);
}

Status MpiCommunicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    return Status::internal("MPI's allreduce sums; an average is divided afterwards by its caller");
  }
  DETCOLL_RETURN_IF_ERROR(broken());
  const size_t es = dataTypeSize(type);
  MPI_Op mop = mpiReduceOp(op);
  if (type == DataType::kFloat16) mop = halfMpiOp<DataType::kFloat16>(op);
  if (type == DataType::kBFloat16) mop = halfMpiOp<DataType::kBFloat16>(op);
  const size_t maxCount = kMaxMessage / es;
  for (size_t offset = 0; offset < count; offset += maxCount) {
    const int n = static_cast<int>(std::min(maxCount, count - offset));
    const void* in = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + offset * es;
    MPI_Request request;
    DETCOLL_RETURN_IF_ERROR(started("MPI_Allreduce",
                                    MPI_Iallreduce(in, static_cast<char*>(recv) + offset * es, n,
                                                   mpiDataType(type), mop, comm_, &request),
                                    &request));
  }
  return Status::ok();
}

Status MpiCommunicator::allreduceMaxUnsigned(void* data, size_t count, size_t bytes) {
  DETCOLL_RETURN_IF_ERROR(broken());
  const MPI_Datatype type = bytes == 1 ? MPI_UINT8_T : MPI_UINT16_T;
  const size_t maxCount = kMaxMessage / bytes;
  for (size_t offset = 0; offset < count; offset += maxCount) {
    const int n = static_cast<int>(std::min(maxCount, count - offset));
    MPI_Request request;
    DETCOLL_RETURN_IF_ERROR(
        started("MPI_Allreduce",
                MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + offset * bytes, n, type,
                               MPI_MAX, comm_, &request),
                &request));
  }
  return Status::ok();
}

Status MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  DETCOLL_RETURN_IF_ERROR(broken());
  char* p = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kMaxMessage) {
    const int n = static_cast<int>(std::min(kMaxMessage, bytes - offset));
    MPI_Request request;
    DETCOLL_RETURN_IF_ERROR(
        started("MPI_Bcast", MPI_Ibcast(p + offset, n, MPI_BYTE, root, comm_, &request), &request));
  }
  return Status::ok();
}

Status MpiCommunicator::allgather(const void* send, void* recv, size_t bytes) {
  DETCOLL_RETURN_IF_ERROR(broken());
  char* out = static_cast<char*>(recv);
  if (bytes > kMaxMessage) {
    // MPI counts are int: each rank's block as a broadcast of its own, in segments.
    if (send != out + rank_ * bytes) std::memcpy(out + rank_ * bytes, send, bytes);
    for (int root = 0; root < size_; ++root) {
      DETCOLL_RETURN_IF_ERROR(broadcast(out + root * bytes, bytes, root));
    }
    return Status::ok();
  }
  const void* in = send == out + rank_ * bytes ? MPI_IN_PLACE : send;
  MPI_Request request;
  return started("MPI_Allgather",
                 MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, recv,
                                static_cast<int>(bytes), MPI_BYTE, comm_, &request),
                 &request);
}

}  // namespace detcoll::collective::transport
