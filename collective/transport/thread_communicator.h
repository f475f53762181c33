#pragma once

#include <functional>
#include <memory>

#include "collective/transport/communicator.h"
#include "collective/transport/record_board.h"

namespace detcoll::collective::transport {

class ThreadWorld;

// N ranks as threads in one process, for unit tests (Gloo's approach). Messages are matched by
// (source, destination, tag) in posting order and copied once, by whichever side arrives second.
// A world made with a record board (spawn's `board`) gives every communicator one, in memory the
// threads share; only then do patience, abandon() and health() mean anything here.
class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadWorld> world, int rank);
  ~ThreadCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override;
  std::unique_ptr<Transfer> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Transfer> irecv(void* data, size_t capacity, int peer, int tag) override;
  // A communicator over the same ranks whose messages never match this one's (MPI_Comm_dup):
  // every rank's k-th duplicate joins the same world.
  std::unique_ptr<ThreadCommunicator> duplicate();

  RecordBoard* board() override { return board_.get(); }
  void setPatience(const Patience& patience) override;
  void abandon(const Status& why) override;
  Status health() override;

 private:
  std::shared_ptr<ThreadWorld> world_;
  int rank_;
  size_t duplicates_ = 0;
  std::unique_ptr<RecordBoard> board_;
  Status broken_;  // this rank's own reason, once it gave up
};

// Runs fn on `size` threads, each with the communicator of one rank, and joins them. Returns the
// first failure: an exception that escaped fn, with the rank that threw it. With `board`, the
// communicators (and their duplicates) have a record board.
Status spawn(int size, const std::function<void(Communicator&)>& fn, bool board = false);

}  // namespace detcoll::collective::transport
