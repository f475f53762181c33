#pragma once

// The messages of one negotiation cycle (engine.h): every rank sends the coordinator a
// RankMessage, the coordinator (coordinator.h) answers every rank with the same Response.
//
// A request is announced once, in the first cycle after it was enqueued: as a bit when the
// response cache (response_cache.h) holds its name with the same descriptor (the steady state:
// a step of training costs a few bytes per rank), else in full. Requests that failed a local
// check are announced in full with the error text, so that every rank fails them alike.

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "fusion/request.h"

namespace detcoll::fusion {

// A set of cache ids.
class BitSet {
 public:
  void set(uint32_t i) {
    if (words_.size() <= i / 64) words_.resize(i / 64 + 1, 0);
    words_[i / 64] |= uint64_t{1} << (i % 64);
  }
  bool test(uint32_t i) const {
    return i / 64 < words_.size() && (words_[i / 64] >> (i % 64) & 1) != 0;
  }
  bool empty() const;
  // Set ids in increasing order.
  std::vector<uint32_t> ids() const;
  std::vector<uint64_t>& words() { return words_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::vector<uint64_t> words_;
};

struct Announcement {
  std::string name;
  Descriptor descriptor;
  std::string error;  // a local check's failure; empty when the request is valid
};

struct RankMessage {
  bool shutdown = false;     // this rank asks every rank to stop
  bool fastPathOff = false;  // this rank's engine does not take the fast path (fast_path.h)
  BitSet cached;             // cache ids of newly enqueued requests the cache describes
  std::vector<Announcement> announced;
};

struct ReadyEntry {
  std::string name;
  Descriptor descriptor;
};

struct ErrorEntry {
  std::string name;
  Status status;
};

struct Response {
  // Every rank's engine stops after this cycle (docs/design.md, "Failures"): a rank asked
  // (shutdownCode kNotInitialized), or a stall passed its limit (kTimeout, and the stalled names
  // are among the errors). Requests not complete then fail with the code and the reason.
  bool shutdown = false;
  StatusCode shutdownCode = StatusCode::kNotInitialized;
  std::string shutdownReason;
  BitSet cachedReady;              // ready everywhere, by cache id (run first, in id order)
  std::vector<ReadyEntry> ready;   // ready everywhere, not in the cache (run next, in this order)
  std::vector<ErrorEntry> errors;  // fail these names on every rank that has them
  // Some names were announced in the last few milliseconds by some ranks only: the rest are
  // probably being enqueued right now, so the next cycle starts at once instead of a cycle time
  // later.
  bool partial = false;
  // Nothing is pending at the coordinator after this response (every name announced has been
  // answered), no rank has joined, and no rank's fast path is off: a point where the engines may
  // start the fast path of a repeated step together (fast_path.h).
  bool quiet = false;
  // Rank 0's fusion threshold: every rank plans this cycle's batches with it, so that a threshold
  // set differently on some rank cannot make ranks run different collectives.
  uint64_t fusionThresholdBytes = 0;
  // When the join (kJoinName) is among the ready requests: the rank that joined last, which every
  // rank's join returns (Horovod's). -1 otherwise.
  int32_t lastJoined = -1;
};

std::vector<uint8_t> encode(const RankMessage& m);
Status decode(const uint8_t* data, size_t size, RankMessage* m);
std::vector<uint8_t> encode(const Response& r);
Status decode(const uint8_t* data, size_t size, Response* r);

}  // namespace detcoll::fusion
