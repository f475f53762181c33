#include "collective/transport/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "kernels/fold.h"

namespace detcoll::collective::transport {
namespace {

// MPI counts are int: larger messages go as several, matched in order (same peer and tag).
constexpr size_t kMaxMessage = size_t{1} << 30;

// One MPI request, or several for a message above kMaxMessage.
class MpiTransfer : public Transfer {
 public:
  explicit MpiTransfer(Status posted) : posted_(std::move(posted)) {}
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
  Status wait(size_t* bytes) override {
    if (done_) return posted_;
    done_ = true;
    if (!posted_.isOk()) return posted_;
    size_t total = 0;
    for (size_t i = 0; i < count_; ++i) {
      MPI_Request& request = i == 0 ? first_ : more_[i - 1];
      MPI_Status status;
      const int rc = MPI_Wait(&request, &status);
      if (rc != MPI_SUCCESS) {
        posted_ = mpiError("MPI_Wait", rc);
        return posted_;
      }
      if (bytes != nullptr) {
        int received = 0;
        MPI_Get_count(&status, MPI_BYTE, &received);
        total += static_cast<size_t>(received);
      }
    }
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
  if (!finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Transfer> MpiCommunicator::isend(const void* data, size_t bytes, int peer,
                                                 int tag) {
  auto result = std::make_unique<MpiTransfer>(Status::ok());
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
  auto result = std::make_unique<MpiTransfer>(Status::ok());
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
  const int rc = MPI_Barrier(comm_);
  return rc == MPI_SUCCESS ? Status::ok() : mpiError("MPI_Barrier", rc);
}

Status MpiCommunicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    return Status::internal("MPI's allreduce sums; an average is divided afterwards by its caller");
  }
  const size_t es = dataTypeSize(type);
  MPI_Op mop = mpiReduceOp(op);
  if (type == DataType::kFloat16) mop = halfMpiOp<DataType::kFloat16>(op);
  if (type == DataType::kBFloat16) mop = halfMpiOp<DataType::kBFloat16>(op);
  const size_t maxCount = kMaxMessage / es;
  for (size_t offset = 0; offset < count; offset += maxCount) {
    const int n = static_cast<int>(std::min(maxCount, count - offset));
    const void* in = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + offset * es;
    const int rc =
        MPI_Allreduce(in, static_cast<char*>(recv) + offset * es, n, mpiDataType(type), mop, comm_);
    if (rc != MPI_SUCCESS) return mpiError("MPI_Allreduce", rc);
  }
  return Status::ok();
}

Status MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  char* p = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kMaxMessage) {
    const int n = static_cast<int>(std::min(kMaxMessage, bytes - offset));
    const int rc = MPI_Bcast(p + offset, n, MPI_BYTE, root, comm_);
    if (rc != MPI_SUCCESS) return mpiError("MPI_Bcast", rc);
  }
  return Status::ok();
}

Status MpiCommunicator::allgather(const void* send, void* recv, size_t bytes) {
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
  const int rc = MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                               MPI_BYTE, comm_);
  return rc == MPI_SUCCESS ? Status::ok() : mpiError("MPI_Allgather", rc);
}

}  // namespace detcoll::collective::transport
