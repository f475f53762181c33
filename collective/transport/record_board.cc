#include "collective/transport/record_board.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace detcoll::collective::transport {
namespace {

constexpr size_t kLine = 64;

size_t roundUp(size_t n) {
  return (n + kLine - 1) / kLine * kLine;
}

// The notice area, first on the board: state 0 (none), 1 (a rank is writing its reason), 2 (the
// reason is there). Plain words read and written with atomic built-ins, since the memory may be
// another process's mapping.
struct Notice {
  uint32_t state;
  uint32_t code;
  uint32_t length;
  char text[RecordBoard::kNoticeText];
};

// How long a wait spins before it yields the core on every poll: long enough for a peer that is
// a few microseconds behind. Where the node has fewer cores than ranks, a wait yields at once:
// the peer it waits for may need this very core.
constexpr std::chrono::microseconds kSpinTime(50);
// How long a reader waits for a poster between its two stores (descheduled, on an oversubscribed
// node) before it takes the poster for dead.
constexpr std::chrono::seconds kNoticeWriteSeconds(10);
// The most of a record that an exchange prefetches.
constexpr size_t kPrefetchBytes = 4096;
// Polls between looks at the board's notice and the clock.
constexpr unsigned kPollsPerLook = 64;

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

// The lines [from, to) of a slot.
inline void prefetchLines(const void* slot, size_t from, size_t to) {
  const char* base = static_cast<const char*>(slot);
  for (size_t l = from; l < to; ++l) __builtin_prefetch(base + l * kLine);
}

// A slot: its sequence number and size, then the record (up to the board's capacity), whose
// first 48 bytes (a call's 32-byte header and the first 16 bytes of its leaves) share their line
// with the sequence number, so that the load that sees a record arrive brings the header too.
struct RecordBoard::Slot {
  uint64_t sequence;
  uint64_t bytes;
  char* data() { return reinterpret_cast<char*>(this + 1); }
};

namespace {

// The slots of a board take about this much memory, however many ranks share it.
constexpr size_t kSlotsBudget = 4 << 20;
constexpr size_t kLargestRecord = 512 << 10;

// The lines of a slot whose record has `bytes` bytes, up to kPrefetchBytes of them.
size_t linesOf(size_t bytes) {
  return (sizeof(RecordBoard::Slot) + std::min(bytes, kPrefetchBytes) + kLine - 1) / kLine;
}

size_t slotBytesOf(int ranks) {
  return roundUp(sizeof(RecordBoard::Slot) + RecordBoard::capacity(ranks));
}

}  // namespace

size_t RecordBoard::capacity(int ranks) {
  const size_t share = kSlotsBudget / (2 * static_cast<size_t>(std::max(ranks, 1)));
  return std::max(kAgreementCapacity, roundUp(std::min(kLargestRecord, share)));
}

size_t RecordBoard::bytes(int ranks) {
  return roundUp(sizeof(Notice)) + static_cast<size_t>(ranks) * 2 * slotBytesOf(ranks);
}

RecordBoard::RecordBoard(void* memory, int rank, int size, Communicator& owner)
    : memory_(static_cast<char*>(memory)),
      rank_(rank),
      size_(size),
      capacity_(capacity(size)),
      slotBytes_(slotBytesOf(size)),
      owner_(owner) {
  // Every rank of a board is on this node (a rank bound to one core still has a core of its own).
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  oversubscribed_ = cores > 0 && size > cores;
}

RecordBoard::Slot* RecordBoard::slot(int rank, uint64_t sequence) const {
  const size_t index = static_cast<size_t>(rank) * 2 + (sequence & 1);
  return reinterpret_cast<Slot*>(memory_ + roundUp(sizeof(Notice)) + index * slotBytes_);
}

bool RecordBoard::arrived(int rank, uint64_t sequence) const {
  return __atomic_load_n(&slot(rank, sequence)->sequence, __ATOMIC_ACQUIRE) == sequence;
}

char* RecordBoard::nextRecord() {
  // After an exchange that completed, the slot of the exchange before it, which every peer has
  // done with: each posted the last exchange's record, and a rank posts only once it is done
  // with the records before. After one that failed, a peer may still be reading that slot: the
  // draft goes elsewhere (and exchange() fails before posting it).
  if (!completed_ || noticed()) {
    scratch_.resize(capacity_);
    return scratch_.data();
  }
  return slot(rank_, sequence_ + 1)->data();
}

const char* RecordBoard::record(int rank) const {
  return slot(rank, sequence_)->data();
}

size_t RecordBoard::recordBytes(int rank) const {
  return slot(rank, sequence_)->bytes;
}

Status RecordBoard::exchange(const void* record, size_t bytes) {
  if (bytes > capacity_) {
    return Status::internal("a record of " + std::to_string(bytes) +
                            " bytes exceeds the record board's " + std::to_string(capacity_));
  }
  if (noticed()) return owner_.health();
  const uint64_t sequence = ++sequence_;
  completed_ = false;
  Slot* mine = slot(rank_, sequence);
  if (bytes > 0 && record != mine->data()) std::memcpy(mine->data(), record, bytes);
  mine->bytes = bytes;
  __atomic_store_n(&mine->sequence, sequence, __ATOMIC_RELEASE);
  // Ranks in one agreement mostly post records of one size: the lines this rank's record takes
  // are the lines to ask for early, all at once, so that a peer's record arrives in one round of
  // misses instead of its first line and then the rest.
  const size_t lines = linesOf(bytes);
  for (int i = 1; i < size_; ++i) prefetchLines(slot((rank_ + i) % size_, sequence), 0, lines);
  Wait wait;  // one clock for the whole exchange, however many peers it waits for
  for (int i = 1; i < size_; ++i) {
    const int peer = (rank_ + i) % size_;
    if (!arrived(peer, sequence)) DETCOLL_RETURN_IF_ERROR(waitFor(peer, sequence, &wait));
    // Again, now that the record is there (lines asked for early may have been written since),
    // while the other peers are waited for.
    const Slot* theirs = slot(peer, sequence);
    prefetchLines(theirs, 1, linesOf(theirs->bytes));
  }
  // A rank that gave up while this one was away left its records behind: they complete nothing.
  if (noticed()) return owner_.health();
  completed_ = true;
  return Status::ok();
}

Status RecordBoard::waitFor(int peer, uint64_t sequence, Wait* wait) {
  for (uint64_t polls = 1;; ++polls) {
    if (arrived(peer, sequence)) return Status::ok();
    relax();
    if (polls % kPollsPerLook != 0) continue;
    if (noticed()) return owner_.health();
    const Wait::Clock::time_point now = Wait::Clock::now();
    if (!wait->started) {
      wait->started = true;
      wait->start = now;
      wait->nextLook = now + std::chrono::milliseconds(1);
      wait->nextWarning = patience_.warnSeconds;
      continue;
    }
    if (oversubscribed_ || now - wait->start > kSpinTime) sched_yield();
    if (now < wait->nextLook) continue;
    wait->nextLook = now + std::chrono::milliseconds(1);
    DETCOLL_RETURN_IF_ERROR(owner_.health());
    const double waited = std::chrono::duration<double>(now - wait->start).count();
    const std::string whom = "the record of rank " + std::to_string(peer);
    if (patience_.limitSeconds > 0 && waited >= patience_.limitSeconds) {
      owner_.abandon(Status::timeout(
          "rank " + std::to_string(peer) + " stopped answering: rank " + std::to_string(rank_) +
          " waited " + secondsText(patience_.limitSeconds) + " for " + whom +
          " (the stall limit, DETCOLL_STALL_SHUTDOWN_SECONDS); detcoll stops communicating"));
      return owner_.health();
    }
    if (patience_.warnSeconds > 0 && waited >= wait->nextWarning) {
      wait->nextWarning += patience_.warnSeconds;
      if (patience_.warn) {
        patience_.warn("stall: rank " + std::to_string(rank_) + " has waited " +
                       secondsText(waited) + " for " + whom);
      }
    }
  }
}

Status RecordBoard::postNotice(const Status& why) {
  auto* notice = reinterpret_cast<Notice*>(memory_);
  uint32_t none = 0;
  if (__atomic_compare_exchange_n(&notice->state, &none, 1, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    const std::string& text = why.message();
    notice->code = static_cast<uint32_t>(why.code());
    notice->length = static_cast<uint32_t>(std::min(text.size(), kNoticeText));
    std::memcpy(notice->text, text.data(), notice->length);
    __atomic_store_n(&notice->state, 2, __ATOMIC_RELEASE);
  }
  return this->notice();
}

bool RecordBoard::noticed() const {
  return __atomic_load_n(&reinterpret_cast<const Notice*>(memory_)->state, __ATOMIC_ACQUIRE) != 0;
}

Status RecordBoard::notice() const {
  const auto* notice = reinterpret_cast<const Notice*>(memory_);
  uint32_t state = __atomic_load_n(&notice->state, __ATOMIC_ACQUIRE);
  if (state == 0) return Status::ok();
  // The poster writes a few hundred bytes between its two stores; one that died between them
  // leaves no reason to read.
  const auto end = std::chrono::steady_clock::now() + kNoticeWriteSeconds;
  while (state != 2) {
    if (std::chrono::steady_clock::now() > end) {
      return Status::timeout("a rank gave up on the communicator and died posting its reason");
    }
    sched_yield();
    state = __atomic_load_n(&notice->state, __ATOMIC_ACQUIRE);
  }
  uint32_t code = notice->code;
  if (code <= static_cast<uint32_t>(StatusCode::kSuccess) ||
      code > static_cast<uint32_t>(StatusCode::kInternal)) {
    code = static_cast<uint32_t>(StatusCode::kTimeout);
  }
  return Status(static_cast<StatusCode>(code),
                std::string(notice->text, std::min<size_t>(notice->length, kNoticeText)));
}

}  // namespace detcoll::collective::transport
