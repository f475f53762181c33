#pragma once

// The GPU data path's allreduce: collective/allreduce.h with the allreduce bodies on the device
// (kernels/bodies/reduce_kernels.h over kernels/device_executor.cuh), over an Exchange (NCCL
// between processes, or the tests' exchange between simulated ranks). Buffers are device memory;
// the work is enqueued on `stream` (a cudaStream_t) and the call returns without waiting for it.
// Bits: those of the CPU path for the same mode, leaves and world size. Built only with CUDA.
// No argument checks: the caller has agreed on the call.

#include <cstddef>

#include "collective/allreduce.h"
#include "collective/transport/exchange.h"
#include "common/status.h"

namespace detcoll::collective {

// Input bytes of each shard per round on the device path over NCCL: large enough that a round's
// transfers run at full bandwidth; scratch is 2 * P such slots (the schedule's staging by round
// parity), as much as P slots of twice the size.
constexpr size_t kDeviceSegmentBytes = size_t{4} << 20;

// options.leaves and options.recv are device memory (the leaves array itself is host memory).
Status deviceAllreduce(transport::Exchange& exchange, void* stream,
                       const AllreduceOptions& options);

}  // namespace detcoll::collective
