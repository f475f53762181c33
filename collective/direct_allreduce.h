#pragma once

// The pipeline every deterministic allreduce runs on: a direct reduce-scatter then an allgather.
//
// The element range is cut into rounds of P shards. In each round, rank j sends its piece of
// shard s to rank s; rank s combines the P pieces of its shard (its own read in place) with a
// fold callback that sees them in rank order; then every rank's reduced shard is allgathered.
// Each rank sends and receives 2(P-1)/P of the data, like a ring, in one step instead of P-1.
// Rounds are pipelined: round q+1's transfers and round q's allgather overlap round q's fold.
//
// Input and output elements may differ in size and meaning (the invariant mode reduce-scatters
// int64 encodings and allgathers the decoded dtype), and the input may be produced per round by
// an encode callback, so that memory stays at 2 * P * segment elements whatever the count.

#include <cstddef>
#include <functional>

#include "collective/transport/communicator.h"

namespace detcoll::collective {

struct DirectAllreduce {
  size_t count = 0;
  // Reduce-scatter input, inBytes per element: read from `input` when set, else produced by
  // encode(begin, n, dst) for elements [begin, begin + n).
  size_t inBytes = 0;
  const void* input = nullptr;
  std::function<void(size_t begin, size_t n, void* dst)> encode;
  // Allgather output, outBytes per element. output may equal input (in place).
  size_t outBytes = 0;
  void* output = nullptr;
  // Writes the reduced elements [begin, begin + n) into out from the P pieces, in rank order.
  std::function<void(void* out, const void* const* pieces, int p, size_t begin, size_t n)> fold;
  // Input bytes of each shard per round.
  size_t segmentBytes = 1 << 20;
};

// Runs the pipeline; the same call on every rank. No argument checks (see collectives.h).
Status runDirectAllreduce(Communicator& comm, const DirectAllreduce& spec);

}  // namespace detcoll::collective
