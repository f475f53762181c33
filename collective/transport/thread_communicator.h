#pragma once

#include <functional>
#include <memory>

#include "collective/transport/communicator.h"

namespace detcoll::collective::transport {

class ThreadWorld;

// N ranks as threads in one process, for unit tests (Gloo's approach). Messages are matched by
// (source, destination, tag) in posting order and copied once, by whichever side arrives second.
class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadWorld> world, int rank);

  int rank() const override { return rank_; }
  int size() const override;
  std::unique_ptr<Transfer> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Transfer> irecv(void* data, size_t capacity, int peer, int tag) override;
  // A communicator over the same ranks whose messages never match this one's (MPI_Comm_dup):
  // every rank's k-th duplicate joins the same world.
  std::unique_ptr<ThreadCommunicator> duplicate();

 private:
  std::shared_ptr<ThreadWorld> world_;
  int rank_;
  size_t duplicates_ = 0;
};

// Runs fn on `size` threads, each with the communicator of one rank, and joins them. Returns the
// first failure: an exception that escaped fn, with the rank that threw it.
Status spawn(int size, const std::function<void(Communicator&)>& fn);

}  // namespace detcoll::collective::transport
