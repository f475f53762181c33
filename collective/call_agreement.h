#pragma once

// Before any data moves, the ranks exchange a fixed 256-byte description of the call each one is
// making: kind, tensor name, mode, dtype, op, count, root, and the result of its local argument
// checks. Every rank then computes the same verdict from the same descriptions, so bad input on
// one rank, or ranks out of step, give the same error on every rank instead of a hang.
//
// A small allreduce travels inside the description (inline payload), so checking costs no extra
// round trip where latency matters.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
  kSeed = 5,          // agreeing on the root seed
  kRestoreState = 6,  // agreeing on a restored random state
};

struct CallDescription {
  CallKind kind = CallKind::kAllreduce;
  std::string_view name;  // tensor name, "" when none was given
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
  // The largest inline payload, in bytes.
  static constexpr size_t kInlineBytes = 16 << 10;

  // Exchanges `mine` and up to kInlineBytes of payload with every rank and returns the verdict,
  // the same status on every rank. payload(j) is then rank j's inline data (a copy, for this
  // rank too).
  Status agree(Communicator& comm, const CallDescription& mine, const void* payload,
               size_t payloadBytes);

  const void* payload(int rank) const;
  size_t payloadBytes(int rank) const;
  int leaves(int rank) const;

 private:
  std::vector<char> slots_;  // one slot per rank: header then inline payload
  std::vector<std::unique_ptr<Transfer>> requests_;
  int rank_ = 0;
};

}  // namespace detcoll::collective
