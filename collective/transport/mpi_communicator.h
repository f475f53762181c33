#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "collective/transport/communicator.h"
#include "collective/transport/record_board.h"

namespace detcoll::collective::transport {

// Communicator over MPI. It works on a duplicate of the given communicator, so detcoll's messages
// never match the caller's, with MPI_ERRORS_RETURN, so an MPI failure becomes a status instead of
// an abort. MPI's own collectives are its native ones, started nonblocking and waited for like
// any transfer.
//
// Waits: with no patience set, MPI_Wait. With patience, a loop of MPI_Test (MPI progresses only
// inside MPI calls, so it never sleeps) that every millisecond looks at the clock and probes for
// abandonment notices. Open MPI 4 has no failure notification (ULFM is not in Debian's build), so
// a peer that stopped answering is one that sent nothing for the limit.
class MpiCommunicator : public Communicator, public NativeCollectives {
 public:
  static Status create(MPI_Comm parent, std::unique_ptr<MpiCommunicator>* out);
  ~MpiCommunicator() override;

  // Collective: gives the communicator a record board (record_board.h) in POSIX shared memory
  // when every rank is on this node and every rank could map it, on every rank or on none
  // (mpi_board.cc). False, with the reason in *why, where there is none.
  bool attachBoard(std::string* why);
  RecordBoard* board() override { return board_.get(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }

  std::unique_ptr<Transfer> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Transfer> irecv(void* data, size_t capacity, int peer, int tag) override;
  NativeCollectives* native() override { return this; }

  // MPI_Allreduce; float16 and bfloat16 through user-defined MPI operations (each step rounds
  // to the dtype).
  Status allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override;
  Status allreduceMaxUnsigned(void* data, size_t count, size_t bytes) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status allgather(const void* send, void* recv, size_t bytes) override;
  Status barrier() override;

  void setPatience(const Patience& patience) override {
    patience_ = patience;
    if (board_) board_->setPatience(patience);
  }
  void abandon(const Status& why) override;
  Status health() override;

  // What a wait is for, for its messages.
  enum class Waiting { kReceive, kSend, kCollective };
  // Waits for one request with the communicator's patience, its limit lengthened by
  // graceSeconds. A request given up on is released (a receive cancelled; a collective's left to
  // MPI) and the communicator abandoned.
  Status await(MPI_Request* request, MPI_Status* status, Waiting what, int peer, const char* call,
               double graceSeconds = 0);

 private:
  explicit MpiCommunicator(MPI_Comm comm);
  void releaseBoard();
  void release(MPI_Request* request, Waiting what);
  Status started(const char* call, int rc, MPI_Request* request);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  // ok, or why the communicator was given up (set once, by abandon() or a peer's notice). The
  // owner thread uses the communicator, but another may ask after its health (finalize).
  Status broken() const;
  bool setBroken(const Status& why);  // false when it was broken already

  Patience patience_;
  std::atomic<bool> isBroken_{false};
  mutable std::mutex brokenMutex_;
  Status broken_;

  std::unique_ptr<RecordBoard> board_;
  void* boardMemory_ = nullptr;
  size_t boardBytes_ = 0;
};

// The MPI type of a dtype: float16 and bfloat16 travel as MPI_UINT16_T (MPI has no such float
// types; allreduce reduces them with its own operations).
MPI_Datatype mpiDataType(DataType type);
// MPI's operation for a reduction; average is MPI_SUM (the division is done afterwards).
MPI_Op mpiReduceOp(ReduceOp op);

// Text of an MPI error code, as "MPI_Allreduce failed: <MPI's message>".
Status mpiError(const char* call, int code);

}  // namespace detcoll::collective::transport
