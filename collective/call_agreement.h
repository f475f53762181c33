#pragma once

// The call agreement (docs/design.md, "Agreement"): before any data moves, the ranks exchange a
// 32-byte description of the call each one is making (kind, name hash, mode, dtype, op, count,
// root, leaves, where the buffers live, and the result of its local argument checks) as the
// records of an agreement (agreement.h). Every rank computes the same verdict from the same
// records, so bad input on one rank, or ranks out of step, give the same error on every rank
// instead of a hang. Names and error texts travel only when the verdict is a failure.
//
// A small allreduce's leaves travel inside the record (inline payload), so that checking costs no
// extra round trip where latency matters.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collective/agreement.h"
#include "collective/transport/communicator.h"

namespace detcoll::collective {

// The most leaves one rank may contribute to an allreduce: the call header carries the count in
// 16 bits.
constexpr int kMaxLeavesPerRank = 65535;

enum class CallKind : int32_t {
  kInit = 1,
  kAllreduce = 2,
  kBroadcast = 3,
  kAllgather = 4,
  kValue = 5,  // an agreement on a value (Collectives::agreeOnValue); the name describes the call
  kReducescatter = 6,
  kAlltoall = 7,
};

struct CallDescription {
  CallKind kind = CallKind::kAllreduce;
  std::string_view name;  // tensor name, "" when none was given; for kValue, the call itself
  int mode = 0;
  int dtype = 0;
  int op = 0;
  int root = 0;
  int leaves = 1;  // buffers this rank contributes (allreduce); may differ between ranks
  uint64_t count = 0;
  bool device = false;  // the buffers are CUDA device memory (they must be on every rank)
  Status local;         // this rank's own argument checks
};

class CallAgreement {
 public:
  // The largest inline payload, in bytes; a record is a header and up to that much payload.
  static constexpr size_t kInlineBytes = 16 << 10;
  static constexpr size_t kHeaderBytes = 32;
  static constexpr size_t kRecordBytes = kHeaderBytes + kInlineBytes;

  // Exchanges `mine` and up to kInlineBytes of payload with every rank and returns the verdict,
  // the same status on every rank. payload(j) is then rank j's inline data (a copy, for this
  // rank too).
  Status agree(transport::Communicator& comm, const CallDescription& mine, const void* payload,
               size_t payloadBytes);
  // The same with the payload in pieces: nleaves buffers of leafBytes each, one after another,
  // written straight into the record (no copy of the leaves before it).
  Status agree(transport::Communicator& comm, const CallDescription& mine,
               const void* const* leaves, int nleaves, size_t leafBytes);

  const void* payload(int rank) const;
  size_t payloadBytes(int rank) const;
  int leaves(int rank) const;

 private:
  Agreement agreement_;
  // Every rank's header after a successful agree(): this rank's own copy for itself, the
  // agreement's records for the others.
  std::vector<const char*> headers_;
  char ownHeader_[kHeaderBytes] = {};
};

// The verdict of a call agreement from every rank's record as each rank holds it (records[j]:
// rank j's header and payload, kRecordBytes readable bytes), whatever the bytes: pure, so that
// tests and fuzzers drive it directly. callRecordsAgree: every record is one agree() could have
// sent, no local check failed and every rank describes the same call, so the call goes ahead.
// Otherwise the ranks exchange texts (texts[j]: rank j's name and local error, or nothing) and
// callFailure words the failure, the same on every rank.
bool callRecordsAgree(const std::vector<const char*>& records);
Status callFailure(const std::vector<const char*>& records,
                   const std::vector<std::vector<std::string>>& texts);

}  // namespace detcoll::collective
