#include "collective/transport/nccl_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

namespace detcoll::collective::transport {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclTransport::UniqueId));

ncclComm_t handle(void* comm) {
  return static_cast<ncclComm_t>(comm);
}
cudaStream_t streamOf(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

ncclDataType_t ncclTypeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclInt8;
}

}  // namespace

Status NcclTransport::check(int result, const char* call) const {
  const auto r = static_cast<ncclResult_t>(result);
  if (r == ncclSuccess) return Status::ok();
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(r);
  const char* last = comm_ != nullptr ? ncclGetLastError(handle(comm_)) : ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  return Status::backend(message);
}

Status NcclTransport::uniqueId(UniqueId* id) {
  ncclUniqueId raw;
  const ncclResult_t r = ncclGetUniqueId(&raw);
  if (r != ncclSuccess) {
    return Status::backend(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  std::memcpy(id->data(), &raw, sizeof(raw));
  return Status::ok();
}

Status NcclTransport::create(const UniqueId& id, int rank, int size,
                             std::unique_ptr<NcclTransport>* transport) {
  int device = -1;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) {
    return Status::backend(std::string("no CUDA device for NCCL: ") + cudaGetErrorString(e));
  }
  ncclUniqueId raw;
  std::memcpy(&raw, id.data(), sizeof(raw));
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, size, raw, rank);
  if (r != ncclSuccess) {
    return Status::backend(std::string("ncclCommInitRank (rank ") + std::to_string(rank) + " of " +
                           std::to_string(size) + ") failed: " + ncclGetErrorString(r));
  }
  transport->reset(new NcclTransport(comm, rank, size, device));
  return Status::ok();
}

NcclTransport::~NcclTransport() {
  if (comm_ != nullptr) ncclCommDestroy(handle(comm_));
}

Status NcclTransport::complete(ExchangeGroup& group) {
  group.clear();  // the stream orders what comes next after the group
  return Status::ok();
}

Status NcclTransport::post(ExchangeGroup& group, void* stream) {
  const std::vector<Send>& sends = group.sends;
  const std::vector<Recv>& recvs = group.recvs;
  if (sends.empty() && recvs.empty()) return Status::ok();
  // A failure inside the group still closes it, so that the communicator stays usable.
  Status status = check(ncclGroupStart(), "ncclGroupStart");
  if (!status.isOk()) return status;
  for (const Recv& r : recvs) {
    if (!status.isOk()) break;
    status = check(ncclRecv(r.data, r.bytes, ncclInt8, r.peer, handle(comm_), streamOf(stream)),
                   "ncclRecv");
  }
  for (const Send& s : sends) {
    if (!status.isOk()) break;
    status = check(ncclSend(s.data, s.bytes, ncclInt8, s.peer, handle(comm_), streamOf(stream)),
                   "ncclSend");
  }
  const Status ended = check(ncclGroupEnd(), "ncclGroupEnd");
  return status.isOk() ? ended : status;
}

Status NcclTransport::nativeAllreduce(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, void* stream) {
  if (op == ReduceOp::kAverage) {
    return Status::internal("the native allreduce sums and divides after: no average here");
  }
  ncclRedOp_t nop = ncclSum;
  if (op == ReduceOp::kMin) nop = ncclMin;
  if (op == ReduceOp::kMax) nop = ncclMax;
  return check(
      ncclAllReduce(send, recv, count, ncclTypeOf(type), nop, handle(comm_), streamOf(stream)),
      "ncclAllReduce");
}

Status NcclTransport::broadcast(void* data, size_t bytes, int root, void* stream) {
  return check(ncclBroadcast(data, data, bytes, ncclInt8, root, handle(comm_), streamOf(stream)),
               "ncclBroadcast");
}

Status NcclTransport::allgather(const void* send, void* recv, size_t bytes, void* stream) {
  return check(ncclAllGather(send, recv, bytes, ncclInt8, handle(comm_), streamOf(stream)),
               "ncclAllGather");
}

}  // namespace detcoll::collective::transport
