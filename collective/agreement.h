#pragma once

// How ranks agree (docs/design.md, "Agreement"). Every rank contributes a record of at most a
// fixed size; one exchange gives every rank every record, and every rank computes the same verdict
// from the same records. Only when that verdict is a failure (some rank's local check failed, or
// the records differ) do the ranks exchange texts (error messages, names), so that every rank words
// the failure identically. A failure is never one rank's alone: bad input on one rank, or ranks out
// of step, fail every rank with the same status and message instead of leaving some waiting.
//
// The wording is one too: ranks with equal values form a group, groups come in order of their
// lowest rank, and a group is named "rank 3" or "ranks 0, 2 and 5".
//
// Users: the call agreement before every blocking collective (call_agreement.h), agreements on a
// value (the root seed, a restored random state, DETCOLL_GPU_TRANSPORT: Collectives::agreeOnValue),
// the device path's agreements on local steps (device_path.h), and the fusion coordinator's
// verdicts on what ranks announced (fusion/coordinator.h), which it words with the same functions.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/transport/communicator.h"
#include "common/status.h"

namespace detcoll::collective {

// ---- wording
// -------------------------------------------------------------------------------------

// "rank 3", "ranks 0 and 1", "ranks 0, 2 and 5".
std::string describeRanks(const std::vector<int>& ranks);

// Ranks 0 .. n-1 grouped by equal values (same(a, b) compares ranks a and b): each group in rank
// order, groups in order of their lowest rank.
using RankGroups = std::vector<std::vector<int>>;
RankGroups groupRanks(int n, const std::function<bool(int a, int b)>& same);

// How a group and its value read.
enum class Phrase {
  kRanksThenValue,  // "rank 1: sendbuf is null; ranks 0 and 2: root 5 is not a rank" (errors)
  kValueOnRanks,    // "42 on ranks 0 and 1; 43 on rank 2" (values)
  kRanksHaveValue,  // "ranks 0 and 2 have X; rank 1 has Y" (descriptions)
};
// The groups, each with valueOf(its lowest rank), joined by "; "; past kShownGroups groups the
// rest are counted ("; and 3 more").
constexpr size_t kShownGroups = 8;
std::string describeGroups(const RankGroups& groups, const std::function<std::string(int)>& valueOf,
                           Phrase phrase);

// The verdict over every rank's status: ok when all are; else the code of the lowest failing rank
// and the failing ranks grouped by message ("rank 1: x; ranks 2 and 3: y").
Status verdict(const std::vector<Status>& statuses);

// ---- the exchange
// --------------------------------------------------------------------------------

// One agreement's messages over a communicator, with the agreement's own tag; every rank makes the
// same calls in the same order. Records and texts travel by a dissemination allgather: in round k
// (while 2^k < P) rank r sends to rank r - 2^k and receives from rank r + 2^k (mod P) the records
// it has gathered, each with its length, so that after ceil(log2 P) rounds, one message sent per
// round, every rank holds every record. A rank that fails in a round (a message it cannot read,
// a transport error) still sends in the rounds after it: the reason instead of records, which the
// ranks it reaches return as their failure, so that no rank waits for a message that never comes.
class Agreement {
 public:
  // A packet (a round's message: a 16-byte header, then per entry its length, 8 bytes, and its
  // bytes) travels in pieces of at most this many bytes, each under the eager limit of the
  // transports' shared-memory and network paths (Open MPI's vader: 4 KiB), so that a call of a
  // few KiB inline pays no rendezvous: the receiver takes the first piece, learns the packet's
  // size from its header and takes the rest, which the sender sent right behind it.
  static constexpr size_t kPieceBytes = 4096 - 128;

  // Contributes `bytes` of `record` and gathers every rank's record, each at most `capacity`
  // bytes; record(j) is then rank j's (this rank's own too), recordBytes(j) its size, until the
  // next exchange of any agreement on this communicator (where the communicator has a record
  // board, the records are read in place there: docs/design.md, "The record board").
  // A record shorter than `minimum`, or longer than `capacity`, is a mismatch: that rank is in
  // another agreement.
  Status exchangeRecords(transport::Communicator& comm, const void* record, size_t bytes,
                         size_t capacity, size_t minimum);
  // Where to write this rank's next record (of at most `capacity` bytes) so that
  // exchangeRecords(comm, draft, ...) posts it without a copy: the board's slot, or this
  // agreement's own.
  char* draft(transport::Communicator& comm, size_t capacity);
  const char* record(int rank) const { return at_[rank]; }
  size_t recordBytes(int rank) const { return sizes_[rank]; }

  // Every rank's texts (any number of any length). Called by every rank or by none: the ranks
  // decide from the records they all hold.
  Status exchangeTexts(transport::Communicator& comm, const std::vector<std::string>& mine,
                       std::vector<std::vector<std::string>>* all);

 private:
  // The allgather: rank j's entry at slots + offsets_[j], at most capacities_[j] bytes; this
  // rank's is there already, (*sizes)[rank] bytes. On success (*sizes)[j] is rank j's size.
  Status gather(transport::Communicator& comm, char* slots, std::vector<size_t>* sizes);
  // Packs the entries of ranks first .. first + n - 1 (mod P) into *packet.
  void pack(int p, int first, int n, const char* slots, const std::vector<size_t>& sizes,
            std::vector<char>* packet) const;
  // After the first piece of a packet from `from` (*bytes of it in received_): the pieces that
  // follow it, when its header says there are more (at most `capacity` bytes in all).
  Status receiveRest(transport::Communicator& comm, int from, size_t capacity, double grace,
                     size_t* bytes);
  // Reads a packet of n entries from rank `from` (the entries of ranks from .. from + n - 1).
  Status unpack(int p, int from, int n, const char* packet, size_t bytes, char* slots,
                std::vector<size_t>* sizes) const;

  // Every rank's record against `capacity` and `minimum`.
  Status checkSizes(int p, size_t capacity, size_t minimum) const;

  std::vector<char> records_;
  std::vector<const char*> at_;  // where each rank's record is
  std::vector<size_t> sizes_;
  std::vector<size_t> offsets_;
  std::vector<size_t> capacities_;
  std::vector<char> received_;           // one round's packet
  std::vector<std::vector<char>> sent_;  // each round's packet, until its send completes
  std::vector<std::unique_ptr<transport::Transfer>> sends_;
};

// Agrees on a local status: every rank returns verdict() of every rank's status. One exchange of
// status codes; the messages travel only when some rank failed.
Status agreeOnStatus(transport::Communicator& comm, const Status& local);

// ---- values
// ---------------------------------------------------------------------------------------

// A small value every rank holds (a seed, a hash of a state, a setting), agreed through the call
// agreement (Collectives::agreeOnValue) so that a rank making another call is told so.
struct AgreedValue {
  bool present = false;  // false: this rank has no value
  uint64_t words[2] = {0, 0};
};

// OK when every rank's value is the same (all absent counts as the same); else a mismatch that
// starts with `what` ("DETCOLL_SEED differs between ranks: ") and renders each group's value with
// describe ("42", "unset").
Status compareValues(const std::string& what, const std::vector<AgreedValue>& values,
                     const std::function<std::string(const AgreedValue&)>& describe);

}  // namespace detcoll::collective
