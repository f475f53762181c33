#pragma once

// How the requests that became ready in one cycle run: the same batches, in the same order, on
// every rank, because every rank plans the same ready list with the same options.
//
// Allreduces with the same dtype, op and mode are packed, in ready order, into fusion buffers of
// at most fusionThresholdBytes. A tensor of directBytes or more runs alone on its own buffers:
// it is bandwidth-bound already, and a fusion buffer would only add two copies. A threshold of 0
// turns fusion off. Broadcasts and allgathers run one by one. In ordered and invariant mode the
// packing cannot change any bit of a result (each element's reduction is independent of its
// offset and neighbours); in native mode it may, as it does in Horovod.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusion/request.h"

namespace detcoll::fusion {

struct PlanOptions {
  size_t fusionThresholdBytes = 64 << 20;
  size_t directBytes = 1 << 20;
  // The same for requests on device memory: there a fusion buffer's copies run at the device's
  // bandwidth and a call of its own costs more than they do, so only the threshold bounds them.
  size_t deviceDirectBytes = SIZE_MAX;
};

struct Batch {
  std::vector<RequestPtr> requests;
  bool fused = false;  // through the fusion buffer (two or more allreduces)
  size_t bytes = 0;    // of the members' send buffers
};

std::vector<Batch> planBatches(const std::vector<RequestPtr>& ready, const PlanOptions& options);

}  // namespace detcoll::fusion
