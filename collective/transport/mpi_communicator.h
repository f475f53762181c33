#pragma once

#include <mpi.h>

#include <memory>

#include "collective/transport/communicator.h"

namespace detcoll::collective::transport {

// Communicator over MPI. It works on a duplicate of the given communicator, so detcoll's messages
// never match the caller's, with MPI_ERRORS_RETURN, so an MPI failure becomes a status instead of
// an abort. MPI's own collectives are its native ones.
class MpiCommunicator : public Communicator, public NativeCollectives {
 public:
  static Status create(MPI_Comm parent, std::unique_ptr<MpiCommunicator>* out);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }

  std::unique_ptr<Transfer> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Transfer> irecv(void* data, size_t capacity, int peer, int tag) override;
  NativeCollectives* native() override { return this; }

  // MPI_Allreduce; float16 and bfloat16 through user-defined MPI operations (each step rounds
  // to the dtype).
  Status allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status allgather(const void* send, void* recv, size_t bytes) override;
  Status barrier() override;

 private:
  explicit MpiCommunicator(MPI_Comm comm);
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

// The MPI type of a dtype: float16 and bfloat16 travel as MPI_UINT16_T (MPI has no such float
// types; allreduce reduces them with its own operations).
MPI_Datatype mpiDataType(DataType type);
// MPI's operation for a reduction; average is MPI_SUM (the division is done afterwards).
MPI_Op mpiReduceOp(ReduceOp op);

// Text of an MPI error code, as "MPI_Allreduce failed: <MPI's message>".
Status mpiError(const char* call, int code);

}  // namespace detcoll::collective::transport
