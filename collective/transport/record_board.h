#pragma once

// The record board (docs/design.md, "The record board"): the agreement's exchange, and the
// allreduce's exchange of whole contributions where they fit, through memory that every rank of a
// communicator maps, where they all share one node. Each rank has two slots;
// the record of its k-th exchange goes to slot k mod 2 with the sequence number k, written last
// (a release store), and a rank reads a peer's record once that peer's slot shows k. Two slots
// suffice: a rank can start its exchange k + 2, and overwrite slot k mod 2, only after reading
// every rank's record of k + 1, which each rank posts only after reading every record of k. So a
// record read here stays valid until this rank's next exchange, and is read in place.
//
// Failures keep the message path's rules (docs/design.md, "Failures"): a wait has the
// communicator's patience (warning, limit), a rank that gives up posts its reason on the board
// (the first reason posted stays), every waiting rank sees it at once, and an exchange that
// completes after a reason was posted fails with it, so that a rank that was away never completes
// a call from records the others left behind.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collective/transport/communicator.h"
#include "common/status.h"

namespace detcoll::collective::transport {

class RecordBoard {
 public:
  // The largest record of any board: at least the call agreement's header and inline payload,
  // with room to spare.
  static constexpr size_t kAgreementCapacity = (16 << 10) + 64;
  // The largest record of a board of `ranks` ranks: 512 KiB where the slots of all ranks stay
  // within about 4 MiB (up to 4 ranks), less for more ranks, never below kAgreementCapacity. The
  // allreduce's one exchange of whole contributions (collective/allreduce.h) goes through the board
  // up to it.
  static size_t capacity(int ranks);
  // The longest reason a notice carries (a longer one is cut).
  static constexpr size_t kNoticeText = 2048;

  struct Slot;  // one rank's record of one exchange (the layout: record_board.cc)

  // Bytes of shared memory a board of `ranks` ranks takes.
  static size_t bytes(int ranks);

  // A board over `memory` (bytes(size) bytes, zeroed before any rank's first exchange, mapped by
  // every rank) for rank `rank` of `size`. `owner` is this rank's communicator: waits ask its
  // health() and give up through its abandon(), which the owner makes post a notice here.
  RecordBoard(void* memory, int rank, int size, Communicator& owner);

  void setPatience(const Patience& patience) { patience_ = patience; }

  size_t capacity() const { return capacity_; }

  // Posts `bytes` (at most capacity()) of `record` as this rank's record of its next
  // exchange and waits for every rank's record of the same exchange.
  Status exchange(const void* record, size_t bytes);
  // Where this rank's record of its next exchange goes: a record written here is posted without a
  // copy (exchange(nextRecord(), bytes)). After a failed exchange, a buffer of the board's own
  // instead, since a peer may still be reading the slot.
  char* nextRecord();
  // Rank j's record of the last exchange: valid until this rank's next exchange. Records are
  // 16-byte aligned, and record(j) = record(0) + j * recordStride().
  const char* record(int rank) const;
  size_t recordStride() const { return 2 * slotBytes_; }
  size_t recordBytes(int rank) const;

  // The first reason any rank posted wins; returns the reason the board holds afterwards.
  Status postNotice(const Status& why);
  // One load: whether any rank has posted a reason.
  bool noticed() const;
  // The posted reason (waits for a poster still writing it); ok when none was posted.
  Status notice() const;

 private:
  Slot* slot(int rank, uint64_t sequence) const;
  bool arrived(int rank, uint64_t sequence) const;
  // The patience of one exchange, whichever peers it waits for.
  struct Wait {
    using Clock = std::chrono::steady_clock;
    bool started = false;
    Clock::time_point start;
    Clock::time_point nextLook;
    double nextWarning = 0;
  };
  Status waitFor(int rank, uint64_t sequence, Wait* wait);

  char* memory_;
  int rank_;
  int size_;
  size_t capacity_;   // capacity(size_)
  size_t slotBytes_;  // a slot's header and record, in whole lines
  Communicator& owner_;
  Patience patience_;
  uint64_t sequence_ = 0;  // this rank's exchanges so far
  bool completed_ = true;  // the last exchange completed (none yet counts)
  // More ranks than the node has cores: waits yield at once (record_board.cc).
  bool oversubscribed_ = false;
  std::vector<char> scratch_;  // drafts while a slot may still be read (nextRecord())
};

}  // namespace detcoll::collective::transport
