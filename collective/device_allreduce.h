#pragma once

// The GPU data path's allreduce: collective/device_pipeline.h run on the device, over a
// DeviceTransport (NCCL between processes, or the tests' exchange between simulated ranks).
// Buffers are device memory; the work is enqueued on `stream` (a cudaStream_t) and the call
// returns without waiting for it. Bits: those of the CPU path for the same mode, leaves and
// world size. Built only with CUDA. No argument checks: the caller has agreed on the call.

#include <cstddef>
#include <cstdint>

#include "collective/device_transport.h"
#include "common/dtype.h"
#include "common/status.h"

namespace detcoll::collective {

// Input bytes of each shard per pipeline round on the device: large enough that a round's
// transfers run at full bandwidth; scratch is P such slots.
constexpr size_t kDeviceSegmentBytes = size_t{8} << 20;

// leaves: this rank's nleaves device buffers of count elements; recv may equal one of them.
// totalLeaves: the number of leaves over every rank (the divisor of average).
Status deviceAllreduce(DeviceTransport& transport, void* stream, Mode mode,
                       const void* const* leaves, int nleaves, void* recv, size_t count,
                       DataType type, ReduceOp op, int64_t totalLeaves,
                       size_t segmentBytes = kDeviceSegmentBytes);

}  // namespace detcoll::collective
