// MpiCommunicator's record board (record_board.h; docs/design.md, "The record board"): a POSIX
// shared-memory segment that rank 0 creates and every rank maps, where every rank of the
// communicator is on one node.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "collective/transport/mpi_communicator.h"

namespace detcoll::collective::transport {
namespace {

// The segment's name travels to every rank in this many bytes.
constexpr int kNameBytes = 64;

// Whether every rank's `ok` is true: the choice is every rank's or none's.
bool everyRank(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0;
  int all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all == 1;
}

// Rank 0's new segment of `bytes` zeroed bytes, its name in `name`; "" when none could be made.
int createSegment(size_t bytes, char* name) {
  static std::atomic<unsigned> made{0};
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::snprintf(name, kNameBytes, "/detcoll-board-%ld-%u", static_cast<long>(getpid()),
                  made.fetch_add(1));
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) continue;
    // Allocated now, so that a full /dev/shm fails here instead of faulting on a later write.
    if (posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0) return fd;
    close(fd);
    shm_unlink(name);
    break;
  }
  name[0] = 0;
  return -1;
}

}  // namespace

bool MpiCommunicator::attachBoard(std::string* why) {
  if (board_) return true;
  if (size_ < 2) {
    *why = "one rank needs no agreement";
    return false;
  }
  MPI_Comm node = MPI_COMM_NULL;
  int nodeSize = 0;
  if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &nodeSize);
    MPI_Comm_free(&node);
  }
  if (!everyRank(comm_, nodeSize == size_)) {
    *why = "the ranks are on more than one node";
    return false;
  }
  const size_t bytes = RecordBoard::bytes(size_);
  char name[kNameBytes] = {0};
  int fd = -1;
  if (rank_ == 0) fd = createSegment(bytes, name);
  MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, comm_);
  if (name[0] == 0) {
    *why = "rank 0 could not make a POSIX shared-memory segment";
    return false;
  }
  if (rank_ != 0) fd = shm_open(name, O_RDWR, 0600);
  void* memory = MAP_FAILED;
  // A segment of another size is not the one rank 0 made (a rank with another /dev/shm): mapped,
  // it would fault past its end.
  struct stat made {};
  if (fd >= 0 && fstat(fd, &made) == 0 && static_cast<size_t>(made.st_size) == bytes) {
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (fd >= 0) close(fd);
  // Every rank has opened the segment (or failed to) once this returns: its name can go.
  const bool mapped = everyRank(comm_, memory != MAP_FAILED);
  if (rank_ == 0) shm_unlink(name);
  if (!mapped) {
    if (memory != MAP_FAILED) munmap(memory, bytes);
    *why = "a rank could not map the shared-memory segment " + std::string(name);
    return false;
  }
  boardMemory_ = memory;
  boardBytes_ = bytes;
  board_ = std::make_unique<RecordBoard>(memory, rank_, size_, *this);
  board_->setPatience(patience_);
  return true;
}

void MpiCommunicator::releaseBoard() {
  board_.reset();
  if (boardMemory_ != nullptr) munmap(boardMemory_, boardBytes_);
  boardMemory_ = nullptr;
}

}  // namespace detcoll::collective::transport
